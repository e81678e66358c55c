#include "runtime/tensor_queue.h"

#include "common/mutex.h"

namespace hora {

Status TensorQueue::Push(Request request, bool fresh) {
  MutexLock lock(&mu_);
  TensorKey key = TensorKeyOf(request.spec);
  if (in_flight_.count(key) != 0) {
    return Status(Code::kAlreadyExists, "an operation named " + DescribeTensor(key) +
                                            " is already in flight on this "
                                            "rank; wait for it before enqueueing the name again");
  }
  if (fresh) fresh_.push_back(key);
  in_flight_.emplace(std::move(key), std::move(request));
  return Status::Ok();
}

void TensorQueue::MarkFresh(const TensorKey& key) {
  MutexLock lock(&mu_);
  if (in_flight_.count(key) != 0) fresh_.push_back(key);
}

void TensorQueue::AnnounceFresh(const std::function<void(const Request&)>& fn) {
  MutexLock lock(&mu_);
  for (const TensorKey& key : fresh_) {
    auto it = in_flight_.find(key);
    if (it != in_flight_.end()) fn(it->second);
  }
  fresh_.clear();
}

std::optional<Request> TensorQueue::Take(const TensorKey& key) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(key);
  if (it == in_flight_.end()) return std::nullopt;
  Request r = std::move(it->second);
  in_flight_.erase(it);
  return r;
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
