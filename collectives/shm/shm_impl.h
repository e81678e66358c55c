// Internal: the shm communicator's class, shared by its .cc files (shm_communicator.cc: the
// step protocol, waits, failures, creation; shm_collectives.cc: the collectives; shm_p2p.cc:
// send and receive). Not for use outside collectives/shm/.
#ifndef HORA_COLLECTIVES_SHM_SHM_IMPL_H_
#define HORA_COLLECTIVES_SHM_SHM_IMPL_H_

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/shm/shm_communicator.h"
#include "collectives/shm/shm_segment.h"
#include "common/mutex.h"
#include "common/status.h"

namespace hora {
namespace shm {

// The sizes a communicator runs with, resolved from ShmConfig's automatic values.
struct Tuning {
  size_t half_bytes = 0;
  size_t small_bytes = 0;
  size_t ring_bytes = 0;
  int64_t spin_ns = 0;      // the spin a wait starts with
  int64_t max_spin_ns = 0;  // how far it may grow (see WaitUntil)
  int64_t yield_ns = 0;     // after the spin: how long a wait yields its core before it sleeps
  static Tuning Resolve(const ShmConfig& c);
};

class ShmCommunicator : public Communicator {
 public:
  ShmCommunicator(const ShmConfig& config, const Tuning& tuning, std::unique_ptr<Segment> segment);
  ~ShmCommunicator() override;

  int rank() const override { return me_; }
  int size() const override { return n_; }
  const char* name() const override { return "shm"; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  bool folds_postscale() const override { return true; }
  Status AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                         const Postscale& post) override;
  // The small allreduce reduces in rank order already; the large one then starts each slice
  // from rank 0's copy instead of the owner's (shm_collectives.cc).
  bool OfferRankOrder() override {
    rank_order_ = true;
    return true;
  }
  Status Broadcast(void* buf, size_t bytes, int root) override;
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override;
  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override;
  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override;
  void Abort(const Status& reason) override;
  void* SharedBoard(size_t* bytes) override {
    *bytes = segment_->layout().board_bytes;
    return *bytes > 0 ? segment_->board() : nullptr;
  }

  // Creation: records this member in the segment, then waits until every member has.
  Status Attach();

 private:
  // --- The step protocol (shm_communicator.cc) ---
  // Member r's staging half for step s.
  uint8_t* Half(int r, uint64_t s) const { return segment_->region(r, static_cast<int>(s & 1)); }
  // Member r's staging quarter for step s of the large allreduce: half s mod 2, part
  // (s / 2) mod 2 of it, so consecutive steps still alternate halves.
  uint8_t* Quarter(int r, uint64_t s) const {
    return Half(r, s) + ((s >> 1) & 1) * (tuning_.half_bytes / 2);
  }
  // Before writing this member's half for step s: waits until every peer finished reading
  // it at step s - 2 (a peer publishes s - 1 only after it finished step s - 2; the large
  // allreduce's pipelined A steps are the exception, and no Claim follows one: see
  // shm_collectives.cc).
  Status Claim(uint64_t s, const char* what) {
    return s >= 2 ? WaitAll(s - 1, what) : Status::Ok();
  }
  // This member's contribution to step s is written (and it finished every step before).
  void Publish(uint64_t s);
  Status WaitPeer(int peer, uint64_t s, const char* what);
  Status WaitAll(uint64_t s, const char* what);

