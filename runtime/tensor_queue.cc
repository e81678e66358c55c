#include "runtime/tensor_queue.h"

namespace hora {

Status TensorQueue::Push(Request request) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = request.spec.name;
  if (in_flight_.count(name) != 0) {
    return Status(Code::kAlreadyExists,
                  "an operation named '" + name + "' is already in flight on this rank; "
                  "wait for it before enqueueing the name again");
  }
  in_flight_.emplace(name, std::move(request));
  fresh_.push_back(name);
  return Status::Ok();
}

std::vector<const Request*> TensorQueue::PopFresh() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Request*> out;
  out.reserve(fresh_.size());
  for (const std::string& name : fresh_) {
    auto it = in_flight_.find(name);
    if (it != in_flight_.end()) out.push_back(&it->second);
  }
  fresh_.clear();
  return out;
}

std::optional<Request> TensorQueue::Take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(name);
  if (it == in_flight_.end()) return std::nullopt;
  Request r = std::move(it->second);
  in_flight_.erase(it);
  return r;
}

std::vector<Request> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Request> out;
  for (auto& kv : in_flight_) out.push_back(std::move(kv.second));
  in_flight_.clear();
  fresh_.clear();
  return out;
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_.size();
}

}  // namespace hora
