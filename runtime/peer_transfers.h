// Point-to-point transfers (Engine::EnqueueSend / EnqueueRecv) of CPU tensors, straight
// between the two ranks over the job's PeerChannel (collectives/peer_channel.h): no
// coordinator, no plan, no agreement. A pipeline's activations and gradients cost one message
// each way (and an acknowledgement), not a trip to rank 0.
//
// Transfers of CUDA tensors keep the coordinator's path (the set's device communicator runs
// them in plan order, where NCCL's send/recv must be issued in the same order on both sides).
//
// Matching: the n-th send from set rank s to set rank d with tag t meets d's n-th recv from s
// with tag t (Next counts them, per set, on both sides alike). A size or dtype that differs
// fails both sides with MISMATCH naming both; a side refused for bad input fails the other
// side with its reason; a transfer pending longer than HORA_STALL_TIMEOUT_SECONDS fails the
// job naming both ranks; a peer that dies fails what is pending with it, naming it.
//
// Thread safety: every method from any thread.
#ifndef HORA_RUNTIME_PEER_TRANSFERS_H_
#define HORA_RUNTIME_PEER_TRANSFERS_H_

#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "collectives/peer_channel.h"
#include "common/mutex.h"
#include "common/types.h"
#include "runtime/process_set.h"
#include "runtime/timeline.h"

namespace hora {

class PeerTransfers {
 public:
  struct Hooks {
    std::function<void(int64_t handle, Status status)> complete;
    Timeline* timeline = nullptr;  // not owned
  };
  // channel: null when this job moves every transfer through the coordinator.
  PeerTransfers(std::unique_ptr<PeerChannel> channel, Hooks hooks)
      : channel_(std::move(channel)), hooks_(std::move(hooks)) {}

  // How long a thread waiting for a direct transfer yields its core before it sleeps
  // (HandleTable::Create): the other side is usually microseconds away, and on 2 cores a
  // condition variable's wake-up cost 4 B ping-pongs 40-46 us one way at the C API against
  // 31-34 us with the yield (docs/parallelism-measurements.md).
  static constexpr int kWaitYieldUs = 50;

  // Whether a transfer of `spec` goes straight to its peer (else through the coordinator).
  bool Direct(const TensorSpec& spec) const {
    return channel_ != nullptr && spec.device == Device::kCpu;
  }

  // The count of transfers from `from` to `to` with `tag` in `set` so far (then one more).
  int64_t Next(int32_t set, int from, int to, int tag);

  // A validated transfer (Direct): `handle` completes through hooks.complete. peer: set rank.
  void Start(const ProcessSetRuntime& set, const TensorSpec& spec, const void* input, void* output,
             int peer, int tag, bool send, int64_t seq, int64_t handle);
  // This side refused the transfer (`why`): the peer's side fails with it.
  void Refuse(const ProcessSetRuntime& set, int peer, int tag, bool send, int64_t seq,
              const Status& why);

  // Fails every pending transfer and every later one with `why`.
  void Abort(const Status& why);

 private:
  const std::unique_ptr<PeerChannel> channel_;
  const Hooks hooks_;
  Mutex mu_;
  std::map<std::tuple<int32_t, int, int, int>, int64_t> counts_ GUARDED_BY(mu_);
};

}  // namespace hora

#endif  // HORA_RUNTIME_PEER_TRANSFERS_H_
