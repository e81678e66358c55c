// RaiseOpenFileLimit (common/fd_limit.h). Each case runs in a forked child that first sets the
// limits it needs (lowering them needs no privilege), so the test process keeps its own.
#include "common/fd_limit.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

namespace hora {
namespace {

// Runs fn in a child with the limits (soft, hard); the child's exit code: 0 when fn returned
// true, 1 when false, 2 when the limits could not be set.
int InChild(rlim_t soft, rlim_t hard, bool (*fn)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit lim{soft, hard};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(2);
    _exit(fn() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

rlim_t Soft() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

TEST_CASE("the soft limit is raised to what the job wants, within the hard limit") {
  // Soft 256, hard 4096: a 1,024-rank job wants 4 * 1024 + 1024 = 5120; the soft limit goes to
  // the hard one and the message names both and ulimit.
  CHECK(OpenFilesWanted(1024) == 5120);
  CHECK(InChild(256, 4096, [] {
          const std::string m = RaiseOpenFileLimit(OpenFilesWanted(1024));
          return Soft() == 4096 && m.find("limit is 4096 (hard limit 4096)") != std::string::npos &&
                 m.find("may need 5120") != std::string::npos &&
                 m.find("ulimit -n") != std::string::npos;
        }) == 0);
  // Room under the hard limit: raised toward 4x what is wanted (headroom), to the hard limit
  // here, no message.
  CHECK(InChild(256, 8192, [] {
          return RaiseOpenFileLimit(OpenFilesWanted(1024)).empty() && Soft() == 8192;
        }) == 0);
  CHECK(InChild(256, 8192, [] { return RaiseOpenFileLimit(1100).empty() && Soft() == 4400; }) == 0);
}

TEST_CASE("a soft limit above what is wanted still gets the headroom; above that it stays") {
  CHECK(InChild(3000, 4096, [] { return RaiseOpenFileLimit(1100).empty() && Soft() == 4096; }) ==
        0);
  CHECK(InChild(5000, 8192, [] { return RaiseOpenFileLimit(1100).empty() && Soft() == 5000; }) ==
        0);
}

}  // namespace
}  // namespace hora
