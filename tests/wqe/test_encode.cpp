// rdmx-wqe encode: hand-derived WQE bytes for every op, ring and index wrap, list limits,
// fences, and rejected batches. Each expected WQEBB is written one DS per line from the
// layouts (doc/guides/mlx5-facts.md §2) and rdma-core providers/mlx5/qp.c's rules (§3).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tool.hpp"
#include "wqe_test_util.hpp"

using nlohmann::json;
using rdmx::wqetest::bb;
using rdmx::wqetest::kZeroDs;
using rdmx::wqetest::seg16;

namespace {

json encode(const json& req) {
  const auto r = rdmx::wqetool::encode_line(req.dump());
  json out = json::parse(r.text);
  EXPECT_EQ(r.ok, out["rc"] == 0) << r.text;
  return out;
}

std::vector<std::string> wqebbs(const json& out) {
  EXPECT_EQ(out["rc"], 0) << out.dump();
  if (out["rc"] != 0) return {};
  return out["wqebbs"].get<std::vector<std::string>>();
}

void expect_reject(const json& req, const char* rc, const char* needle) {
  const auto r = rdmx::wqetool::encode_line(req.dump());
  EXPECT_FALSE(r.ok) << r.text;
  const json out = json::parse(r.text);
  EXPECT_EQ(out["rc"], rc) << r.text;
  EXPECT_FALSE(out.contains("wqebbs")) << r.text;
  EXPECT_NE(out["error"].get<std::string>().find(needle), std::string::npos) << r.text;
}

json queue(uint32_t qpn, uint32_t cnt, uint32_t pi, json wrs, uint32_t max_inline = 828) {
  return json{{"qpn", qpn},
              {"sq_wqe_cnt", cnt},
              {"sq_pi", pi},
              {"fm_cache", 0},
              {"max_inline_data", max_inline},
              {"wrs", std::move(wrs)}};
}

json mr_list(uint32_t mkey, uint32_t access, json entries) {
  return json{{"op", "mr_list"},
              {"inline", true},
              {"mkey", mkey},
              {"access_flags", access},
              {"entries", std::move(entries)}};
}

}  // namespace

// The issue's example: a one-entry mr_list at sq_pi 62 of a 64-WQEBB ring (it wraps: slots 62,
// 63, 0) followed by a signaled RDMA WRITE that inherits the small fence (0x20 | 0x08).
TEST(WqeEncode, MrListThenWriteWrapsAt64AndFencesTheWrite) {
  json req = json::parse(R"({"qpn": 291, "sq_wqe_cnt": 64, "sq_pi": 62, "fm_cache": 0,
    "max_inline_data": 828,
    "wrs": [ {"op": "mr_list", "signaled": false, "fence": false, "solicited": false,
              "inline": true, "mkey": 74565, "access_flags": 7,
              "entries": [{"lkey": 4660, "addr": 140737488355328, "length": 4096}]},
             {"op": "rdma_write", "signaled": true, "remote_addr": 0, "rkey": 74565,
              "sges": [{"lkey": 4660, "addr": 140737488359424, "length": 512}]} ]})");
  const json out = encode(req);
  EXPECT_EQ(out["sq_pi_after"], 66);
  EXPECT_EQ(out["doorbell_record"], 66);
  const std::vector<std::string> want = {
      // slot 62: ctrl {idx 0x3e, UMR, qpn 0x123, ds 12, fm_ce_se 0, imm = mkey 0x12345},
      //          UMR ctrl {INLINE, 4 octowords, mask 0x203c2001}
      bb({"00003e25 0001230c 00000000 00012345", "80000000 00040000 00000000 203c2001", kZeroDs,
          kZeroDs}),
      // slot 63: mkey ctx {access LW|RR|RW = 0x38, qpn 0xffffff, key 0x45, len 4096}
      bb({"00003800 ffffff45 00000000 00000000", "00000000 00000000 00000000 00001000", kZeroDs,
          kZeroDs}),
      // slot 0 (wrapped): KLM {4096, lkey 0x1234, 0x800000000000} + 3 zero pads
      bb({"00001000 00001234 00008000 00000000", kZeroDs, kZeroDs, kZeroDs}),
      // slot 1: RDMA WRITE idx 0x41, ds 3, fm_ce_se 0x28 (small fence + CQ update)
      bb({"00004108 00012303 00000028 00000000", "00000000 00000000 00012345 00000000",
          "00000200 00001234 00008000 00001000"}),
  };
  EXPECT_EQ(wqebbs(out), want);
}

