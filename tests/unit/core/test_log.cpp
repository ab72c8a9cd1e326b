// rdmx's setup-path log: plain stderr filtered by set_log_level without a sink (the C API without
// the EAL), and every line through the installed sink with the sink's filter (the EAL's rte_log).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <rdmx/core/log.hpp>

namespace {

std::vector<std::string> g_lines;
rdmx::LogLevel g_sink_level = rdmx::LogLevel::kWarn;

bool enabled(rdmx::LogLevel l) noexcept {
  return static_cast<int>(l) <= static_cast<int>(g_sink_level);
}
void write(rdmx::LogLevel, const char* line) noexcept {
  g_lines.emplace_back(line);
}
const rdmx::LogSink kSink{enabled, write};

TEST(Log, SinkFiltersAndReceivesLines) {
  g_lines.clear();
  rdmx::set_log_sink(&kSink);
  RDMX_LOG_WARN("window pool: %d windows", 7);
  RDMX_LOG_DEBUG("not shown: the sink says warn");
  EXPECT_TRUE(rdmx::log_enabled(rdmx::LogLevel::kError));
  EXPECT_FALSE(rdmx::log_enabled(rdmx::LogLevel::kInfo));
  rdmx::set_log_sink(nullptr);
  ASSERT_EQ(g_lines.size(), 1u);
  EXPECT_EQ(g_lines[0], "window pool: 7 windows");
}

TEST(Log, WithoutSinkTheLevelFilters) {
  rdmx::set_log_sink(nullptr);
  const rdmx::LogLevel old = rdmx::log_level();
  rdmx::set_log_level(rdmx::LogLevel::kError);
  EXPECT_FALSE(rdmx::log_enabled(rdmx::LogLevel::kWarn));
  rdmx::set_log_level(rdmx::LogLevel::kDebug);
  EXPECT_TRUE(rdmx::log_enabled(rdmx::LogLevel::kDebug));
  testing::internal::CaptureStderr();
  RDMX_LOG_INFO("plain %s", "stderr");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "rdmx INFO: plain stderr\n");
  rdmx::set_log_level(old);
}

}  // namespace
