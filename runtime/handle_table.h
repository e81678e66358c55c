// The handle table: how framework threads learn that an operation finished.
//
// Every enqueued operation gets a handle (a positive int64, never reused). The background
// thread completes it with a Status and, for collectives whose output size is known only
// after negotiation, a Result. Framework threads poll, wait with a timeout, read the result
// and release. Thread-safe; Wait blocks only on this table's condition variable.
#ifndef HORA_RUNTIME_HANDLE_TABLE_H_
#define HORA_RUNTIME_HANDLE_TABLE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/node_cache.h"
#include "common/status.h"
#include "runtime/flight_recorder.h"

namespace hora {

struct OpResult {
  std::vector<int64_t> shape;
  std::vector<char> data;
  // Or, when the result was written straight into the caller's buffer (an allgather,
  // reducescatter or alltoall with an output: Request::output_bytes), where it is; data is
  // then empty.
  const void* placed = nullptr;
  size_t placed_bytes = 0;
  std::vector<int64_t> splits;  // alltoall: rows received from each rank
  int join_rank = -1;           // join: the last rank to join
  // Device tensors: the result lives in device memory (data is then empty); freed with the
  // result. hora_result_copy copies it into the framework's tensor.
  std::shared_ptr<void> device_data;
  size_t device_bytes = 0;
  int device_index = 0;
  void* device_stream = nullptr;  // the framework's stream of the request (copies run on it)
};

class HandleTable {
 public:
  // recorder (may be null; not owned, outlives the table) gets every handle's end.
  explicit HandleTable(FlightRecorder* recorder = nullptr) : recorder_(recorder) {}
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // yield_us: how long a waiter yields its core, checking, before it sleeps: for operations
  // that usually finish within microseconds of the wait (a transfer's other side is already
  // in flight), where waking from the condition variable costs more than the operation.
  int64_t Create(int yield_us = 0);
  // Completes a pending handle; a handle already done or released is left alone.
  void Complete(int64_t handle, Status status, OpResult result);
  void Complete(int64_t handle, Status status);  // no result (the entry's stays empty)

  // NOT_FOUND for unknown or released handles.
  Status Poll(int64_t handle, bool* done);
  // Returns the operation's status; DEADLINE_EXCEEDED if timeout passes first.
  // A negative timeout waits without a limit of its own.
  Status Wait(int64_t handle, std::chrono::duration<double> timeout);
  // REQUIRES: the handle is done. Calls fn with the result under the lock.
  template <typename Fn>
  Status WithResult(int64_t handle, Fn fn) {
    MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return NotFound(handle);
    if (!it->second.done)
      return Status(Code::kFailedPrecondition, "the operation has not finished");
    if (!it->second.status.ok()) return it->second.status;
    return fn(it->second.result);
  }
  Status Release(int64_t handle);

  size_t size() const;

 private:
  FlightRecorder* const recorder_;
  struct Entry {
    bool done = false;
    int yield_us = 0;
    Status status;
    OpResult result;
  };
  static Status NotFound(int64_t handle);

  mutable Mutex mu_;
  CondVar cv_;
  int64_t next_ GUARDED_BY(mu_) = 1;
  std::unordered_map<int64_t, Entry> entries_ GUARDED_BY(mu_);
  NodeCache<std::unordered_map<int64_t, Entry>> spare_ GUARDED_BY(mu_);  // no malloc per handle
};

}  // namespace hora

#endif  // HORA_RUNTIME_HANDLE_TABLE_H_
