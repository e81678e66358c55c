#include "common/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hora {

int64_t OpenFilesWanted(int ranks) { return 4 * static_cast<int64_t>(std::max(ranks, 1)) + 1024; }

std::string RaiseOpenFileLimit(int64_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return std::string("cannot read the open-file limit: ") + strerror(errno);
  }
  const rlim_t want = static_cast<rlim_t>(wanted);
  const rlim_t target = want * kOpenFilesHeadroom;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < target) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? target : std::min(target, lim.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= want) return "";
  return "the open-file limit is " + std::to_string(lim.rlim_cur) + " (hard limit " +
         (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
         ") and a job of this size may need " + std::to_string(wanted) +
         ": connections may fail with 'Too many open files'; raise it (ulimit -n) before the job";
}

}  // namespace hora
