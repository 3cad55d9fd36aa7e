// A deliberately bad GoogleTest binary for test/runner/run_tests_selftest.sh,
// which runs scripts/run_tests.sh on it and checks every count and name. It
// is a TEST_PREREQ, never in TESTS: its failures are planted.
//   Fixture.Passes          passes
//   Fixture.Fails           fails
//   Params/Param.Even/0..3  parameters 1..4; the even ones (/1 and /3) fail
//   Fixture.Skipped         GTEST_SKIP
//   Stall.Hangs             sleeps forever (the runner's timeout must end it);
//                           with RUNNER_FIXTURE_CRASH=1 it aborts instead
// RUNNER_FIXTURE_EXIT=N makes main return N whatever the results, for "exit
// status without a failed case".
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

TEST(Fixture, Passes) { EXPECT_EQ(2 + 2, 4); }

TEST(Fixture, Fails) { EXPECT_EQ(2 + 2, 5) << "planted failure"; }

TEST(Fixture, Skipped) { GTEST_SKIP() << "planted skip"; }

class Param : public ::testing::TestWithParam<int> {};
TEST_P(Param, Even) { EXPECT_NE(GetParam() % 2, 0) << "planted failure for " << GetParam(); }
INSTANTIATE_TEST_SUITE_P(Params, Param, ::testing::Values(1, 2, 3, 4));

// Parameterised suites run after every TEST() suite, so this case is
// registered from main, after them: it runs last, and the cases before it have
// reported when the runner kills the binary.
class Hangs : public ::testing::Test {
  void TestBody() override {
    const char* crash = std::getenv("RUNNER_FIXTURE_CRASH");
    if (crash != nullptr && std::strcmp(crash, "1") == 0) std::abort();
    for (;;) pause();
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::RegisterTest("Stall", "Hangs", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> ::testing::Test* { return new Hangs; });
  const int rc = RUN_ALL_TESTS();
  const char* forced = std::getenv("RUNNER_FIXTURE_EXIT");
  return forced != nullptr ? std::atoi(forced) : rc;
}
