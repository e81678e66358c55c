#include "runtime/tensor_queue.h"

#include "common/mutex.h"

namespace hora {

Status InFlightError(const TensorKey& key) {
  return Status(Code::kAlreadyExists, "an operation named " + DescribeTensor(key) +
                                          " is already in flight on this rank; wait for it "
                                          "before enqueueing the name again");
}

Status TensorQueue::Push(Request request, bool fresh) {
  MutexLock lock(&mu_);
  // The key goes into a spare node's key (its name's storage is reused: no allocation).
  InFlight::node_type node = spare_.TakeOrMake();
  node.key().process_set = request.spec.process_set;
  node.key().name.assign(request.spec.name);
  if (in_flight_.count(node.key()) != 0) {
    Status exists = InFlightError(node.key());
    spare_.Keep(std::move(node));
    return exists;
  }
  if (fresh) fresh_.push_back(node.key());
  node.mapped() = std::move(request);
  in_flight_.insert(std::move(node));
  return Status::Ok();
}

void TensorQueue::AnnounceFresh(const std::function<void(const Request&)>& fn) {
  MutexLock lock(&mu_);
  for (const TensorKey& key : fresh_) {
    auto it = in_flight_.find(key);
    if (it != in_flight_.end()) fn(it->second);
  }
  fresh_.clear();
}

bool TensorQueue::Contains(const TensorKey& key) const {
  MutexLock lock(&mu_);
  return in_flight_.count(key) != 0;
}

std::optional<Request> TensorQueue::Take(const TensorKey& key) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(key);
  if (it == in_flight_.end()) return std::nullopt;
  return std::move(spare_.Extract(&in_flight_, it));
}

std::vector<Request> TensorQueue::TakeAll() {
  MutexLock lock(&mu_);
  std::vector<Request> out;
  for (auto& kv : in_flight_) out.push_back(std::move(kv.second));
  in_flight_.clear();
  fresh_.clear();
  return out;
}

std::vector<Request> TensorQueue::TakeSet(int32_t process_set) {
  MutexLock lock(&mu_);
  std::vector<Request> out;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->first.process_set != process_set) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second));
    it = in_flight_.erase(it);
  }
  return out;
}

size_t TensorQueue::size() const {
  MutexLock lock(&mu_);
  return in_flight_.size();
}

}  // namespace hora
