#include "coordinator/grpc_process.h"

#include <absl/synchronization/mutex.h>

#include <mutex>

namespace hora {

void PrepareGrpcProcess() {
  static std::once_flag once;
  std::call_once(once, [] { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); });
}

}  // namespace hora
