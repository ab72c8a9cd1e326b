// rdmx-wqe decode (in process): named fields of every segment, repeat blocks, and bad input
// (which must give an error, never a crash or a read outside the bytes given).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tool.hpp"
#include "wqe_test_util.hpp"

using nlohmann::json;
using rdmx::wqetest::bb;
using rdmx::wqetest::kZeroDs;

namespace {

json decode(const std::vector<std::string>& hex, bool expect_ok = true) {
  const auto r = rdmx::wqetool::decode_hex(hex, false);
  EXPECT_EQ(r.ok, expect_ok) << r.text;
  return json::parse(r.text);
}

}  // namespace

TEST(WqeDecode, UmrFieldsByName) {
  const json out =
      decode({bb({"00003e25 0001230c 00000000 00012345", "80000000 00040000 00000000 203c2001"}),
              bb({"00003800 ffffff45 00000000 00000000", "00000000 00000000 00000000 00001000"}),
              bb({"00001000 00001234 00008000 00000000"})});
  ASSERT_EQ(out["wqes"].size(), 1u);
  const json& w = out["wqes"][0];
  EXPECT_EQ(w["ctrl"]["opcode"], "UMR");
  EXPECT_EQ(w["ctrl"]["wqe_index"], 62);
  EXPECT_EQ(w["ctrl"]["qpn"], 291);
  EXPECT_EQ(w["ctrl"]["ds"], 12);
  EXPECT_EQ(w["ctrl"]["fence"], "none");
  EXPECT_EQ(w["ctrl"]["signaled"], false);
  EXPECT_EQ(w["ctrl"]["imm"], 0x12345);
  EXPECT_EQ(w["umr_ctrl"]["flag_names"], json({"INLINE"}));
  EXPECT_EQ(w["umr_ctrl"]["klm_octowords"], 4);
  EXPECT_EQ(w["umr_ctrl"]["mkey_mask_names"], json({"LEN", "KEY", "LW", "RR", "RW", "A", "FREE"}));
  EXPECT_EQ(w["mkey_ctx"]["free"], false);
  EXPECT_EQ(w["mkey_ctx"]["access_names"], json({"RW", "RR", "LW"}));
  EXPECT_EQ(w["mkey_ctx"]["key"], 0x45);
  EXPECT_EQ(w["mkey_ctx"]["len"], 4096);
  ASSERT_EQ(w["klms"].size(), 1u);
  EXPECT_EQ(w["klms"][0]["mkey"], 0x1234);
  EXPECT_EQ(w["klms"][0]["address"], 0x800000000000ull);
  EXPECT_EQ(w["translation_pad"], 3);
}

TEST(WqeDecode, RepeatBlockAndLocalInvNames) {
  const json rb =
      decode({bb({"00000525 0000420c 00000000 00000307", "80000000 00040000 00000000 203c2001"}),
              bb({"00003000 ffffff07 00000000 00000000", "00000000 00000000 00000000 000006c0"}),
              bb({"00000240 00000400 00000003 00000002", "04000200 00001234 00000000 00001000",
                  "00400040 00005678 00000000 00002000"})});
  const json& r = rb["wqes"][0]["repeat_block"];
  EXPECT_EQ(r["repeat_count"], 3);
  EXPECT_EQ(r["num_ent"], 2);
  EXPECT_EQ(r["byte_count"], 0x240);
  EXPECT_EQ(r["entries"][0]["stride"], 1024);
  EXPECT_EQ(r["entries"][0]["byte_count"], 512);
  EXPECT_EQ(r["entries"][1]["mkey"], 0x5678);
  EXPECT_EQ(rb["wqes"][0]["translation_pad"], 1);

  const json li =
      decode({bb({"00000625 00012308 00000028 00012345", "98000000 00000000 00000000 20006000"}),
              bb({"40000000 ffffff00 00000000 00000000"})});
  const json& w = li["wqes"][0];
  EXPECT_EQ(w["umr_ctrl"]["flag_names"], json({"INLINE", "TRANSLATION_OFFSET", "CHECK_QPN"}));
  EXPECT_EQ(w["umr_ctrl"]["mkey_mask_names"], json({"KEY", "QPN", "FREE"}));
  EXPECT_EQ(w["mkey_ctx"]["free"], true);
  EXPECT_EQ(w["ctrl"]["fence"], "initiator-small");
  EXPECT_EQ(w["ctrl"]["ce"], "always");
}

