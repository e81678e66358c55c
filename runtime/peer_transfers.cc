// PeerTransfers (peer_transfers.h).
#include "runtime/peer_transfers.h"

#include <string>

namespace hora {
namespace {

std::string Describe(int32_t set, bool send, int me, int peer, int tag, int64_t seq) {
  const int from = send ? me : peer, to = send ? peer : me;
  return std::string(send ? "send" : "recv") + " from rank " + std::to_string(from) + " to rank " +
         std::to_string(to) + " of process set " + std::to_string(set) + " (tag " +
         std::to_string(tag) + ", #" + std::to_string(seq) + ")";
}

}  // namespace

int64_t PeerTransfers::Next(int32_t set, int from, int to, int tag) {
  MutexLock lock(&mu_);
  return counts_[{set, from, to, tag}]++;
}

void PeerTransfers::Start(const ProcessSetRuntime& set, const TensorSpec& spec, const void* input,
                          void* output, int peer, int tag, bool send, int64_t seq, int64_t handle) {
  const int global_peer = set.ranks()[static_cast<size_t>(peer)];
  const PeerChannel::Key key{set.id(), tag, seq};
  const PeerChannel::Meta meta{spec.dtype, static_cast<int64_t>(spec.ByteSize())};
  std::shared_ptr<TimelineBucket> trace;
  if (hooks_.timeline != nullptr && hooks_.timeline->on()) {
    trace = std::make_shared<TimelineBucket>();
    trace->start_us = trace->collective_us = TimelineNowUs();
    trace->process_set = set.id();
    trace->seq = static_cast<uint64_t>(seq);
    trace->steady = true;  // no plan: its own count
    trace->collective = spec.collective;
    trace->backend = "direct";
    trace->bytes = meta.bytes;
    trace->tensors.push_back({handle, meta.bytes, global_peer, 0, 0});
  }
  auto done = [this, handle, trace](Status s) {
    if (trace) {
      trace->collective_done_us = trace->unpacked_us = trace->completed_us = TimelineNowUs();
      if (!s.ok()) trace->error = s.message();
      hooks_.timeline->BucketDone(std::move(*trace));
    }
    hooks_.complete(handle, std::move(s));
  };
  std::string what = Describe(set.id(), send, set.rank(), peer, tag, seq);
  if (send) {
    channel_->Send(global_peer, key, meta, input, std::move(what), std::move(done));
  } else {
    channel_->Recv(global_peer, key, meta, output, std::move(what), std::move(done));
  }
}

void PeerTransfers::Refuse(const ProcessSetRuntime& set, int peer, int tag, bool send, int64_t seq,
                           const Status& why) {
  const int global_peer = set.ranks()[static_cast<size_t>(peer)];
  const PeerChannel::Key key{set.id(), tag, seq};
  if (send) {
    channel_->SendRefusal(global_peer, key, why);
  } else {
    channel_->RefuseRecv(global_peer, key, why);
  }
}

void PeerTransfers::Abort(const Status& why) {
  if (channel_) channel_->Abort(why);
}

}  // namespace hora
