#include "collectives/nccl/nccl_communicator.h"

#include <numeric>
#include <thread>

#include "collectives/cuda/cuda_device.h"
#include "collectives/nccl/nccl_state.h"

namespace hora {
namespace {

StatusOr<ncclDataType_t> NcclType(DataType t) {
  switch (t) {
    case DataType::kUint8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBfloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt16:
    case DataType::kUint16:
      return InvalidArgument(std::string("NCCL cannot reduce ") + DataTypeName(t) +
                             " tensors (it has no 16-bit integer type): reduce them on the CPU, "
                             "or as int32");
  }
  return InvalidArgument("invalid dtype " + std::to_string(static_cast<int>(t)));
}

StatusOr<ncclRedOp_t> NcclOp(ReduceOp op, DataType t) {
  const bool is_bool = t == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum:
      return is_bool ? ncclMax : ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kProduct:
      return is_bool ? ncclMin : ncclProd;
    default:
      return InvalidArgument(std::string("the NCCL backend does not reduce with ") +
                             ReduceOpName(op) + " (average is the runtime's sum and postscale)");
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclState> state, void* scratch)
      : state_(std::move(state)),
        api_(state_->api()),
        ops_(state_->device(), state_->stream()),
        scratch_(scratch) {}
  ~NcclCommunicator() override {
    if (!UseDevice(state_->device()).ok()) return;
    // Wait for the stream's work, bounded: past the timeout (a kernel waiting for a peer that
    // is gone) or on an NCCL error, abort, which ends those kernels.
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout();
    while (cudaStreamQuery(state_->stream()) == cudaErrorNotReady) {
      bool busy = false;
      if (!state_->Poll("shutdown", &busy).ok()) break;  // aborted: the kernels end
      if (std::chrono::steady_clock::now() > deadline) {
        state_->Abort(DeadlineExceeded("NCCL work still running at shutdown"));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    cudaStreamSynchronize(state_->stream());  // bounded now: finished or aborted kernels
    cudaFree(scratch_);
  }

  int rank() const override { return state_->rank(); }
  int size() const override { return state_->size(); }
  const char* name() const override { return "nccl"; }
  DeviceOps* device_ops() override { return &ops_; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    auto t = NcclType(dtype);
    if (!t.ok()) return t.status();
    auto o = NcclOp(op, dtype);
    if (!o.ok()) return o.status();
    HORA_RETURN_IF_ERROR(Ready());
    if (count == 0) return Status::Ok();
    return state_->Issue("allreduce", [&](ncclComm_t c) {
      return api_.AllReduce(buf, buf, count, t.value(), o.value(), c, stream());
    });
  }

  Status Broadcast(void* buf, size_t bytes, int root) override {
    HORA_RETURN_IF_ERROR(CheckRank(root, "broadcast root"));
    HORA_RETURN_IF_ERROR(Ready());
    if (bytes == 0) return Status::Ok();
    return state_->Issue("broadcast", [&](ncclComm_t c) {
      return api_.Broadcast(buf, buf, bytes, ncclUint8, root, c, stream());
    });
  }

  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    HORA_RETURN_IF_ERROR(CheckSizes(bytes.size(), "allgather"));
    HORA_RETURN_IF_ERROR(Ready());
    char* o = static_cast<char*>(out);
    if (AllEqual(bytes)) {
      if (bytes[0] == 0) return Status::Ok();
      return state_->Issue("allgather", [&](ncclComm_t c) {
        return api_.AllGather(in, out, bytes[0], ncclUint8, c, stream());
      });
    }
    // Uneven: one broadcast per rank from its own contribution, in one group.
    return state_->Issue("allgather (uneven)", [&](ncclComm_t c) {
      return Group([&](ncclResult_t* first) {
        size_t off = 0;
        for (int r = 0; r < size(); ++r) {
          if (bytes[r] > 0) {
            const void* src = r == rank() ? in : o + off;
            Keep(first, api_.Broadcast(src, o + off, bytes[r], ncclUint8, r, c, stream()));
          }
          off += bytes[r];
        }
      });
    });
  }

  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    HORA_RETURN_IF_ERROR(CheckSizes(send_bytes.size(), "alltoall send sizes"));
    HORA_RETURN_IF_ERROR(CheckSizes(recv_bytes.size(), "alltoall receive sizes"));
    HORA_RETURN_IF_ERROR(Ready());
    const char* i = static_cast<const char*>(in);
    char* o = static_cast<char*>(out);
    return state_->Issue("alltoall", [&](ncclComm_t c) {
      return Group([&](ncclResult_t* first) {
        size_t soff = 0, roff = 0;
        for (int r = 0; r < size(); ++r) {
          if (send_bytes[r] > 0) {
            Keep(first, api_.Send(i + soff, send_bytes[r], ncclUint8, r, c, stream()));
          }
          if (recv_bytes[r] > 0) {
            Keep(first, api_.Recv(o + roff, recv_bytes[r], ncclUint8, r, c, stream()));
          }
          soff += send_bytes[r];
          roff += recv_bytes[r];
        }
      });
    });
  }

  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    HORA_RETURN_IF_ERROR(CheckSizes(counts.size(), "reducescatter"));
    auto t = NcclType(dtype);
    if (!t.ok()) return t.status();
    auto rop = NcclOp(op, dtype);
    if (!rop.ok()) return rop.status();
    HORA_RETURN_IF_ERROR(Ready());
    if (AllEqual(counts)) {
      if (counts[0] == 0) return Status::Ok();
      return state_->Issue("reducescatter", [&](ncclComm_t c) {
        return api_.ReduceScatter(in, out, counts[0], t.value(), rop.value(), c, stream());
      });
    }
    // Uneven: one reduce per rank to that rank, in one group.
    const char* i = static_cast<const char*>(in);
    const size_t esize = DataTypeSize(dtype);
    return state_->Issue("reducescatter (uneven)", [&](ncclComm_t c) {
      return Group([&](ncclResult_t* first) {
        size_t off = 0;
        for (int r = 0; r < size(); ++r) {
          if (counts[r] > 0) {
            Keep(first, api_.Reduce(i + off * esize, out, counts[r], t.value(), rop.value(), r, c,
                                    stream()));
          }
          off += counts[r];
        }
      });
    });
  }