// WQE index wrap: sq_pi 0xffff is index 0xffff in slot 63; the next WQE is index 0 in slot 0.
// The zero-length SGE of the READ takes no segment (qp.c skips it).
TEST(WqeEncode, WqeIndexWrapsAt0xffff) {
  json wrs = json::array();
  wrs.push_back({{"op", "send"},
                 {"signaled", true},
                 {"sges", {{{"lkey", 0x11}, {"addr", 0x1000}, {"length", 64}}}}});
  wrs.push_back({{"op", "rdma_read"},
                 {"remote_addr", 0x2000},
                 {"rkey", 0x22},
                 {"sges",
                  {{{"lkey", 0x11}, {"addr", 0x3000}, {"length", 0}},
                   {{"lkey", 0x33}, {"addr", 0x4000}, {"length", 128}}}}});
  const json out = encode(queue(0xabc, 64, 0xffff, wrs));
  EXPECT_EQ(out["sq_pi_after"], 0x10001);
  EXPECT_EQ(out["doorbell_record"], 1);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00ffff0a 000abc02 00000008 00000000", "00000040 00000011 00000000 00001000"}),
                bb({"00000010 000abc03 00000000 00000000", "00000000 00002000 00000022 00000000",
                    "00000080 00000033 00000000 00004000"}),
            }));
}

// 0 entries: not rejected (rdma-core neither); 8 DS, octowords 0, len 0, still enabled.
TEST(WqeEncode, MrListZeroEntries) {
  const json out = encode(queue(1, 8, 0, {mr_list(0x500, 0, json::array())}));
  EXPECT_EQ(out["sq_pi_after"], 2);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000025 00000108 00000000 00000500", "80000000 00000000 00000000 203c2001"}),
                bb({"00000000 ffffff00 00000000 00000000"}),
            }));
}

// The longest inline list: (828 + 4) / 16 = 52 entries, 60 DS, 15 WQEBBs, starting 4 slots
// before the ring end so the list wraps after its 2nd WQEBB of KLMs.
TEST(WqeEncode, LongestInlineListWraps) {
  json entries = json::array();
  for (uint32_t i = 0; i < 52; ++i)
    entries.push_back(
        {{"lkey", 0x100 + i}, {"addr", 0x7f0000000000ull + i * 0x1000ull}, {"length", 0x1000}});
  const json out = encode(queue(7, 64, 60, {mr_list(0x00abcd00, 0xf, entries)}));
  EXPECT_EQ(out["sq_pi_after"], 75);
  EXPECT_EQ(out["doorbell_record"], 75);
  std::vector<std::string> want = {
      bb({"00003c25 0000073c 00000000 00abcd00", "80000000 00340000 00000000 203c2001"}),
      // access A|RW|RR|LW = 0x78; len 52 * 4096 = 0x34000
      bb({"00007800 ffffff00 00000000 00000000", "00000000 00000000 00000000 00034000"}),
  };
  for (uint32_t w = 0; w < 13; ++w) {
    std::vector<std::string> lines;
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t i = w * 4 + k;
      lines.push_back(seg16(0x1000, 0x100 + i, 0x7f0000000000ull + i * 0x1000ull));
    }
    want.push_back(bb({lines[0], lines[1], lines[2], lines[3]}));
  }
  EXPECT_EQ(wqebbs(out), want);
}

