// The readiness board of the steady path (docs/design.md "Steady state"): how the members of
// a process set agree, without a collective call and without the coordinator, whether the
// n-th submission of a cached entry runs on the fast path, and in which order the fast
// instances run. Two kinds:
//   - ShmSteadyBoard (runtime/steady_shm_board.h): members that share memory; one CAS word
//     per entry decides each instance; a member that waited past the patience withdraws.
//   - NetSteadyBoard (runtime/steady_net_board.h): members on any hosts; each member sends
//     its offer or refusal of each instance to every other member (collectives/mailbox.h)
//     and every member decides from the same messages; member 0 orders the instances that
//     are not Eager, in groups. An offer cannot be withdrawn, so a stalled instance is
//     reported instead (SteadyPath's stall check).
//
// What every board guarantees:
//   - A member's n-th submission of entry e (after e was cached) is instance n. Each instance
//     has one outcome that every member observes: kFast when every member offered it, else
//     kSlow (some member refused it, joined, or withdrew it where the board allows that).
//   - Fast instances enter this member's log; the log is read from index 0 on, and the
//     fast instances that are not Eager run in log order, which is the same on every member.
//   - Eager(e, bytes): each member puts its input (PutEager) before it offers, and every
//     member reduces all members' inputs (GetEager) itself.
//   - The bell moves on every event (an offer decided, a refusal, a join, a wake); Sleep
//     returns when it moved or the timeout passed.
//
// Thread safety: every method may be called from any thread of any member.
#ifndef HORA_RUNTIME_STEADY_BOARD_H_
#define HORA_RUNTIME_STEADY_BOARD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace hora {

class SteadyBoard {
 public:
  static constexpr uint32_t kMaxEntries = 1024;
  static constexpr uint32_t kLogSlots = 1024;
  enum class Outcome { kPending, kFast, kSlow };
  enum class Role { kDriver = 0, kHelper = 1 };

  virtual ~SteadyBoard() = default;
  // For the timeline: "shm", "tcp".
  virtual const char* name() const = 0;
  // Whether allreduces of `bytes` bytes may be cached at all (the same answer on every member).
  virtual bool Runs(size_t bytes) const = 0;
  // Whether instances of entry e of `bytes` bytes carry their data on the board.
  virtual bool Eager(uint32_t e, size_t bytes) const = 0;
  virtual size_t MaxEagerBytes() const = 0;
  // Whether an agreement costs less than a share of the coordinator's round for a fused
  // bucket: then the small tensors of a bucket the coordinator fused are Eager like any
  // other; else they are agreed on without their data and run fused with the others of
  // their log group on the steady communicator (SteadyPath). Measured in
  // docs/benchmarks-steady.md "Fused buckets".
  virtual bool AgreesCheaply() const = 0;

  // This member offers instance n of entry e (eager: its instances are Eager). kFast: this
  // call decided it fast (it is in the log; this member's own threads are not woken: the
  // caller runs the log or calls WakeOwn); kPending: others have not offered yet; kSlow: n
  // was decided slow.
  virtual Outcome Offer(uint32_t e, uint32_t n, bool eager = false) = 0;
  // Instance n of entry e goes the normal way unless it is already fast. Returns kSlow (it is
  // slow now) or kFast (it runs on the fast path: too late to refuse).
  virtual Outcome Refuse(uint32_t e, uint32_t n) = 0;
  // For an instance n this member offered and whose log slot (if fast) it has not run yet
  // (`unread`: the first log slot it has not run): its outcome so far.
  virtual Outcome State(uint32_t e, uint32_t n, uint64_t unread) const = 0;
  // The same, withdrawing n if it is still pending, where the board can (withdraws()).
  virtual Outcome Withdraw(uint32_t e, uint32_t n, uint64_t unread) = 0;
  virtual bool withdraws() const { return true; }
  // The members whose offer of instance n of e this member has not seen (a stall report).
  virtual std::vector<int> Missing(uint32_t /*e*/, uint32_t /*n*/) const { return {}; }

  // This member's input of instance n of an Eager entry e (before it offers n).
  virtual void PutEager(uint32_t e, uint32_t n, const void* data, size_t bytes) = 0;
  // Copies member m's input of instance n of e into data; false if the board does not hold it.
  virtual bool GetEager(uint32_t e, uint32_t n, int m, void* data, size_t bytes) const = 0;

  // The log slot `index` (0, 1, ...), if written: *e is its entry; *last (if not null) the
  // member whose offer completed it; *more (if not null) whether slot index + 1 belongs to
  // the same group (a group's slots are written at once: all of them readable, or none).
  // Every member sees the same groups of the instances that are not Eager, and may run a
  // group's instances together (fused). An Eager instance is a group of its own.
  virtual bool LogAt(uint64_t index, uint32_t* e, int* last = nullptr,
                     bool* more = nullptr) const = 0;
  // This member ran its log up to slot `next` (exclusive). A board that groups instances
  // decided while this member still runs an earlier group may hold them until then.
  virtual void Ran(uint64_t /*next*/) {}
  // Whether this member holds decided instances that the next Pull would log (a board that
  // groups: they wait for whoever runs the log to ask, so that what is decided meanwhile
  // joins them). Pull logs them as one group; false if there were none.
  virtual bool Pullable() const { return false; }
  virtual bool Pull() { return false; }

  virtual uint32_t Bell() const = 0;
  // Sleeps as `role` of this member while the bell still reads `seen`, at most timeout_us.
  // False when the timeout passed; true otherwise (woken, the bell had moved, or spuriously).
  // lazy (a driver only): appends of Eager instances need not wake it.
  virtual bool Sleep(uint32_t seen, int64_t timeout_us, Role role, bool lazy = false) = 0;
  // Rings the bell: every sleeper wakes (of every member, where the board can reach them).
  virtual void Wake() = 0;
  // Rings the bell and wakes this member's sleepers only.
  virtual void WakeOwn() = 0;
  // A thread of this member helps (runs the log while it waits for its own instance).
  virtual void EnterHelp() = 0;
  virtual void LeaveHelp() = 0;
  virtual int helpers() const = 0;            // this member's threads between Enter and Leave
  virtual int sleeping(Role role) const = 0;  // this member's threads in Sleep as `role`
  // This member joined (sticky, seen by every member): members refuse every later instance.
  virtual void SetJoined() = 0;
  virtual bool joined() const = 0;
  // The job is broken: wake every sleeper of this member and stop talking to the others.
  virtual void Abort(const Status& /*reason*/) { WakeOwn(); }
  // The set's thread calls this each time it wakes (at least every SteadyOptions::max_sleep):
  // the board's periodic work, if it has any.
  virtual void Tick() {}
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_BOARD_H_
