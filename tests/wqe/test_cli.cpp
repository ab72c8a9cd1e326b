// The built rdmx-wqe binary end to end (path in $RDMX_WQE): encode | decode round trips for
// every op, --input, --help, and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

struct Proc {
  int status = -1;
  std::string out;
};

std::string bin() {
  const char* p = std::getenv("RDMX_WQE");
  return p ? p : "";
}

// Runs `cmd` through the shell with `input` written to a temp file as its stdin.
Proc run(const std::string& args, const std::string& input = "") {
  char path[] = "/tmp/rdmx-wqe-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(fd);
  const std::string cmd = args + " < " + path;
  Proc r;
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  unlink(path);
  return r;
}

std::vector<json> lines(const std::string& s) {
  std::vector<json> v;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t e = s.find('\n', pos);
    const std::string l = s.substr(pos, e - pos);
    if (!l.empty()) v.push_back(json::parse(l));
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  return v;
}

class WqeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (bin().empty()) GTEST_SKIP() << "RDMX_WQE not set";
  }
};

const char* const kBatch =
    R"({"qpn": 291, "sq_wqe_cnt": 64, "sq_pi": 62, "fm_cache": 0, "max_inline_data": 828, "wrs": [)"
    R"({"op": "mr_list", "inline": true, "mkey": 74565, "access_flags": 7, "entries": [{"lkey": 4660, "addr": 140737488355328, "length": 4096}, {"lkey": 4661, "addr": 8192, "length": 100}]},)"
    R"({"op": "rdma_write", "signaled": true, "remote_addr": 0, "rkey": 74565, "sges": [{"lkey": 4660, "addr": 140737488359424, "length": 512}]},)"
    R"({"op": "mr_interleaved", "inline": true, "mkey": 768, "access_flags": 15, "repeat_count": 4, "interleaved": [{"lkey": 1, "addr": 4096, "bytes_count": 512, "bytes_skip": 8}]},)"
    R"({"op": "rdma_read", "fence": true, "remote_addr": 64, "rkey": 768, "sges": [{"lkey": 9, "addr": 1024, "length": 64}]},)"
    R"({"op": "send", "solicited": true, "inline_data_hex": "00112233445566778899aabbccddeeff00"},)"
    R"({"op": "send_inv", "invalidate_rkey": 74565},)"
    R"({"op": "local_inv", "signaled": true, "invalidate_rkey": 768},)"
    R"({"op": "rdma_write_imm", "remote_addr": 1, "rkey": 2, "imm_data": 3},)"
    R"({"op": "send_imm", "imm_data": 4, "sges": [{"lkey": 5, "addr": 6, "length": 7}]}]})";

}  // namespace

TEST_F(WqeCli, EncodeDecodeRoundTrip) {
  const Proc enc = run(bin() + " encode", std::string(kBatch) + "\n");
  ASSERT_EQ(enc.status, 0) << enc.out;
  const Proc dec = run(bin() + " decode", enc.out);
  ASSERT_EQ(dec.status, 0) << dec.out;
  const auto d = lines(dec.out);
  ASSERT_EQ(d.size(), 1u);
  json w = d[0]["wqes"];
  ASSERT_EQ(w.size(), 9u) << dec.out;
  const char* ops[] = {"UMR", "RDMA_WRITE",     "UMR",     "RDMA_READ", "SEND", "SEND_INVAL",
                       "UMR", "RDMA_WRITE_IMM", "SEND_IMM"};
  uint32_t index = 62;
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(w[i]["ctrl"]["opcode"], ops[i]) << i;
    EXPECT_EQ(w[i]["ctrl"]["qpn"], 291);
    EXPECT_EQ(w[i]["ctrl"]["wqe_index"], index) << i;
    index += w[i]["n_wqebb"].get<uint32_t>();
  }
  EXPECT_EQ(index, lines(enc.out).at(0).at("sq_pi_after").get<uint32_t>());
  // mr_list
  EXPECT_EQ(w[0]["ctrl"]["imm"], 74565);
  EXPECT_EQ(w[0]["klms"][1]["mkey"], 4661);
  EXPECT_EQ(w[0]["klms"][1]["byte_count"], 100);
  EXPECT_EQ(w[0]["mkey_ctx"]["len"], 4196);
  // the write after the UMR: small fence, signaled
  EXPECT_EQ(w[1]["ctrl"]["fence"], "initiator-small");
  EXPECT_EQ(w[1]["ctrl"]["signaled"], true);
  EXPECT_EQ(w[1]["sges"][0]["addr"], 140737488359424ull);
  // interleaved
  EXPECT_EQ(w[2]["repeat_block"]["repeat_count"], 4);
  EXPECT_EQ(w[2]["repeat_block"]["entries"][0]["stride"], 520);
  EXPECT_EQ(w[2]["mkey_ctx"]["len"], 2048);
  EXPECT_EQ(w[2]["mkey_ctx"]["access_names"], json({"A", "RW", "RR", "LW"}));
  // fence flag replaces the inherited small fence
  EXPECT_EQ(w[3]["ctrl"]["fence"], "small-and-fence");
  EXPECT_EQ(w[3]["raddr"]["remote_addr"], 64);
  EXPECT_EQ(w[4]["ctrl"]["solicited"], true);
  EXPECT_EQ(w[4]["inline"]["data_hex"], "00112233445566778899aabbccddeeff00");
  EXPECT_EQ(w[5]["ctrl"]["imm"], 74565);
  EXPECT_EQ(w[6]["mkey_ctx"]["free"], true);
  EXPECT_EQ(w[6]["ctrl"]["imm"], 768);
  EXPECT_EQ(w[7]["ctrl"]["fence"], "initiator-small");  // after local_inv
  EXPECT_EQ(w[7]["ctrl"]["imm"], 3);
  EXPECT_EQ(w[8]["sges"][0]["length"], 7);

  // --pretty on the same bytes, and decode with the WQEBBs as arguments.
  const Proc pretty = run(bin() + " decode --pretty", enc.out);
  EXPECT_EQ(pretty.status, 0);
  EXPECT_NE(pretty.out.find("mkey_mask"), std::string::npos);
  std::string args;
  const std::vector<json> encoded = lines(enc.out);
  ASSERT_EQ(encoded.size(), 1u);
  for (const auto& h : encoded[0]["wqebbs"]) {
    args += ' ';
    args += h.get<std::string>();
  }
  const Proc arg = run(bin() + " decode" + args);
  EXPECT_EQ(arg.status, 0);
  const std::vector<json> from_args = lines(arg.out);
  ASSERT_EQ(from_args.size(), 1u) << arg.out;
  EXPECT_EQ(from_args[0], d[0]);
}