TEST(WqeEncode, ListOneEntryTooLongIsEnomem) {
  json entries = json::array();
  for (uint32_t i = 0; i < 53; ++i)
    entries.push_back({{"lkey", 1}, {"addr", i * 64}, {"length", 64}});
  expect_reject(queue(7, 64, 0, {mr_list(0x100, 1, entries)}), "ENOMEM", "inline capacity of 52");
  // The same limit from a smaller QP: (827 + 4) / 16 = 51.
  entries.erase(entries.end() - 1);
  expect_reject(queue(7, 64, 0, {mr_list(0x100, 1, entries)}, 827), "ENOMEM",
                "inline capacity of 51");
  // The default QP (max_inline_data 60 -> 4 entries) and the mkey's own size.
  json five = json::array();
  for (int i = 0; i < 5; ++i) five.push_back({{"lkey", 1}, {"addr", 0}, {"length", 1}});
  expect_reject(queue(7, 64, 0, {mr_list(0x100, 1, five)}, 60), "ENOMEM", "capacity of 4");
  json wr = mr_list(0x100, 1, five);
  wr["mkey_max_entries"] = 4;
  expect_reject(queue(7, 64, 0, {wr}), "ENOMEM", "capacity of 4");
}

TEST(WqeEncode, MrInterleaved) {
  json wr = {{"op", "mr_interleaved"},
             {"inline", true},
             {"mkey", 0x307},
             {"access_flags", 6},
             {"repeat_count", 3},
             {"interleaved",
              {{{"lkey", 0x1234}, {"addr", 0x1000}, {"bytes_count", 512}, {"bytes_skip", 512}},
               {{"lkey", 0x5678}, {"addr", 0x2000}, {"bytes_count", 64}, {"bytes_skip", 0}}}}};
  const json out = encode(queue(0x42, 16, 5, {wr}));
  EXPECT_EQ(out["sq_pi_after"], 8);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000525 0000420c 00000000 00000307", "80000000 00040000 00000000 203c2001"}),
                // access RR|RW = 0x30, key 0x07, len (512 + 64) * 3 = 0x6c0
                bb({"00003000 ffffff07 00000000 00000000", "00000000 00000000 00000000 000006c0"}),
                // repeat block {0x240, op 0x400, repeat 3, num_ent 2}, entries, 1 zero pad
                bb({"00000240 00000400 00000003 00000002", "04000200 00001234 00000000 00001000",
                    "00400040 00005678 00000000 00002000"}),
            }));
  // Interleaved capacity: (828 + 4) / 16 - 1 = 51.
  json many = wr;
  many["interleaved"] = json::array();
  for (int i = 0; i < 52; ++i)
    many["interleaved"].push_back(
        {{"lkey", 1}, {"addr", 0}, {"bytes_count", 1}, {"bytes_skip", 0}});
  expect_reject(queue(1, 64, 0, {many}), "ENOMEM", "capacity of 51");
  json wide = wr;
  wide["interleaved"][0]["bytes_skip"] = 0xff00;
  expect_reject(queue(1, 64, 0, {wide}), "EINVAL", "16 bits");
}

TEST(WqeEncode, RdmaWriteInlineAndImm) {
  json wrs = json::array();
  wrs.push_back({{"op", "rdma_write"},
                 {"signaled", true},
                 {"inline", true},
                 {"remote_addr", 0xdead0000},
                 {"rkey", 0x99},
                 {"inline_data_hex", "68656c6c6f"}});
  wrs.push_back({{"op", "rdma_write_imm"},
                 {"remote_addr", 0x10},
                 {"rkey", 0x98},
                 {"imm_data", 7},
                 {"sges", {{{"lkey", 5}, {"addr", 0x40}, {"length", 8}}}}});
  const json out = encode(queue(1, 8, 3, wrs));
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000308 00000103 00000008 00000000", "00000000 dead0000 00000099 00000000",
                    "80000005 68656c6c 6f000000 00000000"}),
                bb({"00000409 00000103 00000000 00000007", "00000000 00000010 00000098 00000000",
                    "00000008 00000005 00000000 00000040"}),
            }));
}

