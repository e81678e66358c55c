// The steady path of one process set (docs/design.md "Steady state"): allreduces, allgathers,
// broadcasts, reducescatters and alltoalls whose plan the coordinator has sent unchanged a few
// times run without asking it again.
//
// Learning (Learn, on the thread that delivers plans, before the bucket's requests can
// finish): each tensor of a CPU bucket, every member taking part, nobody joined, counts for
// its name (a tensor the coordinator fused with others too, as a grouped entry: see
// Execution and SteadyBoard::AgreesCheaply) when it is an
// allreduce, a broadcast or an allgather (every member's first dimension the same) of a size the
// board runs, or, with a steady communicator, a reducescatter, an alltoall (any splits) or an
// allgather of uneven rows; SteadyOptions::warmup such buckets in a row with the same spec and
// the same layout digest (BucketPlan::Entry::layout: every member's splits or first dimensions,
// the same number in every member's plan) make the name an entry of the cache (id: the next
// free one) or update its spec; the entry keeps the learned plan's sizes, which hold for as
// long as every member's spec equals its entry's. Nothing in that decision depends on what
// only this member sees, so every member decides alike. Every member receives the same
// buckets in the same order, so every member builds the same cache, and a name's cache changes only
// while one of its instances is in flight on every member, so all members judge their next
// submission of it against the same entry. A bucket in which some member joined ends learning for
// the set for good (the joined member cannot tell which names it held).
//
// Submission (Begin, on the enqueuing thread): for a cached name, instance n (the n-th
// submission since it was cached) is offered on the board (runtime/steady_board.h: shared
// memory within a host, messages across hosts) when the
// spec equals the entry's, else refused (the request was queued and is announced as usual).
// An offered request is held here, not in the engine's queue, and not announced to the
// coordinator unless its instance turns out slow: refused by some member, or not offered by
// every member within the patience (the member that waited withdraws it, where the board
// can; else the instance waits on, and one that waits past the stall timeout fails the job
// naming the members that did not submit it, as the coordinator's stall check would). A slow
// instance is
// handed back to the engine (Host::give_back: queued and announced) and runs the normal way
// on every member, so the coordinator sees every member's submission and reports a mismatch
// or a stall exactly as without the steady path. What is held at Abort or Stop is handed
// back unannounced: the engine fails it with the job's error or the shutdown's.
//
// Execution: one thread per set reads the board's log and runs each fast instance in log
// order on the set's steady communicator (a second communicator of the same backend, so the
// order of the coordinator's buckets on the first one is untouched), through a
// BucketExecutor (the same prescale, reduction and postscale as the data-plane path). The
// allreduces of one group of the log (SteadyBoard::LogAt) that the coordinator had fused run
// fused again: consecutive ones alike in dtype, op and scales, each at most
// SteadyOptions::fuse_tensor_bytes, up to SteadyOptions::fusion_bytes, as one bucket; every
// member sees the same groups, so every member makes the same buckets.
// Waits spin briefly, then sleep on the board's futex.
//
// Thread safety: every public method may be called from any thread.
#ifndef HORA_RUNTIME_STEADY_PATH_H_
#define HORA_RUNTIME_STEADY_PATH_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/communicator.h"
#include "common/mutex.h"
#include "common/node_cache.h"
#include "common/status.h"
#include "coordinator/messages.h"
#include "runtime/bucket_executor.h"
#include "runtime/steady_board.h"
#include "runtime/steady_options.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hora {

struct SteadyStats {
  int64_t fast = 0;     // operations this rank ran on the steady path
  int64_t slow = 0;     // submissions of cached names that went the normal way
  int64_t entries = 0;  // names in the cache
  // Fast instances above the inline size that the enqueuing thread ran (its caller waits
  // promptly: SteadyOptions::prompt_wait).
  int64_t run_by_enqueue = 0;
  // Of fast: instances that ran fused with others of their log group, in one bucket.
  int64_t fused = 0;
};

