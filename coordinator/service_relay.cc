// The gRPC adapter's end of a host relay (host_relay.h): one stream carries the sessions of
// a host's ranks. It uses gRPC's callback API: no thread of its own per stream, each read
// handled on the gRPC thread that completed it, each write started by whoever queues while
// none is in flight (at 1,024 ranks a thread per stream, woken for every read and every plan,
// cost rank 0 a third of its CPU: docs/coordinator-scale.md).
//
// Each relayed rank gets a session in the core (session_relayed.cc) whose sink queues the
// message, converted for the wire, on the stream's RelayOutbox; what queues while a write is
// in flight goes in the next write as one RelayDown.
#include <google/protobuf/arena.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "coordinator/auth.h"
#include "coordinator/convert.h"
#include "coordinator/grpc_service.h"

namespace hora {
namespace {

// What the coordinator sends one relay: the sessions' sinks queue here, from any thread, and
// whichever queues while no write is in flight starts the next write (the reactor's
// OnWriteDone starts the one after). A write carries what queued while the one before was in
// flight, up to a quarter of the message limit and the message that passes it: its ranks'
// messages together may not pass the limit (relay_test). Shared by the reactor and the sinks,
// so a sink called after the stream ended finds it closed instead of a freed reactor.
class RelayOutbox {
 public:
  using StartWrite = std::function<void(const proto::RelayDown*)>;
  // Each rank's message is split at `max_message_bytes` / 4 (plus a bucket, itself under a
  // quarter), and a batch closes once past that too: a write stays under 3/4 of the limit.
  RelayOutbox(int max_message_bytes, StartWrite start)
      : budget_(static_cast<size_t>(max_message_bytes) / 4), start_(std::move(start)) {}

  // Converts the message for the wire into the queued batches. Dropped once the stream is
  // closing.
  void Push(int rank, const CoordinatorMessage& message) {
    MutexLock lock(&mu_);
    if (closing_ || broken_) return;
    Batch* batch = nullptr;
    const size_t last = ToProtoMessages(message, budget_, [&](size_t previous) {
      mu_.AssertHeld();
      if (batch != nullptr) batch->bytes += previous;
      batch = QueueingLocked();
      proto::RelayDown::Entry* entry = batch->down->add_entries();
      entry->set_rank(rank);
      return entry->mutable_message();
    });
    if (batch != nullptr) batch->bytes += last;
    if (!writing_) StartLocked();
  }

  // The write in flight ended (ok: sent). True when the reactor may finish now: the reads
  // are over and nothing more is written.
  bool WriteDone(bool ok) {
    MutexLock lock(&mu_);
    writing_ = false;
    write_started_ = TimePoint::max();
    if (!ok) broken_ = true;
    Recycle(std::move(queue_.front()));
    queue_.pop_front();
    if (!broken_ && !queue_.empty()) {
      StartLocked();
      return false;
    }
    return closing_;
  }

  // The reads are over: nothing more is queued. True when no write is in flight (the reactor
  // may finish now); else the last WriteDone says so.
  bool Close() {
    MutexLock lock(&mu_);
    closing_ = true;
    return !writing_;
  }

  TimePoint write_started() const {
    MutexLock lock(&mu_);
    return write_started_;
  }

  // An arena whose first block is `block` (no allocation until it is full).
  static google::protobuf::ArenaOptions ArenaOn(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }

 private:
  // One write's messages, on an arena of its own: built by bump allocation and freed at once
  // (per-message allocation and destruction were a fifth of rank 0's CPU at 1,024 ranks). The
  // first block is the batch's own, kept while the batch is reused: a relay stream usually
  // holds two, 80 KiB with the reads' (10 MiB at rank 0 for 1,024 ranks by 8; a heap-only
  // arena measured about 8 % worse).
  struct Batch {
    alignas(16) char first_block[32 << 10];
    google::protobuf::Arena arena{ArenaOn(first_block, sizeof(first_block))};
    proto::RelayDown* down = nullptr;
    size_t bytes = 0;  // about, on the wire
    Batch() { Reset(); }
    void Reset() {
      arena.Reset();
      down = google::protobuf::Arena::CreateMessage<proto::RelayDown>(&arena);
      bytes = 0;
    }
  };

  // The batch that queues: the last one, unless it is in flight or full.
  Batch* QueueingLocked() REQUIRES(mu_) {
    const bool in_flight = writing_ && queue_.size() == 1;
    if (queue_.empty() || in_flight || queue_.back()->bytes >= budget_) {
      if (spare_.empty()) {
        queue_.push_back(std::make_unique<Batch>());
      } else {
        queue_.push_back(std::move(spare_.back()));
        spare_.pop_back();
      }
    }
    return queue_.back().get();
  }

  void Recycle(std::unique_ptr<Batch> batch) REQUIRES(mu_) {
    if (spare_.size() >= 2) return;  // a burst's extra batches are freed
    batch->Reset();
    spare_.push_back(std::move(batch));
  }

  // Starts writing the oldest batch. Releases mu_ around the start.
  void StartLocked() REQUIRES(mu_) {
    const proto::RelayDown* batch = queue_.front()->down;
    writing_ = true;
    write_started_ = Clock::now();
    mu_.Unlock();
    start_(batch);  // not touched again until WriteDone
    mu_.Lock();
  }

