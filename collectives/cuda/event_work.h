// The Work of a CUDA backend's Fence() (collectives/communicator.h, "Completion"): done when
// a CUDA event recorded on the backend's stream has completed, shared by the NCCL and staged
// backends.
//
// Each Test, in order: an aborted backend fails the Work with its reason (an aborted kernel's
// event completes with garbage data); a completed event ends it with the backend's own
// errors polled once more (NCCL's asynchronous error); a CUDA error aborts the backend; the
// backend's errors are polled; past the timeout the backend is aborted with
// DEADLINE_EXCEEDED "<what> did not complete within T ms<hint>".
#ifndef HORA_COLLECTIVES_CUDA_EVENT_WORK_H_
#define HORA_COLLECTIVES_CUDA_EVENT_WORK_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "common/status.h"

namespace hora {

// What a backend's Works share with it; thread-safe. May outlive the communicator.
class EventWorkSource {
 public:
  virtual ~EventWorkSource() = default;
  virtual bool aborted() const = 0;
  virtual Status reason() const = 0;             // the first abort's reason
  virtual void Abort(const Status& reason) = 0;  // the first reason sticks
  // The backend's own errors, polled on every Test (an error aborts the backend).
  virtual Status PollErrors() { return Status::Ok(); }
};

struct EventWorkInfo {
  std::string what;  // "NCCL work on rank 3", for the messages
  std::string hint;  // appended to the deadline's message: " (a peer that stopped or died?)"
  std::chrono::milliseconds timeout{30000};
};

// Takes ownership of `event` (destroyed with the Work).
std::unique_ptr<Work> MakeEventWork(std::shared_ptr<EventWorkSource> source, cudaEvent_t event,
                                    EventWorkInfo info);
// A Work already finished with `status`.
std::unique_ptr<Work> MakeFailedWork(Status status);

// Fence() for a backend: records an event on `stream` (on the current device) and returns its
// Work; a CUDA error aborts the source and returns a failed Work.
std::unique_ptr<Work> FenceStream(const std::shared_ptr<EventWorkSource>& source,
                                  cudaStream_t stream, EventWorkInfo info);

}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_EVENT_WORK_H_