class SteadyPath {
 public:
  // What the steady path needs from the engine (the set's host).
  struct Host {
    std::function<std::optional<Request>(int32_t id)> take;  // by this rank's tensor id
    std::function<void(int64_t handle, Status status, OpResult result)> complete;
    std::function<Status()> job_error;
    std::function<Status(const Status&)> bucket_failed;
    std::function<Status(const Status&)> fail_job;  // Host::FailJob (runtime/process_set.h)
    // A request held here goes back to the engine's queue: announced to the coordinator (it
    // fell back), or not (Abort, Stop: the engine fails what its queue holds).
    std::function<void(Request request, bool announce)> give_back;
    // Whether a request of this name is in the engine's queue (a fallen-back instance).
    std::function<bool(const TensorSpec& spec)> queued;
  };

  // How the members agree and exchange: the board, and the set's steady communicator for
  // instances that are not Eager (null when the board makes every instance Eager). The board
  // may live in the communicator's memory: it is destroyed first.
  struct Parts {
    std::unique_ptr<SteadyBoard> board;
    std::unique_ptr<Communicator> comm;
  };
  // ranks: the members' global ranks. timeline (may be null; not owned) records each fast
  // instance as a bucket of backend "steady:<board>" whose last_rank is the member whose
  // offer completed it and whose wait_us (and lag_us, a lower bound) is how long this rank's
  // offer waited.
  SteadyPath(int32_t process_set, std::vector<int> ranks, Parts parts, Host host,
             SteadyOptions options, Timeline* timeline = nullptr);
  ~SteadyPath();  // Stop()
  SteadyPath(const SteadyPath&) = delete;
  SteadyPath& operator=(const SteadyPath&) = delete;

  // Which cached entry a submission's name is, and whether its spec equals the entry's.
  struct Lookup {
    uint32_t entry = 0;
    int32_t id = -1;  // this rank's tensor id for the name
    bool matches = false;
    bool held = false;  // an instance of the name is held here (in flight)
  };
  // True when `spec` names a cached entry (*found says which). When found->matches the
  // caller hands the request to Begin; otherwise it queues it, calls Refuse and announces
  // it. A name's entry does not change while it is in flight (Learn runs before its
  // bucket's requests can finish).
  bool Find(const TensorSpec& spec, Lookup* found) const;
  // Which instance of which entry a request on the steady path is.
  struct Ticket {
    uint32_t entry = 0;
    uint32_t instance = 0;
    uint32_t bell = 0;                               // the board's bell when it was offered
    std::chrono::steady_clock::time_point deadline;  // when its patience ends
    // Larger than the inline size: whether its caller is prompt matters (Help records it).
    bool large = false;
    // When Begin returned, if it ran the instance (a long one takes a while); else unset:
    // Begin returned at the offer (the deadline less the patience).
    std::chrono::steady_clock::time_point returned;
    bool offered = false;  // else there is nothing to help with (Help returns at once)
  };
  // Every submission of a cached name counts an instance. A matching one (Begin) takes
  // *request (moved from) and offers it: it runs here, or falls back (handed back and
  // announced). OK (ticket->offered: it was offered, *ticket says which instance it is), or,
  // with *request untouched, ALREADY_EXISTS (the name is in flight) or the job's error.
  Status Begin(const Lookup& found, Request* request, Ticket* ticket);
  // A submission whose spec differs from the entry's (the caller queued it): its instance
  // is refused on the board.
  void Refuse(const Lookup& found);
  // A thread about to wait for the request of `ticket` helps instead: while the instance is
  // still waiting on the steady path (until `deadline`), it sleeps on the board and runs the
  // log itself when nobody else is driving, so the wake-up that ends its wait is the one
  // that starts the collective. Returns once the instance ran, fell back or is being run by
  // another thread, or at Abort or Stop; the caller then waits for its handle as usual.
  void Help(const Ticket& ticket, std::chrono::steady_clock::time_point deadline);
  // Runs the log's next small instances if nobody else is driving (never blocks). True if it
  // ran any.
  bool Progress();
  // A bucket of this set as the coordinator planned it; specs[i]: this rank's spec of entry i
  // (null where this rank joined).
  void Learn(const BucketPlan& bucket, const std::vector<const TensorSpec*>& specs);