  // --- Waiting and failing ---
  // Waits until cond() holds. `peer` is the member waited for (-1: several), `detail`
  // describes what is awaited, for the DEADLINE_EXCEEDED message.
  template <typename Cond, typename Detail>
  Status WaitUntil(const Cond& cond, int peer, const char* what, const Detail& detail);
  // Non-OK when the wait for `peer` can never end: this member failed or was aborted, some
  // member marked the segment broken, or `peer` left or is gone (and cond() still false).
  template <typename Cond>
  Status Health(const Cond& cond, int peer, bool check_process);
  std::string Who(int peer) const;  // "rank 2 (pid 1234)"
  void Ring(int r);                 // wakes member r if it sleeps
  void RingAll();                   // wakes every member
  // Records the first failure (sticky), marks the segment broken so every member fails too,
  // and wakes everyone. Returns the communicator's error (the first one).
  // `report`: log it (a failure found here); Abort's reason is its caller's to report.
  Status Fail(Status s, bool report = true);
  Status Error() const;
  // Error(), or the failure another member recorded in the segment (which becomes this
  // member's error). Every operation starts with it.
  Status Healthy();
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status CheckOp(DataType dtype, ReduceOp op, const char* what);

  // --- Reduction helpers (shm_collectives.cc) ---
  Status AllreduceSmall(uint8_t* buf, size_t count, DataType dtype, ReduceOp op);
  // post (may be null): scales each reduced block of this member's slices (AllreduceScaled).
  Status AllreduceLarge(uint8_t* buf, size_t count, DataType dtype, ReduceOp op,
                        const Postscale* post = nullptr);
  StatusOr<size_t> AlltoallvSizes(const std::vector<size_t>& send_bytes,
                                  const std::vector<size_t>& recv_bytes);
  Status ReducescatterSteps(const uint8_t* in, uint8_t* out, const std::vector<size_t>& counts,
                            DataType dtype, ReduceOp op);

  // --- Point to point (shm_p2p.cc) ---
  struct Pending {  // a message that arrived before its Recv
    std::vector<uint8_t> data;
    bool complete = false;
  };
  struct Incoming {     // the stream from one peer to this member
    uint64_t tail = 0;  // bytes consumed (mirrors the channel's tail)
    uint8_t header[16];
    size_t header_got = 0;
    bool in_message = false;  // inside a message's payload
    uint32_t tag = 0;
    uint64_t bytes = 0, got = 0;
    uint8_t* dst = nullptr;      // where the payload goes
    Pending* pending = nullptr;  // non-null: it goes to the heap
    // The Recv in progress, if any: the next message with want_tag lands in want_buf.
    bool want = false, want_done = false;
    uint32_t want_tag = 0;
    uint8_t* want_buf = nullptr;
    uint64_t want_bytes = 0;
    std::map<uint32_t, std::deque<Pending>> unexpected;  // by tag, in arrival order
  };
  Status Drain(int peer);         // consumes whatever peer -> this member holds
  Status StartMessage(int peer);  // a whole header was read: decides where the payload goes
  Status DrainAll();
  Status CheckPeer(int peer, const char* what);

  // Constant after construction.
  const ShmConfig config_;
  const Tuning tuning_;
  bool rank_order_ = false;  // OfferRankOrder was called (before any collective)
  const std::unique_ptr<Segment> segment_;
  const int me_;
  const int n_;
  RankControl* const self_;

  // Used by the driving thread only.
  uint64_t step_ = 0;               // the last step this member published
  int64_t spin_ns_ = 0;             // the current spin of a wait (see WaitUntil)
  std::vector<uint64_t> seen_;      // per peer: the highest ready step observed
  std::vector<Incoming> incoming_;  // per peer
  std::vector<uint64_t> out_head_;  // per peer: bytes written into this member -> peer
  // Per peer: its pid is visible from here (not another pid namespace), so "gone" is real.
  std::vector<bool> pid_visible_;