// 60 inline bytes from the ring's last slot: 5 DS, the last 16 data bytes wrap to slot 0.
TEST(WqeEncode, SendInlineWrapsAtRingEnd) {
  std::string data;
  char b[3];
  for (int i = 0; i < 60; ++i) {
    std::snprintf(b, sizeof b, "%02x", i);
    data += b;
  }
  const json out = encode(queue(1, 8, 7, {{{"op", "send"}, {"inline_data_hex", data}}}));
  EXPECT_EQ(out["sq_pi_after"], 9);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"0000070a 00000105 00000000 00000000", "8000003c 00010203 04050607 08090a0b",
                    "0c0d0e0f 10111213 14151617 18191a1b", "1c1d1e1f 20212223 24252627 28292a2b"}),
                bb({"2c2d2e2f 30313233 34353637 38393a3b"}),
            }));
  // Zero inline bytes add no segment; more than max_inline_data is ENOMEM.
  const json empty = encode(queue(1, 8, 0, {{{"op", "send"}, {"inline_data_hex", ""}}}));
  EXPECT_EQ(wqebbs(empty), (std::vector<std::string>{bb({"0000000a 00000101 00000000 00000000"})}));
  expect_reject(queue(1, 8, 0, {{{"op", "send"}, {"inline_data_hex", "0102"}}}, 1), "ENOMEM",
                "max_inline_data");
}

TEST(WqeEncode, SendImmAndSendInv) {
  json wrs = json::array();
  wrs.push_back({{"op", "send_inv"},
                 {"invalidate_rkey", 0x12345678},
                 {"sges", {{{"lkey", 5}, {"addr", 0x10}, {"length", 16}}}}});
  wrs.push_back({{"op", "send_imm"}, {"solicited", true}, {"imm_data", 0xcafe}});
  const json out = encode(queue(1, 8, 0, wrs));
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000001 00000102 00000000 12345678", "00000010 00000005 00000000 00000010"}),
                bb({"0000010b 00000101 00000002 0000cafe"}),
            }));
}

// LOCAL_INV is rdma-core's UMR form; the next WQE inherits the small fence.
TEST(WqeEncode, LocalInvThenSendInheritsSmallFence) {
  json wrs = json::array();
  wrs.push_back({{"op", "local_inv"}, {"signaled", true}, {"invalidate_rkey", 0x12345}});
  wrs.push_back({{"op", "send"}});
  const json out = encode(queue(0x123, 8, 6, wrs));
  EXPECT_EQ(out["sq_pi_after"], 9);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000625 00012308 00000008 00012345", "98000000 00000000 00000000 20006000"}),
                bb({"40000000 ffffff00 00000000 00000000"}),
                bb({"0000080a 00012301 00000020 00000000"}),
            }));
}