  SteadyStats Stats() const;
  // This rank joined the set (hora_join): from now on every member's cached names go the
  // normal way (the coordinator plans joins), for the rest of the set's life.
  void Joined();
  void Abort(const Status& reason);
  void Stop();  // idempotent

 private:
  struct Entry {
    TensorSpec spec;
    int32_t id = -1;         // this rank's tensor id for the name
    uint32_t instance = 0;   // submissions since the name was cached
    bool fell_back = false;  // an instance fell back since (Begin then asks Host::queued)
    // Learned from buckets the coordinator fused: its instances may run fused with others
    // of their group, and on a board whose agreements are not cheap they are not Eager.
    bool grouped = false;
    // The learned plan's: allgather, every member's first dimension; alltoall, the rows this
    // member receives from each member. Every member's spec equal to its entry's means every
    // member's layout is the learned one (the plans' layout digest was the same on all).
    std::vector<int64_t> dims;
  };
  struct Learning {
    TensorSpec spec;
    bool grouped = false;
    uint64_t layout = 0;  // BucketPlan::Entry::layout: every member's layout, alike on all
    std::vector<int64_t> dims;
    int count = 0;
  };
  struct Pending {
    uint32_t instance = 0;
    int32_t id = -1;
    std::chrono::steady_clock::time_point deadline;
    Request request;      // held until it runs or falls back
    bool warned = false;  // a stall warning was logged (a board that cannot withdraw)
    bool eager = false;   // offered as Eager (its data on the board)
    bool fuses = false;   // may run fused with others of its group (Entry::grouped)
  };
  // A log slot DriveLog took: its instance, and the request (`held`: pending's, else the
  // engine's queue's, taken in Run).
  struct Claim {
    uint32_t entry = 0;
    Pending pending;
    bool held = false;
    int last = -1;              // the member whose offer completed it
    std::vector<int64_t> dims;  // Entry::dims (allgather, alltoall)
  };
  using PendingMap = std::map<uint32_t, Pending>;  // by entry
  void Loop();
  // Whether the log holds a slot this member has not run yet.
  bool Unread() const;
  // Under drive_mu_: runs the log's fast instances from cursor_ on, in order, a group at a
  // time, while the next group is at most max_bytes. True if it ran any.
  bool DriveLog(size_t max_bytes) REQUIRES(drive_mu_);
  // Runs one group of the log: its fusable allreduces in buckets, the rest one by one.
  void RunGroup(std::vector<Claim>* group) REQUIRES(drive_mu_);
  // Runs claims[0, count) as one bucket (count > 1: fused allreduces, all held).
  void Run(Claim* claims, size_t count) REQUIRES(drive_mu_);
  // Instance n of an Eager entry e, from every member's input on the board (no exchange on
  // comm_): an allreduce reduces them into r.output, an allgather concatenates them in member
  // order into *result, a broadcast copies the root's into r.output.
  Status RunEager(uint32_t e, uint32_t n, const Request& r, OpResult* result) REQUIRES(drive_mu_);
  // Whether instances of entry e (of `spec`) carry their data on the board: the board's
  // answer, except for reducescatters (their reduction order, hence their bits, stay the
  // backend's, as on the coordinator's path), alltoalls, which always run on comm_, and
  // grouped entries on a board whose agreements are not cheap (they run fused on comm_).
  bool Eager(uint32_t e, const Entry& entry, const TensorSpec& spec) const;
  // One more plan of `spec` (`planned`: its entry in the plan, with this rank's tensor id;
  // `grouped`: in a fused bucket) that can be cached: after SteadyOptions::warmup of them in a
  // row, with the same spec and every member's layout the same, the name is an entry.
  void LearnOne(const TensorSpec& spec, const BucketPlan::Entry& planned, bool grouped)
      REQUIRES(mu_);
  // Whether `entry` (of `spec`) of the set's plan `bucket` can be cached (the same answer on
  // every member).
  bool Cacheable(const BucketPlan& bucket, const BucketPlan::Entry& entry,
                 const TensorSpec& spec) const;
  // Takes *it out of pending_ (the instance ran, or fell back): Settled says so from then on.
  PendingMap::iterator Settle(PendingMap::iterator it) REQUIRES(mu_);
  // Whether the ticket's instance left pending_ (read without mu_).
  bool Settled(const Ticket& ticket) const;
  // Hands back (announced) what fell back: refused by a peer, or past the patience. Returns
  // when the earliest deadline of what is still pending comes.
  std::chrono::steady_clock::time_point CheckPending();
  // An instance past its patience on a board that cannot withdraw it: warns once past the
  // stall warning; past the stall timeout returns the error that fails it (else OK).
  Status CheckStall(uint32_t e, Pending* p, std::chrono::steady_clock::time_point now)
      REQUIRES(mu_);
  // Abort, Stop: hands back, unannounced, every request still held.
  void GiveBackHeld();