  // The first failure; OK while healthy. failed_ mirrors !error_.ok() for lock-free checks.
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
};

// Process-shared futex on a word of the segment (no FUTEX_PRIVATE_FLAG: the word is mapped
// by several processes). FutexWait returns at once if *word != expected.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
void FutexWake(std::atomic<uint32_t>* word);
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// True when process `pid` has exited (a zombie counts: its parent has not reaped it yet).
bool ProcessGone(int pid);

template <typename Cond>
Status ShmCommunicator::Health(const Cond& cond, int peer, bool check_process) {
  HORA_RETURN_IF_ERROR(Healthy());
  if (peer < 0) return Status::Ok();
  const RankControl* p = segment_->rank(peer);
  if (p->left.load(std::memory_order_acquire) != 0) {
    if (cond()) return Status::Ok();  // it published everything before it left
    return Fail(PeerFailure("shm: " + Who(peer) +
                            " destroyed its communicator while this rank waited for it"));
  }
  if (check_process && pid_visible_[peer]) {
    if (ProcessGone(p->pid.load(std::memory_order_acquire))) {
      if (cond()) return Status::Ok();
      return Fail(PeerFailure("shm: " + Who(peer) + " is gone (its process exited or was killed)"));
    }
  }
  return Status::Ok();
}

template <typename Cond, typename Detail>
Status ShmCommunicator::WaitUntil(const Cond& cond, int peer, const char* what,
                                  const Detail& detail) {
  using Clock = std::chrono::steady_clock;
  if (cond()) return Status::Ok();
  if (failed()) return Error();
  const auto start = Clock::now();
  if (spin_ns_ > 0) {
    const auto spin_end = start + std::chrono::nanoseconds(spin_ns_);
    for (uint32_t i = 1;; ++i) {
      CpuRelax();
      if (cond()) return Status::Ok();
      if ((i & 63) == 0 && (failed() || Clock::now() >= spin_end)) break;
    }
  }
  if (tuning_.yield_ns > 0) {
    // Give the core up (sched_yield runs another ready thread on it at once) rather than
    // spin on it or pay a futex wake-up, the most expensive step on a VM: with more members
    // than cores the awaited member is most likely waiting for this core (automatic), and
    // the steady path's peers are a few microseconds apart (yield_us, engine_sets.cc).
    const auto yield_end = Clock::now() + std::chrono::nanoseconds(tuning_.yield_ns);
    for (uint32_t i = 1;; ++i) {
      sched_yield();
      if (cond()) return Status::Ok();
      if ((i & 7) == 0 && (failed() || Clock::now() >= yield_end)) break;
    }
  }
  const auto deadline = start + config_.timeout;
  auto last_process_check = start - std::chrono::seconds(1);
  for (;;) {
    const uint32_t bell = self_->bell.load(std::memory_order_acquire);
    self_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    auto now = Clock::now();
    // Whether the peer's process exists is asked at most every 100 ms (a system call or two).
    const bool check_process = now - last_process_check >= std::chrono::milliseconds(100);
    if (check_process) last_process_check = now;
    Status s = cond() ? Status::Ok() : Health(cond, peer, check_process);
    const bool done = !s.ok() || cond();
    now = Clock::now();
    if (done || now >= deadline) {
      self_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      // A wait that slept only briefly means the peer came just after the spin ended, and
      // the wake-up (tens of us on a VM) then makes the peer late in turn: the two would
      // keep putting each other to sleep. So such a wait doubles the spin (up to
      // max_spin_ns); a long sleep (a really late peer) resets it.
      if (s.ok()) {
        spin_ns_ = now - start < std::chrono::milliseconds(2)
                       ? std::min(tuning_.max_spin_ns, std::max<int64_t>(2 * spin_ns_, 1000))
                       : tuning_.spin_ns;
      }
      if (done) return s;
      return Fail(DeadlineExceeded(std::string("shm ") + what + ": rank " + std::to_string(me_) +
                                   " waited " + std::to_string(config_.timeout.count()) +
                                   " ms for " + (peer >= 0 ? Who(peer) : std::string("its peers")) +
                                   " " + detail() +
                                   "; it may have died or stopped, or called another collective"));
    }
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100));
    FutexWait(&self_->bell, bell, slice);
    self_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace shm
}  // namespace hora

#endif  // HORA_COLLECTIVES_SHM_SHM_IMPL_H_
