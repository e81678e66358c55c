// The hand-off from framework threads to the runtime.
//
// Framework threads Push requests; a name may be in flight at most once per process set.
// The enqueuing thread then drains the fresh requests (AnnounceFresh) to announce them to the
// coordinator; a request leaves the queue (Take) when its bucket runs or it fails, which frees
// its name. Thread-safe.
#ifndef HORA_RUNTIME_TENSOR_QUEUE_H_
#define HORA_RUNTIME_TENSOR_QUEUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/device.h"
#include "common/mutex.h"
#include "common/node_cache.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

struct Request {
  int64_t handle = 0;
  TensorSpec spec;
  const void* input = nullptr;  // caller-owned, valid until the handle is done
  void* output = nullptr;  // allreduce: same shape as input (may equal it); broadcast: in place
  // allgather, reducescatter, alltoall: output's size in bytes when the caller gave one
  // (hora_*_into_async): a CPU result of exactly this size is written there instead of
  // being held (0: held).
  size_t output_bytes = 0;
  void* stream = nullptr;  // CUDA: the framework's stream the input is ready on
  // Device tensors: an event recorded on `stream` at enqueue time; the bucket's stream waits
  // for it before reading the input (the framework may queue more work on its stream later).
  std::shared_ptr<DeviceEvent> ready;
};

// ALREADY_EXISTS: an operation with this key is in flight on this rank.
Status InFlightError(const TensorKey& key);

class TensorQueue {
 public:
  // ALREADY_EXISTS when a request with the same (process set, name) is in flight. A request
  // pushed with fresh = false is never announced (what the steady path hands back at Abort
  // or Stop, runtime/steady_path.h, for the engine to fail).
  Status Push(Request request, bool fresh = true);
  // Calls fn on each request pushed since the last call, in push order, under the queue's
  // lock: a request cannot be taken (completed, its buffers released by the caller) while
  // fn reads it. fn must not call back into the queue.
  void AnnounceFresh(const std::function<void(const Request&)>& fn);
  bool Contains(const TensorKey& key) const;
  // Removes and returns the request with this key; nullopt if none.
  std::optional<Request> Take(const TensorKey& key);
  // Removes and returns every request (shutdown, sticky error) or those of one process set.
  std::vector<Request> TakeAll();
  std::vector<Request> TakeSet(int32_t process_set);
  size_t size() const;

 private:
  mutable Mutex mu_;
  using InFlight = std::unordered_map<TensorKey, Request, TensorKeyHash>;
  InFlight in_flight_ GUARDED_BY(mu_);
  NodeCache<InFlight> spare_ GUARDED_BY(mu_);  // no malloc per request
  std::vector<TensorKey> fresh_ GUARDED_BY(mu_);
};

}  // namespace hora

#endif  // HORA_RUNTIME_TENSOR_QUEUE_H_