  const int32_t process_set_;
  const std::vector<int> ranks_;
  const std::unique_ptr<Communicator> comm_;  // null: every instance is Eager
  const std::unique_ptr<SteadyBoard> board_;
  const Host host_;
  const SteadyOptions options_;
  Timeline* const timeline_;

  mutable Mutex mu_;
  std::unordered_map<std::string, uint32_t> by_name_ GUARDED_BY(mu_);
  std::vector<Entry> entries_ GUARDED_BY(mu_);
  std::unordered_map<std::string, Learning> learning_ GUARDED_BY(mu_);
  bool learning_over_ GUARDED_BY(mu_) = false;
  PendingMap pending_ GUARDED_BY(mu_);
  std::atomic<int> held_{0};                     // pending_.size() (written under mu_)
  NodeCache<PendingMap> spare_ GUARDED_BY(mu_);  // no malloc per instance
  // By entry: the last instance taken out of pending_ (written under mu_).
  std::atomic<uint32_t> settled_[SteadyBoard::kMaxEntries] = {};
  // By entry: whether its caller waited promptly for its last instance (Help; Begin).
  std::atomic<uint8_t> prompt_[SteadyBoard::kMaxEntries] = {};
  SteadyStats stats_ GUARDED_BY(mu_);  // but fast and run_by_enqueue: the atomics below
  std::atomic<int64_t> fast_{0};
  std::atomic<int64_t> run_by_enqueue_{0};
  std::atomic<int64_t> fused_{0};

  // Whoever runs fast instances on comm_ holds drive_mu_: the set's thread, or an enqueuing
  // thread whose offer completed an instance (Begin).
  Mutex drive_mu_;
  uint64_t fast_seq_ GUARDED_BY(drive_mu_) = 0;  // the timeline's sequence of fast instances
  std::unique_ptr<BucketExecutor> executor_ GUARDED_BY(drive_mu_);  // on comm_, if any
  std::vector<unsigned char> eager_peer_ GUARDED_BY(drive_mu_);     // RunEager's scratch
  std::vector<Claim> group_ GUARDED_BY(drive_mu_);                  // DriveLog's scratch
  std::vector<const Request*> run_requests_ GUARDED_BY(drive_mu_);  // Run's scratch
  std::vector<OpResult> run_results_ GUARDED_BY(drive_mu_);
  std::atomic<uint64_t> cursor_{0};  // written under drive_mu_: the next log slot to run

  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};  // Abort: helpers stop helping
  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_PATH_H_
