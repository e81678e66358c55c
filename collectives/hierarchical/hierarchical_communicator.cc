// The hierarchical allreduce, the delegation of the other collectives, and creation.
//
// Allreduce of `count` elements on a set of H hosts with L members each. The buffer is cut
// into L shards (ShardCounts: the first count % L shards one element longer), shard i
// belonging to local rank i.
//   1. Host-local reducescatter: local rank i receives shard i reduced over its host's
//      members, into a scratch buffer of shard-size.
//   2. Cross-host allreduce of that shard among the members with local index i, one per
//      host: afterwards the shard is reduced over the whole set, with the same bits on all
//      of them (each inner backend gives every member the same bits).
//   3. Host-local allgatherv of the shards back into the buffer.
// So each byte crosses the network once per direction per host instead of once per member,
// and inside a host the work is spread over every member. The result is op over all
// members, grouped by host: exact for integers and min/max, within rounding of a flat
// allreduce for floating-point sums and products. Counts below L leave some shards empty
// (those members exchange zero elements across hosts). A zero count returns at once.
//
// A buffer of more than the agreed chunk size (HierarchicalOptions::chunk_bytes) is cut into
// chunks of that many bytes, each sharded and run through the three steps as above, and the
// steps of different chunks overlap (chunk_pipeline.h): the cross-host allreduces on a helper
// thread, which drives the cross-host communicator alone until the call returns. Every
// element is still reduced in its host, then across the hosts; a float sum may round
// differently than unchunked where the chunking moves the element to another member's shard
// (HORA_DETERMINISTIC's reductions do not depend on the backend's order).
#include "collectives/hierarchical/hierarchical_communicator.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/hierarchical/chunk_pipeline.h"
#include "collectives/hierarchical/host_layout.h"
#include "common/cpus.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/types.h"

namespace hora {
namespace {

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(int rank, int size, size_t chunk_bytes,
                           std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> cross,
                           std::unique_ptr<Communicator> flat)
      : rank_(rank),
        size_(size),
        chunk_bytes_(chunk_bytes),
        local_(std::move(local)),
        cross_(std::move(cross)),
        flat_(std::move(flat)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return kHierarchicalBackend; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    return Reduce(buf, count, dtype, op, nullptr);
  }

  // The postscale goes on this member's shard between the cross-host allreduce and the
  // host-local allgather: one member in a host scales each element, once.
  bool folds_postscale() const override { return true; }
  Status AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                         const Postscale& post) override {
    return Reduce(buf, count, dtype, op, post.identity() ? nullptr : &post);
  }

