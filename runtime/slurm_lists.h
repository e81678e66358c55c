// Slurm's compact list syntaxes, as srun hands them to each task:
//   node lists (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): "node[01-04,07],gpu-a[1-2],login",
//     a comma-separated list of names, each with any number of bracket groups of numbers and
//     ranges; a range keeps the zero padding of its first bound ("[08-10]" -> 08 09 10);
//     several groups in one name expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
//   tasks per node (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE): "2(x3),1" -> 2 2 2 1.
// Pure functions; a malformed value is InvalidArgument naming the variable, the value and
// what is wrong with it.
#ifndef HORA_RUNTIME_SLURM_LISTS_H_
#define HORA_RUNTIME_SLURM_LISTS_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace hora {

// The most hosts a node list may expand to (larger lists are rejected, not truncated).
constexpr size_t kMaxSlurmHosts = 1 << 20;

// Every host of `value` in order. `var` only names the variable in errors.
StatusOr<std::vector<std::string>> ExpandSlurmNodelist(const std::string& var,
                                                       const std::string& value);

// The tasks of each node of `value`, in node order; every count is at least 1.
StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(const std::string& var,
                                                   const std::string& value);

}  // namespace hora

#endif  // HORA_RUNTIME_SLURM_LISTS_H_
