// How many CPUs this process may run on.
#ifndef HORA_COMMON_CPUS_H_
#define HORA_COMMON_CPUS_H_

#include <sched.h>

#include <algorithm>

namespace hora {

// The CPUs in this thread's affinity mask (what a container or taskset leaves it), at least 1.
inline int CpusAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace hora

#endif  // HORA_COMMON_CPUS_H_
