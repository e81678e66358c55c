// How long a test lets a wait run that the product bounds by a configured deadline.
//
// The product promises to end the wait after `deadline`. Tests run on shared, loaded 2-core
// machines, so they never assert that promise to the millisecond: they accept anything up to
// HangBound(deadline), which still fails a wait that hangs or forgot its deadline. The
// detection figures themselves are measured by tests/faults (and printed), not asserted here.
#ifndef HORA_TESTS_HARNESS_HANG_BOUND_H_
#define HORA_TESTS_HARNESS_HANG_BOUND_H_

#include <chrono>

namespace hora {
namespace testing {

inline std::chrono::milliseconds HangBound(std::chrono::milliseconds deadline) {
  return 4 * deadline + std::chrono::seconds(10);
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_HARNESS_HANG_BOUND_H_
