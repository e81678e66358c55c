// The one Catch2 main shared by every C++ test (compiling it once saves ~8 s per test).
// A listener prints "N passed, N failed" (test cases) at the end, which .ci/test_summary.sh reads.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <cstdio>

namespace {

struct SummaryListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    std::printf("%llu passed, %llu failed\n",
                static_cast<unsigned long long>(stats.totals.testCases.passed),
                static_cast<unsigned long long>(stats.totals.testCases.failed));
    std::fflush(stdout);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SummaryListener)
