#include "coordinator/messages.h"

namespace hora {

Status CheckTensorSpec(const TensorSpec& spec) {
  // The largest dimension or element count accepted (2^48: far beyond any real tensor, small
  // enough that products of a few of them are checked before they overflow).
  constexpr int64_t kMaxDim = int64_t{1} << 48;
  if (spec.name.empty()) return InvalidArgument("tensor signature without a name");
  const std::string what = "tensor '" + spec.name + "'";
  if (!IsValidCollective(static_cast<int32_t>(spec.collective))) {
    return InvalidArgument(what + ": invalid collective " +
                           std::to_string(static_cast<int32_t>(spec.collective)));
  }
  if (!IsValidDataType(static_cast<int32_t>(spec.dtype))) {
    return InvalidArgument(what + ": invalid dtype " +
                           std::to_string(static_cast<int32_t>(spec.dtype)));
  }
  if (!IsValidReduceOp(static_cast<int32_t>(spec.op))) {
    return InvalidArgument(what + ": invalid reduce op " +
                           std::to_string(static_cast<int32_t>(spec.op)));
  }
  if (spec.device != Device::kCpu && spec.device != Device::kCuda) {
    return InvalidArgument(what + ": invalid device " +
                           std::to_string(static_cast<int32_t>(spec.device)));
  }
  if (spec.shape.size() > 64) {
    return InvalidArgument(what + ": shape has " + std::to_string(spec.shape.size()) + " dims");
  }
  int64_t n = 1;
  for (int64_t d : spec.shape) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(what + ": shape has an invalid value " + std::to_string(d));
    }
    if (d != 0 && n > kMaxDim / d) return InvalidArgument(what + ": shape is too large");
    n *= d;
  }
  for (int64_t d : spec.splits) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(what + ": splits has an invalid value " + std::to_string(d));
    }
  }
  if (spec.process_set < 0) {
    return InvalidArgument(what + ": invalid process set " + std::to_string(spec.process_set));
  }
  return Status::Ok();
}

}  // namespace hora
