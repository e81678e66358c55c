// hora.h's handles: poll, wait, release, and the results of finished operations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "bindings/c/api_util.h"
#include "collectives/device.h"

using hora::Code;
using hora::Status;
using namespace hora::capi;

extern "C" {

hora_status_t hora_poll(hora_handle_t handle, int* done) {
  if (done == nullptr) return Fail(Code::kInvalidArgument, "done pointer is NULL");
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  bool d = false;
  Status s = e->Poll(handle, &d);
  if (s.ok()) *done = d ? 1 : 0;
  return Report(s);
}

hora_status_t hora_wait(hora_handle_t handle, double timeout_seconds) {
  if (std::isnan(timeout_seconds)) return Fail(Code::kInvalidArgument, "timeout is NaN");
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  if (timeout_seconds > 1e9) timeout_seconds = -1;
  return Report(e->Wait(handle, std::chrono::duration<double>(timeout_seconds)));
}

hora_status_t hora_release(hora_handle_t handle) {
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  return Report(e->Release(handle));
}

hora_status_t hora_result_shape(hora_handle_t handle, int64_t* shape, int32_t max_ndim,
                                int32_t* ndim) {
  if (ndim == nullptr || (shape == nullptr && max_ndim > 0)) {
    return Fail(Code::kInvalidArgument, "shape or ndim pointer is NULL");
  }
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  return Report(e->handles().WithResult(handle, [&](const hora::OpResult& r) {
    *ndim = static_cast<int32_t>(r.shape.size());
    if (static_cast<int32_t>(r.shape.size()) > max_ndim) {
      return hora::InvalidArgument("the result has " + std::to_string(r.shape.size()) +
                                   " dimensions; max_ndim is " + std::to_string(max_ndim));
    }
    std::copy(r.shape.begin(), r.shape.end(), shape);
    return Status::Ok();
  }));
}

hora_status_t hora_result_copy(hora_handle_t handle, void* dst, size_t dst_bytes) {
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  return Report(e->handles().WithResult(handle, [&](const hora::OpResult& r) {
    if (r.device_data) {
      // A device result: dst is the framework's tensor (device or host memory).
      if (dst_bytes != r.device_bytes) {
        return hora::InvalidArgument("the result has " + std::to_string(r.device_bytes) +
                                     " bytes; the destination has " + std::to_string(dst_bytes));
      }
      if (r.device_bytes > 0 && dst == nullptr) return hora::InvalidArgument("destination is NULL");
      return hora::DeviceRuntimeFor(hora::Device::kCuda)
          ->Copy(r.device_index, dst, r.device_data.get(), r.device_bytes, r.device_stream);
    }
    if (r.placed != nullptr) {  // already in the caller's buffer
      if (dst_bytes != r.placed_bytes) {
        return hora::InvalidArgument("the result has " + std::to_string(r.placed_bytes) +
                                     " bytes; the destination has " + std::to_string(dst_bytes));
      }
      if (dst == nullptr) return hora::InvalidArgument("destination is NULL");
      if (dst != r.placed) std::memcpy(dst, r.placed, r.placed_bytes);
      return Status::Ok();
    }
    if (dst_bytes != r.data.size()) {
      return hora::InvalidArgument("the result has " + std::to_string(r.data.size()) +
                                   " bytes; the destination has " + std::to_string(dst_bytes));
    }
    if (!r.data.empty() && dst == nullptr) return hora::InvalidArgument("destination is NULL");
    if (!r.data.empty()) std::memcpy(dst, r.data.data(), r.data.size());
    return Status::Ok();
  }));
}

hora_status_t hora_result_splits(hora_handle_t handle, int64_t* splits, int32_t n) {
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  return Report(e->handles().WithResult(handle, [&](const hora::OpResult& r) {
    if (n != static_cast<int32_t>(r.splits.size()) || (n > 0 && splits == nullptr)) {
      return hora::InvalidArgument("the result has " + std::to_string(r.splits.size()) +
                                   " splits; the destination has room for " + std::to_string(n));
    }
    std::copy(r.splits.begin(), r.splits.end(), splits);
    return Status::Ok();
  }));
}

hora_status_t hora_result_join_rank(hora_handle_t handle, int32_t* last_rank) {
  if (last_rank == nullptr) return Fail(Code::kInvalidArgument, "last_rank pointer is NULL");
  hora_status_t st = HORA_OK;
  auto e = ForHandles(&st);
  if (!e) return st;
  return Report(e->handles().WithResult(handle, [&](const hora::OpResult& r) {
    *last_rank = r.join_rank;
    return Status::Ok();
  }));
}

}  // extern "C"
