// lib/core error helpers: add_context, RDMX_TRY, RDMX_TRY_ASSIGN.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <rdmx/core/result.hpp>

using namespace rdmx;

namespace {

int g_context_evaluations = 0;
std::string ctx(const char* s) {
  ++g_context_evaluations;
  return s;
}

Status failing() {
  return make_error(Errc::kTimeout, "no peer after 5 s");
}
Status passing() {
  return {};
}
Result<std::unique_ptr<int>> make_int(bool ok) {
  if (!ok) return make_error(Errc::kNoMemory, "heap");
  return std::make_unique<int>(7);
}

Status two_steps(bool first_ok) {
  RDMX_TRY(passing(), ctx("never"));
  RDMX_TRY_ASSIGN(auto p, make_int(first_ok), ctx("arena a"));
  if (*p != 7) return make_error(Errc::kState, "bad value");
  RDMX_TRY(failing(), "connect c-p");
  return {};
}

Result<int> assign_existing() {
  std::unique_ptr<int> p;
  RDMX_TRY_ASSIGN(p, make_int(true));
  RDMX_TRY(failing());
  return *p;
}

}  // namespace

TEST(CoreResult, AddContext) {
  const Error e = add_context(make_error(Errc::kProtocol, "corrupted"), "rdmx_core_connect");
  EXPECT_EQ(e.code, Errc::kProtocol);
  EXPECT_EQ(e.message, "rdmx_core_connect: corrupted");
  EXPECT_EQ(add_context(e, "").message, e.message);
  EXPECT_EQ(errc_name(Errc::kProtocol), "protocol");
}

TEST(CoreResult, TryPropagatesWithContextOnlyOnFailure) {
  g_context_evaluations = 0;
  Status s = two_steps(true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kTimeout);
  EXPECT_EQ(s.error().message, "connect c-p: no peer after 5 s");
  EXPECT_EQ(g_context_evaluations, 0);  // context is built on failure only

  s = two_steps(false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kNoMemory);
  EXPECT_EQ(s.error().message, "arena a: heap");
  EXPECT_EQ(g_context_evaluations, 1);

  auto r = assign_existing();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "no peer after 5 s");
}
