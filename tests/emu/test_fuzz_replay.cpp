// Runs the fuzz target's entry point (any compiler) over its seed corpus and over random and
// mutated inputs, so the "bad bytes never crash" property is checked in every build.
#include <dirent.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> corpus() {
  std::vector<std::vector<uint8_t>> out;
  const std::string dir = RDMX_EMU_CORPUS;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(dir + "/" + e->d_name, std::ios::binary);
      out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    closedir(d);
  }
  return out;
}

TEST(EmuFuzzReplay, SeedCorpusAndMutations) {
  auto seeds = corpus();
  ASSERT_GE(seeds.size(), 3u) << "seed corpus missing: " << RDMX_EMU_CORPUS;
  for (auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  std::mt19937 g(12345);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> v = seeds[size_t(g()) % seeds.size()];
    const int flips = 1 + int(g() % 8);
    for (int k = 0; k < flips && !v.empty(); ++k) v[g() % v.size()] = uint8_t(g());
    if (i % 5 == 0) {
      v.resize(1 + g() % 1100);
      for (auto& b : v) b = uint8_t(g());
    }
    LLVMFuzzerTestOneInput(v.data(), v.size());
  }
  SUCCEED();
}

}  // namespace
