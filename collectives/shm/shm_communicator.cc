// The step protocol, waits, failures and creation of the shm communicator.
//
// Steps. Every collective is a sequence of steps, numbered 1, 2, ... per communicator; every
// member runs every step, in the same order (the collectives are called in the same order
// with matching sizes, so every member derives the same number of steps). In step s a member
//   1. claims its staging half s % 2: waits until every peer has published s - 1, which a
//      peer does only after it finished reading everything of step s - 2, the last step that
//      used that half;
//   2. writes its contribution there (possibly nothing);
//   3. publishes s (RankControl::ready = s, a release store);
//   4. waits until the peers it reads from have published s (acquire), and reads their halves.
// So a member runs at most one step ahead of the slowest, and a step costs one store and, per
// peer read, one load of a line the peer wrote: a synchronization of well under a
// microsecond when nobody sleeps. seen_ caches what was observed, so claims are mostly free.
//
// Sleeping. A member that waits longer than spin_us sleeps on its own doorbell, a futex word
// in its RankControl, after announcing itself in `sleepers`. Whoever publishes progress rings
// the doorbells of the members that sleep (increment, FUTEX_WAKE); a publisher that sees no
// sleeper makes no system call. Sleeper: sleepers++ (seq_cst), check, futex_wait(bell, old);
// publisher: store (seq_cst), load sleepers, ring. Either the publisher sees the sleeper, or
// the sleeper's check sees the store; futex_wait returns at once if bell moved meanwhile.
// Abort, failures and departures ring every doorbell unconditionally.
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "collectives/shm/shm_impl.h"
#include "common/copy.h"
#include "common/cpus.h"
#include "common/logging.h"
#include "common/mutex.h"

