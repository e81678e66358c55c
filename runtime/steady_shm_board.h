// The steady path's board for members that share memory (runtime/steady_board.h): they
// agree through memory they all map (Communicator::SharedBoard).
//
// Per entry e one 64-bit word: (instance: 32 bits, state: 2 bits, members offered: 30 bits).
// A member's n-th submission of e (after e was cached) is instance n. Every change is a CAS,
// so each instance has exactly one outcome that every member observes:
//   - Offer: the member sets its bit in instance n (moving the word on from instance n - 1,
//     which is decided, since this member's own n - 1 finished). The member whose bit fills
//     the mask decides kFast and appends (e, n) to the log.
//   - Refuse: instance n is kSlow (the member's spec differs, or it waited past the patience
//     and withdraws): possible only while n is not kFast. A member that finds n kSlow, or
//     the word already past n (n was decided without it, so kSlow), takes the normal path.
//   - Once every member finished a fast n (an Eager one needs no exchange, so one member can
//     finish it before another even read the log), the word moves on to n + 1, so a member
//     that offered n and has not run it yet finds n's outcome in the log instead: fast if
//     an unread slot holds e. (A slow n cannot be passed so early: the coordinator runs it
//     only once every member announced it, which a member does once it saw n slow.)
// Log: a ring of kLogSlots slots (entry, stamp) filled in decision order; every member runs
// the fast instances in log order on the set's steady communicator. At most one unconsumed
// slot per entry exists for any member (the next instance needs every member's offer, which
// each makes only after running the previous one), so kLogSlots >= kMaxEntries never
// overwrites a slot some member has not read.
// Eager data: for a small instance (Eager(e, bytes)) each member writes its input into its
// slot of (e, n mod 2) before it offers n, so once n is fast every member reduces all the
// members' copies itself and the collective needs no second exchange. A member submits n + 2
// (the same slot) only after n + 1 completed, which needed every member's submission of n + 1,
// made after that member finished n: so no slot a member still has to read is overwritten.
// Each slot is stamped with its instance (a seqlock), so a read that would see another
// instance's data (only after a failure broke that reasoning) fails instead of mixing them.
// Waiting: a thread sleeps on the board's bell (a process-shared futex) after a short spin,
// as its member's driver (the set's thread) or as a helper (a thread waiting for its own
// instance, which runs the log itself). Every event increments the bell; the futex wake-up
// goes only to the threads that must act on it, so that a sleeper with nothing to do costs
// the appending thread no system call and its core no scheduling:
//   - an append wakes, on every other member, its helpers if it has any, else its driver,
//     unless the instance is Eager and the driver sleeps lazily (a bounded sleep after which
//     it looks at the log by itself: no peer waits for a member to run an Eager instance, and
//     its own waiting thread usually runs it first); the appending member's own threads are
//     the caller's business (it runs the log itself or calls WakeOwn);
//   - a refusal, SetJoined and Wake() wake every sleeper of every member.
// A helper leaving (LeaveHelp) while the log holds work must wake its driver (WakeOwn): an
// append that counted it as present woke only helpers.
//
// Thread safety: every method may be called from any thread of any member.
#ifndef HORA_RUNTIME_STEADY_SHM_BOARD_H_
#define HORA_RUNTIME_STEADY_SHM_BOARD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/steady_board.h"

namespace hora {

class ShmSteadyBoard final : public SteadyBoard {
 public:
  static constexpr int kMaxMembers = 30;
  static constexpr uint32_t kEagerEntries = 64;
  // An Eager instance carries at most EagerBytes(members): kMaxEagerBytes up to 4 members,
  // less for more (the eager slots of 4 members' 4 KiB, 2 MiB, fill the space of any count:
  // about 2 KiB at 8 members, 496 bytes at 30).
  static constexpr size_t kMaxEagerBytes = 4096;
  static size_t EagerBytes(int members);

  // The bytes a board of `members` needs; memory: that many zeroed bytes mapped by every member.
  static size_t BytesNeeded(int members);
  ShmSteadyBoard(void* memory, int member, int members);

  const char* name() const override { return "shm"; }
  bool Runs(size_t) const override { return true; }
  bool Eager(uint32_t e, size_t bytes) const override {
    return e < kEagerEntries && bytes > 0 && bytes <= eager_bytes_;
  }
  size_t MaxEagerBytes() const override { return eager_bytes_; }
  bool AgreesCheaply() const override { return true; }  // a CAS in shared memory
  Outcome Offer(uint32_t e, uint32_t n, bool eager = false) override;
  Outcome Refuse(uint32_t e, uint32_t n) override;
  Outcome State(uint32_t e, uint32_t n, uint64_t unread) const override;
  Outcome Withdraw(uint32_t e, uint32_t n, uint64_t unread) override;
  void PutEager(uint32_t e, uint32_t n, const void* data, size_t bytes) override;
  bool GetEager(uint32_t e, uint32_t n, int m, void* data, size_t bytes) const override;
  bool LogAt(uint64_t index, uint32_t* e, int* last = nullptr, bool* more = nullptr) const override;
  uint32_t Bell() const override { return header()->bell.load(std::memory_order_acquire); }
  bool Sleep(uint32_t seen, int64_t timeout_us, Role role, bool lazy = false) override;
  void Wake() override;
  void WakeOwn() override;
  void EnterHelp() override;
  void LeaveHelp() override;
  int helpers() const override;
  int sleeping(Role role) const override;
  void SetJoined() override;
  bool joined() const override { return header()->joined.load(std::memory_order_acquire) != 0; }

 private:
  struct Header {
    alignas(64) std::atomic<uint64_t> tail;  // log slots appended, ever
    alignas(64) std::atomic<uint32_t> bell;
    alignas(64) std::atomic<uint32_t> joined;
  };
  struct alignas(64) MemberState {
    std::atomic<uint32_t> sleepers[2];  // by Role
    std::atomic<uint32_t> helpers;
    std::atomic<uint32_t> lazy;  // the driver sleeps lazily
  };
  Header* header() const { return static_cast<Header*>(base_); }
  MemberState* member(int m) const;
  // Rings the bell, then wakes the sleepers of `targets` (bits TargetBit(member, role), in
  // steady_shm_board.cc) that sleep.
  void Ring(uint64_t targets);
  std::atomic<uint64_t>* word(uint32_t e) const;
  std::atomic<uint64_t>* slot(uint64_t index) const;
  char* eager(uint32_t e, uint32_t n, int m) const;  // the slot: an atomic stamp, then data
  void Append(uint32_t e, bool eager);
  // The outcome of an instance of e the word has passed: kFast if a log slot from `unread`
  // on holds e, else kSlow.
  Outcome Passed(uint32_t e, uint64_t unread) const;

  void* const base_;
  const int member_;
  const int members_;
  const uint32_t bit_;
  const uint32_t full_;
  const size_t eager_bytes_;  // EagerBytes(members_)
  const size_t eager_slot_;   // the bytes of one eager slot
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_SHM_BOARD_H_