  Status Broadcast(void* buf, size_t bytes, int root) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Broadcast(buf, bytes, root), *flat_, "broadcast");
  }

  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Allgatherv(in, out, bytes_per_rank), *flat_, "allgatherv");
  }

  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Alltoallv(in, send_bytes, out, recv_bytes), *flat_, "alltoallv");
  }

  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Reducescatter(in, out, counts, dtype, op), *flat_, "reducescatter");
  }

  Status Barrier() override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Barrier(), *flat_, "barrier");
  }

  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Send(buf, bytes, peer, tag), *flat_,
                 "send to rank " + std::to_string(peer));
  }

  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(Error());
    return Check(flat_->Recv(buf, bytes, peer, tag), *flat_,
                 "recv from rank " + std::to_string(peer));
  }

  void Abort(const Status& reason) override {
    {
      MutexLock lock(&mu_);
      if (error_.ok()) error_ = reason.ok() ? Aborted("the communicator was aborted") : reason;
    }
    AbortInner(Error());
  }

 private:
  // One chunk of an allreduce: `count` elements at `offset` in the caller's buffer, sharded
  // over the host's members; this member's shard is its own slice of the chunk, at `shard`
  // elements from the buffer's start: each phase works in place there (communicator.h), so
  // the shard is never copied out of the buffer and back.
  struct Chunk {
    size_t offset = 0;
    size_t count = 0;
    std::vector<size_t> counts;  // per local member
    size_t shard = 0;
  };

  // Allreduce: reduce-scatter in the host, allreduce of this member's shard across hosts,
  // allgather in the host, chunk by chunk (one chunk up to chunk_bytes_); post (may be
  // null) scales the shard before the allgather.
  Status Reduce(void* buf, size_t count, DataType dtype, ReduceOp op, const Postscale* post) {
    HORA_RETURN_IF_ERROR(Error());
    if (count == 0) return Status::Ok();
    const size_t esize = DataTypeSize(dtype);
    const int members = local_->size();
    const size_t mine = static_cast<size_t>(local_->rank());
    size_t per_chunk = count;
    if (chunk_bytes_ > 0 && count * esize > chunk_bytes_) {
      per_chunk = std::max<size_t>(chunk_bytes_ / esize, static_cast<size_t>(members));
    }
    std::vector<Chunk> chunks;
    for (size_t at = 0; at < count; at += per_chunk) {
      Chunk c;
      c.offset = at;
      c.count = std::min(per_chunk, count - at);
      c.counts = ShardCounts(c.count, members);
      c.shard = at;
      for (size_t m = 0; m < mine; ++m) c.shard += c.counts[m];
      chunks.push_back(std::move(c));
    }
    auto* data = static_cast<uint8_t*>(buf);
    auto what = [&](const char* phase, size_t k) {
      std::string w = std::string("allreduce, ") + phase;
      if (chunks.size() > 1) {
        w += " of chunk " + std::to_string(k) + " of " + std::to_string(chunks.size());
      }
      return w + " (" + std::to_string(chunks[k].counts[mine]) + "-element shard) of " +
             std::to_string(count) + " elements";
    };
    ChunkPhases phases;
    phases.scatter = [&](size_t k) {
      const Chunk& c = chunks[k];
      return Check(local_->Reducescatter(data + c.offset * esize, data + c.shard * esize, c.counts,
                                         dtype, op),
                   *local_, what("host-local reducescatter", k));
    };
    phases.cross = [&](size_t k) {
      const Chunk& c = chunks[k];
      return Check(cross_->Allreduce(data + c.shard * esize, c.counts[mine], dtype, op), *cross_,
                   what("cross-host allreduce", k));
    };
    phases.gather = [&](size_t k) {
      const Chunk& c = chunks[k];
      uint8_t* shard = data + c.shard * esize;
      if (post != nullptr) ScaleInPlace(shard, c.counts[mine], dtype, *post);
      std::vector<size_t> bytes(c.counts.size());
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = c.counts[i] * esize;
      return Check(local_->Allgatherv(shard, data + c.offset * esize, bytes), *local_,
                   what("host-local allgather", k));
    };
    if (chunks.size() == 1) {
      HORA_RETURN_IF_ERROR(phases.scatter(0));
      HORA_RETURN_IF_ERROR(phases.cross(0));
      return phases.gather(0);
    }
    return RunChunkPipeline(chunks.size(), phases);
  }

  Status Error() const {
    MutexLock lock(&mu_);
    return error_;
  }

  // OK passes through. The first failure is recorded, naming the phase and the inner
  // backend, and aborts every inner communicator; an earlier failure or Abort reason wins.
  Status Check(Status s, const Communicator& inner, const std::string& what) {
    if (s.ok()) return s;
    Status first;
    {
      MutexLock lock(&mu_);
      if (error_.ok()) {
        error_ = Status(s.code(), std::string("hierarchical ") + what + " (" + inner.name() +
                                      "): " + s.message());
      }
      first = error_;
    }
    AbortInner(first);
    return first;
  }

  void AbortInner(const Status& reason) {
    local_->Abort(reason);
    cross_->Abort(reason);
    flat_->Abort(reason);
  }

  // Constant after construction.
  const int rank_;
  const int size_;
  const size_t chunk_bytes_;  // 0: never cut (AgreeChunkBytes: the same on every member)
  const std::unique_ptr<Communicator> local_;  // this host's members
  const std::unique_ptr<Communicator> cross_;  // the members of this local index
  const std::unique_ptr<Communicator> flat_;   // every member
  // The first failure or the Abort reason; OK while healthy.
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
};

// Builds one inner communicator; refuses an asynchronous one (see the header).
StatusOr<std::unique_ptr<Communicator>> BuildInner(const std::string& selection,
                                                   const std::string& what,
                                                   const BackendConfig& config) {
  auto comm =
      CreateCommunicator(selection, "the hierarchical backend's " + what + " backend", config);
  if (!comm.ok()) {
    return Status(comm.status().code(), "hierarchical: building the " + what +
                                            " communicator: " + comm.status().message());
  }
  if (comm.value()->Fence() != nullptr) {
    return FailedPrecondition("hierarchical: the " + what + " backend " + comm.value()->name() +
                              " is asynchronous; only synchronous backends can be composed");
  }
  return comm;
}