// ibv_wr_bind_mw of a type-2 window (qp.c set_bind_wr): 12 DS, the posting QP in the mkey
// context; the next WQE inherits the small fence. Field by field as the builder test.
TEST(WqeEncode, BindMwThenWriteInheritsSmallFence) {
  json wrs = json::array();
  wrs.push_back({{"op", "bind_mw"},
                 {"signaled", true},
                 {"mw_rkey", "0xabcd07"},
                 {"rkey", "0xabcd08"},
                 {"lkey", 0x5500},
                 {"addr", "0x7f0000001000"},
                 {"length", 0x2000},
                 {"mw_access_flags", 6}});  // REMOTE_WRITE | REMOTE_READ
  wrs.push_back({{"op", "rdma_write"}, {"remote_addr", 0}, {"rkey", "0xabcd08"}});
  const json out = encode(queue(0x123, 8, 3, wrs));
  EXPECT_EQ(out["sq_pi_after"], 7);
  EXPECT_EQ(wqebbs(out),
            (std::vector<std::string>{
                bb({"00000325 0001230c 00000008 00abcd07", "b0000000 00040000 00000000 203c6041",
                    kZeroDs, kZeroDs}),
                bb({"00003000 00012308 00000000 00000000", "00007f00 00001000 00000000 00002000",
                    kZeroDs, kZeroDs}),
                bb({"00002000 00005500 00007f00 00001000", kZeroDs, kZeroDs, kZeroDs}),
                bb({"00000608 00012302 00000020 00000000", "00000000 00000000 00abcd08 00000000"}),
            }));
  // Type 1, zero based, unbind (length 0).
  json t1 = wrs[0];
  t1["mw_type"] = 1;
  t1["mw_access_flags"] = 0x20 | 4;
  const auto b1 = wqebbs(encode(queue(0x123, 8, 0, {t1})));
  ASSERT_EQ(b1.size(), 3u);
  EXPECT_EQ(b1[0].substr(32, 32),
            "9000000000040000"
            "00000000203c2041");  // no CHECK_FREE, QPN
  EXPECT_EQ(b1[1].substr(0, 64),
            "00001000ffffff08"
            "0000000000000000"  // RR, qpn 0xffffff
            "0000000000000000"
            "0000000000002000");  // start_addr 0
  json unbind = wrs[0];
  unbind["length"] = 0;
  EXPECT_EQ(wqebbs(encode(queue(0x123, 8, 0, {unbind}))),
            (std::vector<std::string>{
                bb({"00000025 00012308 00000008 00abcd07", "98000000 00000000 00000000 20006000"}),
                bb({"40000000 ffffff08 00000000 00000000"}),
            }));
  // What rdma-core refuses, rdmx-wqe refuses.
  json big = wrs[0];
  big["length"] = "0x80000001";
  expect_reject(queue(1, 8, 0, {big}), "EOPNOTSUPP", "over 2 GiB");
  json acc = wrs[0];
  acc["mw_access_flags"] = 0x10;  // IBV_ACCESS_MW_BIND
  expect_reject(queue(1, 8, 0, {acc}), "EINVAL", "mw_access_flags");
  json ty = wrs[0];
  ty["mw_type"] = 3;
  expect_reject(queue(1, 8, 0, {ty}), "EINVAL", "mw_type");
}

TEST(WqeEncode, FenceFlagsAndInheritedFmCache) {
  json wrs = json::array();
  wrs.push_back(mr_list(0x100, 0, json::array()));
  wrs.push_back({{"op", "send"}, {"fence", true}});  // IBV_SEND_FENCE replaces 0x20 by 0x80
  wrs.push_back({{"op", "send"}});                   // nothing inherited any more
  const json out = encode(queue(1, 8, 0, wrs));
  const auto b = wqebbs(out);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[2].substr(16, 8), "00000080");
  EXPECT_EQ(b[3].substr(16, 8), "00000000");
  // fm_cache given by the caller (the previous batch ended with a UMR).
  json req = queue(1, 8, 0, {{{"op", "send"}}});
  req["fm_cache"] = 32;
  EXPECT_EQ(wqebbs(encode(req))[0].substr(16, 8), "00000020");
}

// rdmx's doorbell step signals an unsignaled last WQE; the verbs default does not.
TEST(WqeEncode, RdmxSignalLast) {
  json req = queue(1, 8, 0, {{{"op", "send"}}});
  EXPECT_EQ(wqebbs(encode(req))[0].substr(16, 8), "00000000");
  req["rdmx_signal_last"] = true;
  EXPECT_EQ(wqebbs(encode(req))[0].substr(16, 8), "00000008");
}

TEST(WqeEncode, EmptyBatch) {
  const json out = encode(queue(1, 8, 5, json::array()));
  EXPECT_EQ(out["sq_pi_after"], 5);
  EXPECT_TRUE(out["wqebbs"].empty());
  EXPECT_TRUE(out["doorbell_record"].is_null());
}

