// Private to the planner (coordinator/planner.cc): the cross-rank checks that run when a
// name is complete, and the bucket entry built from the agreeing specs. Pure functions.
#ifndef HORA_COORDINATOR_PLANNER_CHECK_H_
#define HORA_COORDINATOR_PLANNER_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "coordinator/planner.h"

namespace hora {
namespace planner_internal {

// The specs of one complete name: rank r's is distinct[spec_of[r]], meaningful only where
// submitted[r]; a rank that did not submit has joined (joined[r]). At least one rank submitted.
// Ranks that submitted equal specs share one copy.
struct CompleteName {
  const std::string& name;
  const std::vector<TensorSpec>& distinct;
  const std::vector<uint32_t>& spec_of;
  const std::vector<bool>& submitted;
  const std::vector<bool>& joined;
  int size;
  const TensorSpec& spec(int rank) const { return distinct[spec_of[rank]]; }
};

// The lowest rank that submitted.
int ReferenceRank(const CompleteName& c);

// OK, or why the name cannot run, in this order:
//   kMismatch         the first field (collective, dtype, op, shape, root, prescale,
//                     postscale, device) that differs across the submitting ranks, with
//                     which ranks had which value;
//   kInvalidArgument  a collective other than allreduce that needs a joined rank's data;
//   kInvalidArgument  per-collective sanity: negative dimensions, allgather / alltoall /
//                     reducescatter with no dimension, broadcast root out of range, alltoall
//                     splits of the wrong length, negative, or not summing to shape[0], or
//                     an even split that does not divide shape[0].
Status CheckComplete(const CompleteName& c);

// A send/recv pair: `pair` is {sender, receiver}, both submitted. kMismatch when they are not
// one send and one recv naming each other, or their dtype, device or element count differ.
Status CheckPointToPoint(const CompleteName& c, const std::vector<int>& pair);

// kInvalidArgument with the refusing rank's reason when a rank refused the name (its spec's
// `refused`); OK otherwise.
Status CheckRefused(const CompleteName& c);

// The bucket entry of a name that passed CheckComplete (or CheckPointToPoint).
PlannedBucket::Entry MakeEntry(const CompleteName& c);

// "rank 1" or "ranks 0,2".
std::string RanksString(const std::vector<int>& ranks);

}  // namespace planner_internal
}  // namespace hora

#endif  // HORA_COORDINATOR_PLANNER_CHECK_H_
