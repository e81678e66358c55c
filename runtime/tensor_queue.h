// The hand-off from framework threads to the background thread.
//
// Framework threads Push requests; a name may be in flight at most once. The background
// thread drains the fresh ones in batches (PopFresh) to announce them to the coordinator, and
// Takes a request out when its bucket runs or it fails, which frees the name. Thread-safe.
#ifndef HORA_RUNTIME_TENSOR_QUEUE_H_
#define HORA_RUNTIME_TENSOR_QUEUE_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {

struct Request {
  int64_t handle = 0;
  TensorSpec spec;
  const void* input = nullptr;  // caller-owned, valid until the handle is done
  void* output = nullptr;       // allreduce: same shape as input (may equal it); broadcast: in place
};

class TensorQueue {
 public:
  // ALREADY_EXISTS when a request with the same name is in flight.
  Status Push(Request request);
  // The requests pushed since the last call, in push order (copies of their specs' owners
  // stay in the queue until Take).
  std::vector<const Request*> PopFresh();
  // Removes and returns the request with this name; nullopt if none.
  std::optional<Request> Take(const std::string& name);
  // Removes and returns every request (shutdown, sticky error).
  std::vector<Request> TakeAll();
  size_t size() const;

 private:
  mutable std::mutex mu_;
  // Node-based map: pointers handed out by PopFresh stay valid until Take.
  std::unordered_map<std::string, Request> in_flight_;  // guarded by mu_
  std::vector<std::string> fresh_;                       // guarded by mu_
};

}  // namespace hora

#endif  // HORA_RUNTIME_TENSOR_QUEUE_H_