  Status Barrier() override {
    HORA_RETURN_IF_ERROR(Ready());
    return state_->Issue("barrier", [&](ncclComm_t c) {
      return api_.AllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, c, stream());
    });
  }

  Status Send(const void* buf, size_t bytes, int peer, uint32_t) override {
    HORA_RETURN_IF_ERROR(CheckPeer(peer));
    HORA_RETURN_IF_ERROR(Ready());
    if (bytes == 0) return Status::Ok();
    return state_->Issue(
        "send", [&](ncclComm_t c) { return api_.Send(buf, bytes, ncclUint8, peer, c, stream()); });
  }

  Status Recv(void* buf, size_t bytes, int peer, uint32_t) override {
    HORA_RETURN_IF_ERROR(CheckPeer(peer));
    HORA_RETURN_IF_ERROR(Ready());
    if (bytes == 0) return Status::Ok();
    return state_->Issue(
        "recv", [&](ncclComm_t c) { return api_.Recv(buf, bytes, ncclUint8, peer, c, stream()); });
  }

  std::unique_ptr<Work> Fence() override {
    Status s = Ready();
    if (!s.ok()) return MakeFailedWork(s);
    return FenceStream(state_, stream(),
                       {"NCCL work on rank " + std::to_string(rank()),
                        " (a peer that stopped or died?)", state_->timeout()});
  }

  void Abort(const Status& reason) override { state_->Abort(reason); }

 private:
  cudaStream_t stream() const { return state_->stream(); }

  // Not aborted, and this thread on the communicator's device.
  Status Ready() {
    if (state_->aborted()) return state_->reason();
    return UseDevice(state_->device());
  }
  Status CheckRank(int r, const char* what) const {
    if (r < 0 || r >= size()) {
      return InvalidArgument(std::string(what) + " " + std::to_string(r) + " is out of range [0, " +
                             std::to_string(size()) + ")");
    }
    return Status::Ok();
  }
  Status CheckPeer(int peer) const {
    HORA_RETURN_IF_ERROR(CheckRank(peer, "peer"));
    if (peer == rank()) return InvalidArgument("peer " + std::to_string(peer) + " is this rank");
    return Status::Ok();
  }
  Status CheckSizes(size_t n, const char* what) const {
    if (static_cast<int>(n) != size()) {
      return InvalidArgument(std::string(what) + ": " + std::to_string(n) + " sizes for " +
                             std::to_string(size()) + " ranks");
    }
    return Status::Ok();
  }
  static bool AllEqual(const std::vector<size_t>& v) {
    for (size_t x : v) {
      if (x != v[0]) return false;
    }
    return true;
  }
  static void Keep(ncclResult_t* first, ncclResult_t r) {
    if (*first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) *first = r;
  }
  // ncclGroupStart; body(&first error); ncclGroupEnd (always, so that the group is closed).
  template <typename Body>
  ncclResult_t Group(Body body) {
    ncclResult_t first = api_.GroupStart();
    if (first != ncclSuccess) return first;
    body(&first);
    const ncclResult_t end = api_.GroupEnd();
    return first != ncclSuccess ? first : end;
  }

  const std::shared_ptr<NcclState> state_;
  const NcclApi& api_;
  CudaDeviceOps ops_;
  void* const scratch_;  // 4 bytes of device memory for Barrier
};

}  // namespace

