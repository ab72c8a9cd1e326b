// doc/guides/emu.md, "PRM checker", against the checker: every rule emu::rule_name() can name has
// a row in the guide's tables, every row names a rule the checker has, and every row gives its
// source (last cell not empty).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <rdmx/emu/emu.hpp>

namespace {

// The rows of the tables between "## PRM checker" and the next "## " heading, as cells.
std::vector<std::vector<std::string>> checker_rows(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<std::vector<std::string>> rows;
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("## ", 0) == 0) in = line == "## PRM checker";
    if (!in || line.rfind("| ", 0) != 0 || line.rfind("| ---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream in_line(line.substr(1));
    while (std::getline(in_line, cell, '|')) {
      const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (!cells.empty() && cells[0] != "rule") rows.push_back(cells);
  }
  return rows;
}

// The backquoted names in a cell: "`a`, `b`" -> {a, b}.
std::vector<std::string> names(const std::string& cell) {
  std::vector<std::string> out;
  for (size_t at = cell.find('`'); at != std::string::npos; at = cell.find('`', at)) {
    const size_t end = cell.find('`', at + 1);
    if (end == std::string::npos) break;
    out.push_back(cell.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  return out;
}

TEST(EmuRuleDocs, EveryRuleHasARowWithItsSourceAndEveryRowARule) {
  using rdmx::emu::Rule;
  std::set<std::string> rules;
  for (int r = 0; r < static_cast<int>(Rule::kCount); ++r)
    rules.insert(rdmx::emu::rule_name(static_cast<Rule>(r)));
  const auto rows = checker_rows(RDMX_EMU_GUIDE);
  ASSERT_FALSE(rows.empty()) << "no table under \"## PRM checker\" in " << RDMX_EMU_GUIDE;
  std::set<std::string> documented;
  for (const auto& cells : rows) {
    if (cells[0] == "″") continue;  // a second row of the rule above
    const auto listed = names(cells[0]);
    EXPECT_FALSE(listed.empty()) << "a row that names no rule: " << cells[0];
    for (const std::string& n : listed) {
      EXPECT_TRUE(rules.count(n)) << "emu.md lists '" << n << "', which the checker does not have";
      documented.insert(n);
    }
    EXPECT_GE(cells.size(), 4u) << cells[0];
    EXPECT_FALSE(cells.back().empty()) << "no source for " << cells[0];
  }
  for (const std::string& r : rules)
    EXPECT_TRUE(documented.count(r)) << "checker rule '" << r << "' has no row in emu.md";
}

}  // namespace