TEST(WqeEncode, RejectedBatches) {
  const json ok_send = {{"op", "send"}};
  json no_inline = mr_list(0x100, 1, json::array());
  no_inline["inline"] = false;
  expect_reject(queue(1, 8, 0, {ok_send, no_inline}), "EOPNOTSUPP", "inline");
  expect_reject(queue(1, 8, 0, {mr_list(0x100, 0x10, json::array())}), "EINVAL", "access_flags");
  json tagged = queue(1, 8, 0, {mr_list(0x1ff, 1, json::array())});
  tagged["mkey_update_tag"] = false;
  expect_reject(tagged, "EOPNOTSUPP", "tag");
  expect_reject(queue(1, 8, 0, {{{"op", "atomic_fa"}}}), "EOPNOTSUPP", "unknown op");
  expect_reject(queue(1, 8, 0, {{{"op", "send"}, {"sgl", json::array()}}}), "EINVAL",
                "unknown field \"sgl\"");
  expect_reject(queue(1, 48, 0, {ok_send}), "EINVAL", "power of two");
  expect_reject(queue(0x1000000, 8, 0, {ok_send}), "EINVAL", "qpn");
  expect_reject(queue(1, 8, 0, {{{"op", "rdma_write"}, {"remote_addr", -1}, {"rkey", 1}}}),
                "EINVAL", "negative");
  expect_reject(queue(1, 8, 0, {{{"op", "rdma_write"}, {"rkey", 1}}}), "EINVAL",
                "missing field \"remote_addr\"");
  expect_reject(queue(1, 8, 0, {{{"op", "send"}, {"signaled", 1}}}), "EINVAL", "true or false");
  expect_reject(
      queue(1, 8, 0,
            {{{"op", "rdma_read"}, {"remote_addr", 0}, {"rkey", 1}, {"inline_data_hex", "00"}}}),
      "EINVAL", "inline data");
  expect_reject(queue(1, 8, 0, {{{"op", "send"}, {"inline_data_hex", "0g"}}}), "EINVAL", "hex");
  // A batch larger than the ring: nothing is written, the error names the overflow.
  json big = json::array();
  for (int i = 0; i < 5; ++i) big.push_back(mr_list(0x100, 0, json::array()));
  expect_reject(queue(1, 8, 0, big), "ENOMEM", "overflow");
  // A WQE over 63 DS (62 sges + ctrl + raddr).
  json sges = json::array();
  for (int i = 0; i < 62; ++i) sges.push_back({{"lkey", 1}, {"addr", 0}, {"length", 1}});
  expect_reject(
      queue(1, 64, 0, {{{"op", "rdma_write"}, {"remote_addr", 0}, {"rkey", 1}, {"sges", sges}}}),
      "ENOMEM", "63");
  json req = queue(1, 64, 0, {{{"op", "send"}, {"sges", sges}}});
  req["max_send_sge"] = 4;
  expect_reject(req, "ENOMEM", "max_send_sge");
}

TEST(WqeEncode, BadJsonNeverCrashes) {
  const char* bad[] = {"",
                       "{",
                       "[]",
                       "null",
                       "{\"qpn\":}",
                       "{\"qpn\": 1e99}",
                       "\"x\"",
                       "{\"qpn\":1,\"sq_wqe_cnt\":8,\"sq_pi\":0,\"max_inline_data\":0,\"wrs\":{}}",
                       "{\"qpn\":1,\"sq_wqe_cnt\":8,\"sq_pi\":0,\"max_inline_data\":0,\"wrs\":[1]}",
                       "{\"qpn\":\"0x\",\"sq_wqe_cnt\":8}",
                       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["};
  for (const char* s : bad) {
    const auto r = rdmx::wqetool::encode_line(s);
    EXPECT_FALSE(r.ok) << s;
    const json out = json::parse(r.text);
    EXPECT_EQ(out["rc"], "EINVAL") << s << " -> " << r.text;
  }
  // Hex-string numbers are accepted.
  json req = queue(1, 8, 0, {{{"op", "local_inv"}, {"invalidate_rkey", "0x12345"}}});
  req["qpn"] = "0x123";
  EXPECT_EQ(wqebbs(encode(req))[0].substr(0, 32),
            "0000002500012308000000000001234"
            "5");
}
