// The rendezvous store: set, and get that waits for the key up to the caller's timeout.
#include <algorithm>

#include "common/mutex.h"
#include "coordinator/auth.h"
#include "coordinator/service_impl.h"

namespace hora {
namespace {

constexpr int64_t kMaxStoreWaitMs = int64_t{24} * 3600 * 1000;

}  // namespace

grpc::Status CoordinatorServiceImpl::StoreSet(grpc::ServerContext* ctx,
                                              const proto::StoreSetRequest* request,
                                              proto::StoreSetResponse* /*response*/) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "StoreSet");
  if (!auth.ok()) return auth;
  if (request->key().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "store: empty key");
  }
  MutexLock lock(&store_mu_);
  if (store_closed_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }
  if (request->erase()) {
    store_.erase(request->key());
    return grpc::Status::OK;
  }
  store_[request->key()] = request->value();
  store_cv_.NotifyAll();
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreGet(grpc::ServerContext* ctx,
                                              const proto::StoreGetRequest* request,
                                              proto::StoreGetResponse* response) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "StoreGet");
  if (!auth.ok()) return auth;
  const std::string& key = request->key();
  if (key.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "store: empty key");
  const int64_t timeout_ms = std::clamp<int64_t>(request->timeout_ms(), 0, kMaxStoreWaitMs);
  TimePoint deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const auto client_deadline = ctx->deadline();
  if (client_deadline != std::chrono::system_clock::time_point::max()) {
    deadline =
        std::min(deadline, Clock::now() + (client_deadline - std::chrono::system_clock::now()));
  }
  MutexLock lock(&store_mu_);
  store_cv_.WaitUntil(&store_mu_, deadline, [&] {
    store_mu_.AssertHeld();
    return store_closed_ || store_.count(key) > 0;
  });
  auto it = store_.find(key);
  if (it != store_.end()) {
    response->set_value(it->second);
    return grpc::Status::OK;
  }
  if (store_closed_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }
  return grpc::Status(
      grpc::StatusCode::DEADLINE_EXCEEDED,
      "store: key '" + key + "' was not set within " + std::to_string(timeout_ms) + " ms");
}

}  // namespace hora