TEST(WqeDecode, InlineDataAcrossWqebbs) {
  const json out =
      decode({bb({"0000070a 00000105 00000000 00000000", "8000003c 00010203 04050607 08090a0b",
                  "0c0d0e0f 10111213 14151617 18191a1b", "1c1d1e1f 20212223 24252627 28292a2b"}),
              bb({"2c2d2e2f 30313233 34353637 38393a3b"})});
  const json& in = out["wqes"][0]["inline"];
  EXPECT_EQ(in["byte_count"], 60);
  EXPECT_EQ(in["data_hex"].get<std::string>().substr(0, 8), "00010203");
  EXPECT_EQ(in["data_hex"].get<std::string>().substr(112), "38393a3b");
}

TEST(WqeDecode, PrettyTableNamesFields) {
  const auto r = rdmx::wqetool::decode_hex(
      {bb({"00004108 00012303 00000028 00000000", "00000000 00000000 00012345 00000000",
           "00000200 00001234 00008000 00001000"})},
      true);
  ASSERT_TRUE(r.ok) << r.text;
  for (const char* s : {"RDMA_WRITE", "initiator-small", "remote_addr", "rkey", "sge 0", "0x020"})
    EXPECT_NE(r.text.find(s), std::string::npos) << s << "\n" << r.text;
}

TEST(WqeDecode, MalformedInputIsAnError) {
  struct Case {
    std::vector<std::string> hex;
    const char* needle;
  };
  const Case cases[] = {
      {{"0"}, "hex"},
      {{"zz"}, "hex"},
      {{"00"}, "64 bytes"},
      {{bb({kZeroDs})}, "ds is 0"},
      // ds 12 (3 WQEBBs) but only one given
      {{bb({"00000025 0000010c 00000000 00000000", "80000000 00040000 00000000 203c2001"})},
       "remain"},
      {{bb({"000000ff 00000101 00000000 00000000"})}, "unknown-opcode"},
      // inline UMR with 4 octowords but ds 8
      {{bb({"00000025 00000108 00000000 00000000", "80000000 00040000 00000000 203c2001"}),
        bb({kZeroDs})},
       "umr-octowords"},
      // inline byte count runs past ds
      {{bb({"0000000a 00000102 00000000 00000000", "80000040 00000000 00000000 00000000"})},
       "inline-length"},
  };
  for (const Case& c : cases) {
    const json out = decode(c.hex, false);
    EXPECT_EQ(out["rc"], "EINVAL");
    EXPECT_NE(out["error"].get<std::string>().find(c.needle), std::string::npos)
        << c.needle << " -> " << out.dump();
  }
  for (const char* line :
       {"[1,2]", "{\"rc\":\"ENOMEM\",\"error\":\"x\"}", "{\"a\":1}", "[", "{\"wqebbs\":5}"}) {
    const auto r = rdmx::wqetool::decode_line(line, false);
    EXPECT_FALSE(r.ok) << line;
    EXPECT_EQ(json::parse(r.text)["rc"], "EINVAL") << line;
  }
}

// Random and mutated WQEBBs: every result is well-formed JSON; no crash, no stray read (run
// under -Db_sanitize / -Dsanitize=address,undefined to check the latter).
TEST(WqeDecode, RandomBytesNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::string seed =
      bb({"00003e25 0001230c 00000000 00012345", "80000000 00040000 00000000 203c2001"});
  static const char kD[] = "0123456789abcdef";
  for (int it = 0; it < 20000; ++it) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<std::string> hex;
    for (int i = 0; i < n; ++i) {
      std::string w = (it % 2 && i == 0) ? seed : std::string(128, '0');
      const int flips = static_cast<int>(rng() % 24);
      for (int f = 0; f < flips; ++f) w[rng() % 128] = kD[rng() % 16];
      hex.push_back(w);
    }
    for (bool pretty : {false, true}) {
      const auto r = rdmx::wqetool::decode_hex(hex, pretty);
      if (!pretty) {
        EXPECT_TRUE(json::accept(r.text)) << r.text;
      }
    }
  }
}