  const size_t budget_;
  const StartWrite start_;
  mutable Mutex mu_;
  std::deque<std::unique_ptr<Batch>> queue_ GUARDED_BY(mu_);  // the first in flight if writing_
  std::vector<std::unique_ptr<Batch>> spare_ GUARDED_BY(mu_);
  TimePoint write_started_ GUARDED_BY(mu_) = TimePoint::max();
  bool writing_ GUARDED_BY(mu_) = false;
  bool closing_ GUARDED_BY(mu_) = false;  // the reads are over
  bool broken_ GUARDED_BY(mu_) = false;   // a write failed: the call is over
};

}  // namespace

// One relay stream. Reads are handled on the gRPC thread that completed them, one at a time
// (the next read starts after), so a relay's messages keep their order.
class RelayReactor final : public grpc::ServerBidiReactor<proto::RelayUp, proto::RelayDown> {
 public:
  RelayReactor(CoordinatorCore* core, const CoordinatorConfig& config,
               grpc::CallbackServerContext* ctx)
      : core_(core),
        outbox_(std::make_shared<RelayOutbox>(
            config.max_message_bytes,
            [this](const proto::RelayDown* batch) { StartWrite(batch); })) {
    grpc::Status auth = CheckToken(*ctx, config.token, "Relay");
    if (!auth.ok()) {
      outbox_->Close();
      Finish(auth);
      return;
    }
    NextRead();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndSessions();
      if (outbox_->Close()) FinishOnce();
      return;
    }
    HandleUp();
    NextRead();
  }

  void OnWriteDone(bool ok) override {
    if (outbox_->WriteDone(ok)) FinishOnce();
  }

  void OnDone() override { delete this; }

 private:
  void NextRead() {
    up_arena_.Reset();
    up_ = google::protobuf::Arena::CreateMessage<proto::RelayUp>(&up_arena_);
    StartRead(up_);
  }

  void FinishOnce() {
    if (finished_.exchange(true)) return;
    Finish(grpc::Status::OK);
  }

  void HandleUp() {
    if (relay_rank_ < 0) relay_rank_ = up_->relay_rank();
    for (const proto::RelayUp::Entry& entry : up_->entries()) {
      const int rank = entry.rank();
      FromProto(entry.message(), &message_);
      auto it = sessions_.find(rank);
      if (it == sessions_.end()) {
        std::shared_ptr<RelayOutbox> outbox = outbox_;
        std::shared_ptr<SessionStream> opened = core_->OpenRelayedSession(
            rank, message_,
            [outbox, rank](CoordinatorMessage& m) {
              outbox->Push(rank, m);
              return true;
            },
            [outbox] { return outbox->write_started(); });
        if (opened) {
          opened->Flush();  // the first heartbeat: tells the rank its session is open
          sessions_.emplace(rank, std::move(opened));
        }
        continue;
      }
      const std::shared_ptr<SessionStream> session = it->second;
      if (!entry.closed().empty()) {
        core_->RankClosed(rank, entry.closed());
        core_->EndSession(rank, session, false);
        sessions_.erase(it);
        continue;
      }
      session->Touch(Clock::now());
      bool goodbye = false;
      core_->HandleMessage(rank, message_, &touched_, &goodbye);
      for (const auto& s : touched_) s->Flush();
      touched_.clear();
      if (goodbye) {
        core_->EndSession(rank, session, true);
        sessions_.erase(it);
      }
    }
  }

  // The stream is over: the relay's process is gone (or shutting down), and with it the way
  // to every rank still open on it. Its own rank is named first: that is the cause.
  void EndSessions() {
    std::vector<std::pair<int, std::shared_ptr<SessionStream>>> left(sessions_.begin(),
                                                                     sessions_.end());
    sessions_.clear();
    const int relay_rank = relay_rank_;
    std::stable_partition(left.begin(), left.end(),
                          [relay_rank](const auto& p) { return p.first == relay_rank; });
    for (const auto& [rank, session] : left) {
      core_->RankClosed(rank, rank == relay_rank
                                  ? std::string("its connection to the coordinator broke (it "
                                                "relayed its host's ranks)")
                                  : "its host relay, rank " + std::to_string(relay_rank) +
                                        ", broke its connection to the coordinator");
      core_->EndSession(rank, session, false);
    }
  }

  CoordinatorCore* const core_;
  const std::shared_ptr<RelayOutbox> outbox_;
  std::atomic<bool> finished_{false};
  // Used by the reactions to reads only (one at a time). Each read is parsed onto an arena,
  // freed at once before the next.
  alignas(16) char up_block_[16 << 10];
  google::protobuf::Arena up_arena_{RelayOutbox::ArenaOn(up_block_, sizeof(up_block_))};
  proto::RelayUp* up_ = nullptr;
  WorkerMessage message_;  // the entry being handled, converted (its buffers reused)
  std::unordered_map<int, std::shared_ptr<SessionStream>> sessions_;  // open on this relay
  int relay_rank_ = -1;
  TouchedSessions touched_;
};

grpc::ServerBidiReactor<proto::RelayUp, proto::RelayDown>* GrpcCoordinator::Relay(
    grpc::CallbackServerContext* ctx) {
  return new RelayReactor(&core_, config_, ctx);
}

}  // namespace hora