// The chunk size every member uses (it decides the sequence of collectives, so it must be
// one for all). Set on a member: it must be set, to the same value, on every member, else
// FAILED_PRECONDITION naming the variable and the members that differ from set rank 0.
// Unset everywhere: kAutoChunkBytes if each member proposes it (it has two CPUs for each
// member on its host), else 0.
StatusOr<size_t> AgreeChunkBytes(Communicator* flat, const HierarchicalOptions& options,
                                 int local_members) {
  constexpr uint64_t kUnset = ~uint64_t{0};
  const uint64_t own = options.chunk_bytes ? *options.chunk_bytes : kUnset;
  std::vector<uint64_t> all(static_cast<size_t>(flat->size()));
  HORA_RETURN_IF_ERROR(
      flat->Allgatherv(&own, all.data(), std::vector<size_t>(all.size(), sizeof(uint64_t))));
  auto describe = [&](size_t r) {
    return (all[r] == kUnset ? std::string("unset") : std::to_string(all[r])) + " on set rank " +
           std::to_string(r);
  };
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) differ += ", " + describe(r);
  }
  if (!differ.empty()) {
    return FailedPrecondition(std::string("hierarchical: ") + kEnvHierarchicalChunkBytes +
                              " must be the same on every member of the set: " + describe(0) +
                              differ);
  }
  if (all[0] != kUnset) return static_cast<size_t>(all[0]);
  const uint64_t proposed = CpusAvailable() >= 2 * local_members ? kAutoChunkBytes : 0;
  HORA_RETURN_IF_ERROR(
      flat->Allgatherv(&proposed, all.data(), std::vector<size_t>(all.size(), sizeof(uint64_t))));
  return static_cast<size_t>(*std::min_element(all.begin(), all.end()));
}

}  // namespace

StatusOr<HierarchicalOptions> HierarchicalOptionsFromEnv(
    const std::function<const char*(const char*)>& env) {
  HierarchicalOptions o;
  const char* v = env ? env(kEnvHierarchicalChunkBytes) : nullptr;
  if (v == nullptr || *v == '\0') return o;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 0 || parsed > (1ll << 40)) {
    return InvalidArgument(std::string(kEnvHierarchicalChunkBytes) + "=" + v +
                           ": expected a whole number of bytes in [0, 2^40]");
  }
  o.chunk_bytes = static_cast<size_t>(parsed);
  return o;
}

StatusOr<std::unique_ptr<Communicator>> CreateHierarchicalCommunicator(
    const BackendConfig& config) {
  HORA_RETURN_IF_ERROR(CanServeHierarchical(config));
  StatusOr<HierarchicalOptions> options = HierarchicalOptionsFromEnv(config.env);
  if (!options.ok()) return options.status();
  const HostLayout layout = LayoutOf(config.hostnames, config.rank);
  const std::string base = config.key_prefix + "hier/";
  // Host-local first, then cross-host, then flat: every member builds in this order, and
  // each group's members all reach it (no group waits on a member stuck in a later one).
  auto local = BuildInner("auto", "host-local",
                          SubConfig(config, layout.host_ranks[layout.host],
                                    base + "local/" + std::to_string(layout.host) + "/"));
  if (!local.ok()) return local.status();
  BackendConfig cross_config = SubConfig(config, layout.cross_group(layout.local_rank),
                                         base + "cross/" + std::to_string(layout.local_rank) + "/");
  cross_config.process_set = kCrossSetBase + config.process_set;
  auto cross = BuildInner(std::string("avoid:") + kHierarchicalBackend, "cross-host", cross_config);
  if (!cross.ok()) return cross.status();
  BackendConfig flat_config = config;
  flat_config.key_prefix = base + "flat/";
  auto flat = BuildInner(cross.value()->name(), "flat", flat_config);
  if (!flat.ok()) return flat.status();
  StatusOr<size_t> chunk_bytes =
      AgreeChunkBytes(flat.value().get(), options.value(), local.value()->size());
  if (!chunk_bytes.ok()) return chunk_bytes.status();
  if (config.rank == 0) {
    if (chunk_bytes.value() > 0) {
      HORA_LOG_INFO(
          "hierarchical: allreduces of more than {} bytes go in chunks of that size, "
          "their phases overlapped ({})",
          chunk_bytes.value(), kEnvHierarchicalChunkBytes);
    } else {
      HORA_LOG_INFO("hierarchical: allreduces are not cut into chunks ({})",
                    kEnvHierarchicalChunkBytes);
    }
  }
  return std::unique_ptr<Communicator>(new HierarchicalCommunicator(
      config.rank, config.size(), chunk_bytes.value(), std::move(local).value(),
      std::move(cross).value(), std::move(flat).value()));
}

}  // namespace hora