Status NcclCanReduce(DataType dtype) { return NcclType(dtype).status(); }

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclConfig& config) {
  const NcclLoadResult& nccl = LoadNccl(config.env);
  if (nccl.api == nullptr) return nccl.status;
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return InvalidArgument("NCCL communicator: rank " + std::to_string(config.rank) + " of size " +
                           std::to_string(config.size));
  }
  HORA_RETURN_IF_ERROR(CudaRuntime()->Probe(config.device));
  HORA_RETURN_IF_ERROR(UseDevice(config.device));
  const std::string key = config.key_prefix + "nccl_id";
  ncclUniqueId id;
  if (config.rank == 0) {
    const ncclResult_t r = nccl.api->GetUniqueId(&id);
    if (r != ncclSuccess) {
      return Internal(std::string("ncclGetUniqueId: ") + nccl.api->GetErrorString(r));
    }
    if (config.size > 1) {
      if (config.store == nullptr) return InvalidArgument("NCCL communicator without a store");
      HORA_RETURN_IF_ERROR(config.store->Set(key, std::string(id.internal, sizeof(id.internal))));
    }
  } else {
    if (config.store == nullptr) return InvalidArgument("NCCL communicator without a store");
    auto got = config.store->Get(key, config.timeout);
    if (!got.ok()) return got.status();
    if (got.value().size() != sizeof(id.internal)) {
      return Internal("the NCCL unique id under '" + key + "' has " +
                      std::to_string(got.value().size()) + " bytes, not " +
                      std::to_string(sizeof(id.internal)));
    }
    got.value().copy(id.internal, sizeof(id.internal));
  }
  auto state = std::make_shared<NcclState>(nccl.api, config.rank, config.size, config.device,
                                           config.timeout);
  HORA_RETURN_IF_ERROR(state->Init(id));
  void* scratch = nullptr;
  const cudaError_t e = cudaMalloc(&scratch, sizeof(int32_t));
  if (e != cudaSuccess) return CudaError(e, "cudaMalloc of the barrier's scratch");
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(state), scratch));
}

}  // namespace hora