namespace hora {
namespace shm {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");
  const auto ns = std::max<int64_t>(timeout.count(), 1000);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool ProcessGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close_paren = std::strrchr(buf, ')');  // the name may contain spaces
  return close_paren != nullptr && (close_paren[1] == ' ') &&
         (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

namespace {

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

Tuning Tuning::Resolve(const ShmConfig& c) {
  Tuning t;
  const size_t n = static_cast<size_t>(std::max(1, c.size));
  // Halves of 1 MiB up to 8 members, then shrinking so the staging stays near 16 MiB.
  t.half_bytes = c.chunk_bytes > 0
                     ? c.chunk_bytes
                     : std::max<size_t>(256 << 10, std::min<size_t>(1 << 20, (8 << 20) / n));
  // A step gives every destination at least 64 bytes of a half (alltoallv, reducescatter).
  t.half_bytes = AlignUp(std::max(t.half_bytes, 64 * n), 4096);
  t.small_bytes = std::min(t.half_bytes, c.small_bytes > 0 ? c.small_bytes : size_t{32} << 10);
  // Rings of 256 KiB, shrinking so that the n (n - 1) of them stay near 16 MiB.
  const size_t pairs = std::max<size_t>(1, n * (n - 1));
  t.ring_bytes = c.ring_bytes > 0
                     ? c.ring_bytes
                     : std::max<size_t>(16 << 10, std::min<size_t>(256 << 10, (16 << 20) / pairs));
  t.ring_bytes = AlignUp(t.ring_bytes, 4096);
  // Automatic: 20 us, growing up to 250 us while waits keep ending just after the spin;
  // 1 us and no growth when the members outnumber the cores (spinning takes the core the
  // awaited member needs), followed by up to 200 us of sched_yield before the futex (the core
  // goes to a member that is ready, without a wake-up). An explicit spin_us / yield_us is
  // used as is.
  const bool oversubscribed = c.size > CpusAvailable();
  const int spin_us = c.spin_us >= 0 ? c.spin_us : (oversubscribed ? 1 : 20);
  t.spin_ns = int64_t{spin_us} * 1000;
  t.max_spin_ns = c.spin_us >= 0 || oversubscribed ? t.spin_ns : 250000;
  t.yield_ns =
      c.yield_us >= 0 ? int64_t{c.yield_us} * 1000 : (c.spin_us < 0 && oversubscribed ? 200000 : 0);
  return t;
}

ShmCommunicator::ShmCommunicator(const ShmConfig& config, const Tuning& tuning,
                                 std::unique_ptr<Segment> segment)
    : config_(config),
      tuning_(tuning),
      segment_(std::move(segment)),
      me_(config.rank),
      n_(config.size),
      self_(segment_->rank(config.rank)),
      seen_(config.size, 0),
      incoming_(config.size),
      out_head_(config.size, 0),
      pid_visible_(config.size, false) {
  spin_ns_ = tuning_.spin_ns;
}

ShmCommunicator::~ShmCommunicator() {
  // Peers that wait for this member from now on fail at once instead of at their timeout.
  self_->left.store(1, std::memory_order_seq_cst);
  RingAll();
}

void ShmCommunicator::Publish(uint64_t s) {
  self_->ready.store(s, std::memory_order_seq_cst);
  for (int r = 0; r < n_; ++r) {
    if (r != me_) Ring(r);
  }
}

Status ShmCommunicator::WaitPeer(int peer, uint64_t s, const char* what) {
  if (seen_[peer] >= s) return Status::Ok();
  const std::atomic<uint64_t>& ready = segment_->rank(peer)->ready;
  Status st = WaitUntil([&] { return ready.load(std::memory_order_acquire) >= s; }, peer, what,
                        [&] {
                          return "to reach step " + std::to_string(s) + " (it is at step " +
                                 std::to_string(ready.load()) + ")";
                        });
  if (st.ok()) seen_[peer] = ready.load(std::memory_order_acquire);
  return st;
}

Status ShmCommunicator::WaitAll(uint64_t s, const char* what) {
  for (int i = 1; i < n_; ++i) {
    HORA_RETURN_IF_ERROR(WaitPeer((me_ + i) % n_, s, what));
  }
  return Status::Ok();
}

std::string ShmCommunicator::Who(int peer) const {
  return "rank " + std::to_string(peer) + " (pid " +
         std::to_string(segment_->rank(peer)->pid.load(std::memory_order_relaxed)) + ")";
}

void ShmCommunicator::Ring(int r) {
  RankControl* c = segment_->rank(r);
  if (c->sleepers.load(std::memory_order_seq_cst) == 0) return;
  c->bell.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(&c->bell);
}

void ShmCommunicator::RingAll() {
  for (int r = 0; r < n_; ++r) {
    RankControl* c = segment_->rank(r);
    c->bell.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&c->bell);
  }
}

Status ShmCommunicator::Error() const {
  MutexLock lock(&mu_);
  return error_;
}

Status ShmCommunicator::Healthy() {
  if (failed()) return Error();
  const Header* h = segment_->header();
  if (h->broken.load(std::memory_order_acquire) != 2) return Status::Ok();
  return Fail(PeerFailure("shm: rank " + std::to_string(h->broken_rank) +
                          " of this set failed: " + std::string(h->broken_reason)));
}

Status ShmCommunicator::Fail(Status s, bool report) {
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    error_ = s;
    failed_.store(true, std::memory_order_release);
  }
  // Tell the other members (the first failure of any member is the one recorded).
  Header* h = segment_->header();
  uint32_t expected = 0;
  if (h->broken.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h->broken_rank = me_;
    std::snprintf(h->broken_reason, sizeof(h->broken_reason), "%s", s.ToString().c_str());
    h->broken.store(2, std::memory_order_release);
  }
  RingAll();
  if (report) HORA_LOG_ERROR("shm communicator rank {}/{} is broken: {}", me_, n_, s.ToString());
  return s;
}

void ShmCommunicator::Abort(const Status& reason) {
  // Fail records the sticky error and returns it for the callers that propagate it; Abort
  // returns nothing (the next operation returns that error) and logs nothing: whoever aborts
  // has the reason and reports it once (the engine's "job failed"), as gloo's and mpi's do.
  (void)Fail(reason.ok() ? Aborted("the shm communicator was aborted") : reason, false);
}

Status ShmCommunicator::CheckOp(DataType dtype, ReduceOp op, const char* what) {
  if (!IsValidDataType(static_cast<int32_t>(dtype))) {
    return InvalidArgument(std::string("shm ") + what + ": invalid dtype " +
                           std::to_string(static_cast<int>(dtype)));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct) {
    return InvalidArgument(std::string("shm ") + what + " does not support op " + ReduceOpName(op) +
                           " (average is a sum with a postscale)");
  }
  return Healthy();
}

Status ShmCommunicator::Attach() {
  self_->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  Header* h = segment_->header();
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  RingAll();
  const auto n = static_cast<uint32_t>(n_);
  Status s = WaitUntil(
      [&] { return h->attached.load(std::memory_order_acquire) >= n; }, -1, "attach",
      [&] {
        std::string missing;
        for (int r = 0; r < n_; ++r) {
          if (segment_->rank(r)->pid.load() == 0) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          }
        }
        return "to map segment " + segment_->name() + " (" + std::to_string(h->attached.load()) +
               " of " + std::to_string(n_) + " attached; missing ranks: " + missing + ")";
      });
  // Every member has mapped it (or the job failed): the name is no longer needed.
  segment_->Unlink();
  for (int r = 0; r < n_; ++r) {
    pid_visible_[r] = r != me_ && !ProcessGone(segment_->rank(r)->pid.load());
  }
  return s;
}

Status ShmCommunicator::Barrier() {
  HORA_RETURN_IF_ERROR(Healthy());
  if (n_ == 1) return Status::Ok();
  const uint64_t s = ++step_;
  Publish(s);
  return WaitAll(s, "barrier");
}

// Broadcast: the root stages a chunk per step; the others copy it out. A non-root publishes
// each step without writing, which tells the root it finished reading the step before.
Status ShmCommunicator::Broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= n_) {
    return InvalidArgument("shm broadcast: root " + std::to_string(root) + " is out of range [0, " +
                           std::to_string(n_) + ")");
  }
  HORA_RETURN_IF_ERROR(Healthy());
  if (bytes == 0 || n_ == 1) return Status::Ok();
  auto* p = static_cast<uint8_t*>(buf);
  const size_t chunk = tuning_.half_bytes;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    const uint64_t s = ++step_;
    if (me_ == root) {
      HORA_RETURN_IF_ERROR(Claim(s, "broadcast"));
      CopyBytes(Half(me_, s), p + off, len);
      Publish(s);
    } else {
      Publish(s);
      HORA_RETURN_IF_ERROR(WaitPeer(root, s, "broadcast"));
      CopyBytes(p + off, Half(root, s), len);
    }
  }
  return Status::Ok();
}

}  // namespace shm

StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(const ShmConfig& c) {
  if (c.size < 1 || c.rank < 0 || c.rank >= c.size) {
    return InvalidArgument("shm: rank " + std::to_string(c.rank) + " of size " +
                           std::to_string(c.size) + " is out of range");
  }
  if (c.store == nullptr && c.size > 1) return InvalidArgument("shm: a KvStore is required");
  if (c.timeout.count() <= 0) return InvalidArgument("shm: timeout must be > 0 ms");
  const shm::Tuning tuning = shm::Tuning::Resolve(c);
  const shm::Layout layout =
      shm::Layout::Make(c.size, tuning.half_bytes, tuning.ring_bytes, c.board_bytes);
  const std::string key = c.key_prefix + "shm/segment";
  std::unique_ptr<shm::Segment> segment;
  if (c.rank == 0) {
    // No CleanStaleShmSegments() here: a job in another PID namespace sharing /dev/shm (a
    // container, a Bazel sandbox) has creator pids this process cannot see, so its live
    // segments would look stale. Found when parallel test jobs removed each other's.
    auto created = shm::Segment::Create(shm::SanitizeTag(c.key_prefix), layout);
    if (!created.ok()) return created.status();
    segment = std::move(created).value();
    if (c.size > 1) {
      Status s = c.store->Set(key, segment->name() + " " + std::to_string(segment->nonce()));
      if (!s.ok()) return Status(s.code(), "shm: publishing the segment name: " + s.message());
    }
  } else {
    auto value = c.store->Get(key, c.timeout);
    if (!value.ok()) {
      const Status& s = value.status();
      return Status(s.code(), "shm: rank " + std::to_string(c.rank) +
                                  " waited for rank 0's segment name (store key '" + key +
                                  "'): " + s.message());
    }
    const std::string& v = value.value();
    const size_t space = v.find(' ');
    if (space == std::string::npos) return Internal("shm: bad segment record '" + v + "'");
    const uint64_t nonce = std::strtoull(v.c_str() + space + 1, nullptr, 10);
    auto opened = shm::Segment::Open(v.substr(0, space), nonce, layout);
    if (!opened.ok()) return opened.status();
    segment = std::move(opened).value();
  }
  const std::string name = segment->name();
  auto comm = std::make_unique<shm::ShmCommunicator>(c, tuning, std::move(segment));
  Status s = comm->Attach();
  // Cleanup only: every rank has read the segment's name by now; a key left behind (the
  // store failing) costs a few bytes in the coordinator's store, and Attach's result is what
  // the caller needs.
  if (c.rank == 0 && c.size > 1) (void)c.store->Delete(key);
  if (!s.ok()) return s;
  if (c.rank == 0) {
    HORA_LOG_INFO(
        "data plane: backend shm, {} ranks, segment {} ({} bytes: 2 x {} staging per "
        "rank, {} per p2p ring), timeout {} ms",
        c.size, name, layout.total_bytes, tuning.half_bytes, tuning.ring_bytes, c.timeout.count());
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace hora