TEST_F(WqeCli, InputFileAndErrorLines) {
  char path[] = "/tmp/rdmx-wqe-in-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream f(path);
    f << kBatch << "\n\n{not json\n"
      << R"({"qpn":1,"sq_wqe_cnt":8,"sq_pi":0,"max_inline_data":0,"wrs":[{"op":"mr_list","inline":false,"mkey":1,"access_flags":0,"entries":[]}]})"
      << "\n";
  }
  const Proc enc = run(bin() + " encode --input " + path);
  unlink(path);
  EXPECT_EQ(enc.status, 1);
  const auto l = lines(enc.out);
  ASSERT_EQ(l.size(), 3u) << enc.out;
  EXPECT_EQ(l[0]["rc"], 0);
  EXPECT_EQ(l[1]["rc"], "EINVAL");
  EXPECT_EQ(l[2]["rc"], "EOPNOTSUPP");
  EXPECT_FALSE(l[2].contains("wqebbs"));
  // A rejected encode line piped into decode is an error line, not a crash.
  const Proc dec = run(bin() + " decode", enc.out);
  EXPECT_EQ(dec.status, 1);
  EXPECT_EQ(lines(dec.out).size(), 3u);
}

TEST_F(WqeCli, HelpAndUsage) {
  const Proc h = run(bin() + " encode --help");
  EXPECT_EQ(h.status, 0);
  for (const char* s : {"mr_list", "mr_interleaved", "local_inv", "max_inline_data", "fm_cache",
                        "WHERE RDMX DIFFERS", "ENOMEM", "EOPNOTSUPP"})
    EXPECT_NE(h.out.find(s), std::string::npos) << s;
  EXPECT_EQ(run(bin() + " decode --help").status, 0);
  EXPECT_EQ(run(bin() + " --help").status, 0);
  EXPECT_EQ(run(bin() + " frobnicate 2>/dev/null").status, 2);
  EXPECT_EQ(run(bin() + " encode --bogus 2>/dev/null").status, 2);
  EXPECT_EQ(run(bin() + " decode zz").status, 1);
}

// The tools' argument convention (getopt_long): `--opt value` and `--opt=value` alike; a bad
// argument is one line on stderr, "rdmx-wqe: error: ...", then a pointer to --help (never the
// whole usage), and exit status 2.
TEST_F(WqeCli, OneArgumentConvention) {
  char path[] = "/tmp/rdmx-wqe-test-in-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string batch = std::string(kBatch) + "\n";
  ASSERT_EQ(write(fd, batch.data(), batch.size()), static_cast<ssize_t>(batch.size()));
  close(fd);
  const Proc spaced = run(bin() + " encode --input " + path);
  const Proc joined = run(bin() + " encode --input=" + path);
  const Proc piped = run(bin() + " encode", batch);
  unlink(path);
  EXPECT_EQ(spaced.status, 0);
  EXPECT_EQ(joined.status, 0);
  EXPECT_FALSE(spaced.out.empty());
  EXPECT_EQ(spaced.out, joined.out);
  EXPECT_EQ(spaced.out, piped.out);
  for (const char* bad : {" encode --bogus", " encode --input", " decode --pretty=1",
                          " encode --pretty", " encode stray", " frobnicate", ""}) {
    const Proc p = run(bin() + bad + " 2>&1 >/dev/null");  // stderr only
    EXPECT_EQ(p.status, 2) << bad;
    EXPECT_EQ(p.out.rfind("rdmx-wqe: error: ", 0), 0u) << bad << ": " << p.out;
    EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 2) << bad << ": " << p.out;
    EXPECT_NE(p.out.find("\ntry 'rdmx-wqe --help' for the options\n"), std::string::npos)
        << bad << ": " << p.out;
  }
  // What went wrong, said once: an option before the subcommand is an option, not a subcommand;
  // no subcommand points to --help only in the pointer line.
  const Proc opt = run(bin() + " --frob 2>&1 >/dev/null");
  EXPECT_EQ(opt.out.rfind("rdmx-wqe: error: unknown option '--frob'", 0), 0u) << opt.out;
  const Proc none = run(bin() + " 2>&1 >/dev/null");
  EXPECT_EQ(none.out.find("--help"), none.out.rfind("--help")) << none.out;
}
