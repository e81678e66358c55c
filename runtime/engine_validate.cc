// Argument checks for every enqueue: bad input is an INVALID_ARGUMENT naming what was wrong.
#include <cmath>
#include <limits>

#include "collectives/device.h"
#include "collectives/registry.h"
#include "runtime/engine.h"

namespace hora {
namespace {

constexpr size_t kMaxNameLength = 4096;
constexpr size_t kMaxDims = 64;

Status Bad(const TensorSpec& spec, const std::string& what) {
  return InvalidArgument(std::string(CollectiveName(spec.collective)) + " " +
                         DescribeTensor(TensorKeyOf(spec)) + ": " + what);
}

// Names travel in protobuf `string` fields, which must be UTF-8: a name that is not would make
// the coordinator drop this rank's whole session (its message does not parse), breaking the
// job with a misleading "connection broke". Structural check only (no overlong/surrogates).
bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xe  ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

Status CheckShape(const TensorSpec& spec) {
  if (spec.shape.size() > kMaxDims) {
    return Bad(spec, "has " + std::to_string(spec.shape.size()) + " dimensions; at most " +
                         std::to_string(kMaxDims) + " are supported");
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / 16;
  int64_t n = 1;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    int64_t d = spec.shape[i];
    if (d < 0)
      return Bad(spec,
                 "dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    if (d != 0 && n > limit / d)
      return Bad(spec, "shape " + ShapeString(spec.shape) + " overflows");
    n *= d;
  }
  return Status::Ok();
}

Status CheckSplits(const TensorSpec& spec, int size) {
  const int64_t d0 = spec.shape[0];
  if (spec.splits.empty()) {
    if (d0 % size != 0) {
      return Bad(spec, "first dimension " + std::to_string(d0) +
                           " is not divisible by the number of ranks " + std::to_string(size) +
                           "; give splits");
    }
    return Status::Ok();
  }
  if (static_cast<int>(spec.splits.size()) != size) {
    return Bad(spec, "has " + std::to_string(spec.splits.size()) + " splits; need one per rank (" +
                         std::to_string(size) + ")");
  }
  int64_t sum = 0;
  for (int64_t s : spec.splits) {
    if (s < 0) return Bad(spec, "split " + std::to_string(s) + " is negative");
    sum += s;
  }
  if (sum != d0) {
    return Bad(spec, "splits sum to " + std::to_string(sum) + " but the first dimension is " +
                         std::to_string(d0));
  }
  return Status::Ok();
}

}  // namespace

Status Engine::ValidateIdentity(const TensorSpec& spec,
                                std::shared_ptr<ProcessSetRuntime>* found) const {
  if (spec.name.empty()) return InvalidArgument("the operation needs a non-empty name");
  if (spec.name.size() > kMaxNameLength) {
    return InvalidArgument("name of " + std::to_string(spec.name.size()) +
                           " bytes is longer than " + std::to_string(kMaxNameLength));
  }
  if (!IsUtf8(spec.name)) return InvalidArgument("the operation's name is not valid UTF-8");
  if (!IsValidCollective(static_cast<int32_t>(spec.collective)))
    return InvalidArgument("unknown collective");
  std::shared_ptr<ProcessSetRuntime> set = FindSet(spec.process_set);
  if (!set) {
    return Bad(spec, "process set " + std::to_string(spec.process_set) +
                         " does not exist (never added, or removed)");
  }
  if (!set->included()) {
    std::string ranks;
    for (int r : set->ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    return Bad(spec, "rank " + std::to_string(options_.rank) + " is not a member of process set " +
                         std::to_string(spec.process_set) + " (ranks " + ranks + ")");
  }
  if (found != nullptr) *found = std::move(set);
  return Status::Ok();
}

Status Engine::ValidateSpec(const TensorSpec& spec, const ProcessSetRuntime& set, const void* input,
                            const void* output) const {
  if (!IsValidDataType(static_cast<int32_t>(spec.dtype))) {
    return Bad(spec, "unknown dtype " + std::to_string(static_cast<int>(spec.dtype)));
  }
  if (!IsValidReduceOp(static_cast<int32_t>(spec.op))) {
    return Bad(spec, "unknown reduce op " + std::to_string(static_cast<int>(spec.op)));
  }
  if (spec.device != Device::kCpu) {
    if (spec.device != Device::kCuda) {
      return Bad(spec, "unknown device " + std::to_string(static_cast<int>(spec.device)));
    }
    const DeviceRuntime* cuda = DeviceRuntimeFor(Device::kCuda);
    if (cuda == nullptr) {
      return Bad(spec,
                 "CUDA tensors need a libhora built with CUDA and NCCL; this one has "
                 "backends " +
                     BuiltBackendsString());
    }
    if (Status s = CheckSelection(options_.gpu_operations, Device::kCuda, kEnvGpuOperations);
        !s.ok()) {
      return Bad(spec, s.message());
    }
    if (Status s = cuda->Probe(spec.device_index); !s.ok()) return Bad(spec, s.message());
    // A set whose CUDA communicator could not be built would fail the bucket on every rank
    // and break the job: refuse here instead (NCCL not loadable, no backend that serves).
    BackendConfig c = BackendConfigFor(set.id(), set.ranks(), set.rank());
    c.device = Device::kCuda;
    c.device_index = spec.device_index;
    if (Status s = CheckCanServe(options_.gpu_operations, kEnvGpuOperations, c); !s.ok()) {
      return Bad(spec, s.message());
    }
    // Nor may a dtype the set's backend cannot reduce reach a bucket.
    const bool reduces = spec.collective == CollectiveType::kAllreduce ||
                         spec.collective == CollectiveType::kReducescatter;
    if (reduces) {
      Status s = CheckCanReduce(options_.gpu_operations, kEnvGpuOperations, c, spec.dtype);
      if (!s.ok()) return Bad(spec, s.message());
    }
  }
  if (spec.collective == CollectiveType::kBarrier) return Status::Ok();
  HORA_RETURN_IF_ERROR(CheckShape(spec));
  if (!std::isfinite(spec.prescale) || !std::isfinite(spec.postscale)) {
    return Bad(spec, "prescale and postscale must be finite");
  }
  const bool has_data = spec.NumElements() > 0;
  if (has_data && input == nullptr && spec.collective != CollectiveType::kRecv) {
    return Bad(spec, "input data is NULL");
  }
  const int size = set.size();
  switch (spec.collective) {
    case CollectiveType::kSend:
    case CollectiveType::kRecv:
      if (spec.peer < 0 || spec.peer >= size || spec.peer == set.rank()) {
        return Bad(spec, "peer " + std::to_string(spec.peer) + " is out of range [0, " +
                             std::to_string(size) + ") of process set " +
                             std::to_string(spec.process_set) + ", or this rank itself");
      }
      if (spec.collective == CollectiveType::kRecv && has_data && output == nullptr) {
        return Bad(spec, "output is NULL");
      }
      break;
    case CollectiveType::kAllreduce:
      if (has_data && output == nullptr) return Bad(spec, "output is NULL");
      break;
    case CollectiveType::kBroadcast:
      if (spec.root < 0 || spec.root >= size) {
        return Bad(spec, "root " + std::to_string(spec.root) + " is out of range [0, " +
                             std::to_string(size) + ")");
      }
      break;
    case CollectiveType::kAllgather:
    case CollectiveType::kReducescatter:
      if (spec.shape.empty()) return Bad(spec, "needs a tensor with at least one dimension");
      break;
    case CollectiveType::kAlltoall:
      if (spec.shape.empty()) return Bad(spec, "needs a tensor with at least one dimension");
      HORA_RETURN_IF_ERROR(CheckSplits(spec, size));
      break;
    default:
      break;
  }
  return Status::Ok();
}

}  // namespace hora
