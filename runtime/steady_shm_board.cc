#include "runtime/steady_shm_board.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/copy.h"
#include "common/logging.h"

namespace hora {
namespace {

constexpr uint64_t kStatePending = 0, kStateFast = 1, kStateSlow = 2;
constexpr size_t kMembersOffset = 256;
constexpr size_t kWordsOffset = kMembersOffset + ShmSteadyBoard::kMaxMembers * 64;
constexpr size_t kSlotsOffset = kWordsOffset + SteadyBoard::kMaxEntries * sizeof(uint64_t);
constexpr size_t kEagerOffset = kSlotsOffset + SteadyBoard::kLogSlots * sizeof(uint64_t);
// An eager slot: its stamp (8 bytes), 8 spare, then the data; 64-byte multiples, at least
// kMinEagerSlot, at most kMaxEagerSlot, all of them together at most kEagerSpace.
constexpr size_t kEagerData = 16;
constexpr size_t kMinEagerSlot = 256;
constexpr size_t kMaxEagerSlot = kEagerData + ShmSteadyBoard::kMaxEagerBytes + 48;
constexpr size_t kEagerSpace = size_t{ShmSteadyBoard::kEagerEntries} * 2 * 4 * kMaxEagerSlot;
size_t EagerSlot(int members) {
  const size_t fit = kEagerSpace / (size_t{ShmSteadyBoard::kEagerEntries} * 2 * members) / 64 * 64;
  return std::max(kMinEagerSlot, std::min(kMaxEagerSlot, fit));
}
// A slot's stamp for instance n: never 0 (a slot never written, or being written).
uint64_t EagerStamp(uint32_t n) { return (1ull << 32) | n; }

uint32_t InstanceOf(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
uint64_t StateOf(uint64_t w) { return (w >> 30) & 3; }
uint32_t MaskOf(uint64_t w) { return static_cast<uint32_t>(w & ((1u << 30) - 1)); }
uint64_t Word(uint32_t n, uint64_t state, uint32_t mask) {
  return (static_cast<uint64_t>(n) << 32) | (state << 30) | mask;
}
// > 0: the word is past instance n; 0: at n; < 0: before n (wraps after 2^31 instances).
int32_t Compare(uint64_t w, uint32_t n) { return static_cast<int32_t>(InstanceOf(w) - n); }

// A futex bitset has 32 bits: members m and m + 16 share theirs (a spurious wake-up at most).
uint32_t FutexBit(int member, SteadyBoard::Role role) {
  return 1u << ((member % 16) * 2 + static_cast<int>(role));
}
// Ring's targets: bit 2 * member + role.
uint64_t TargetBit(int member, SteadyBoard::Role role) {
  return 1ull << (2 * member + static_cast<int>(role));
}

SteadyBoard::Outcome OutcomeOf(uint64_t state) {
  return state == kStateFast   ? SteadyBoard::Outcome::kFast
         : state == kStateSlow ? SteadyBoard::Outcome::kSlow
                               : SteadyBoard::Outcome::kPending;
}

}  // namespace

size_t ShmSteadyBoard::EagerBytes(int members) {
  return std::min(kMaxEagerBytes, EagerSlot(members) - kEagerData);
}

size_t ShmSteadyBoard::BytesNeeded(int members) {
  return kEagerOffset + static_cast<size_t>(kEagerEntries) * members * 2 * EagerSlot(members);
}

ShmSteadyBoard::ShmSteadyBoard(void* memory, int member, int members)
    : base_(memory),
      member_(member),
      members_(members),
      bit_(1u << member),
      full_(members >= 32 ? 0 : static_cast<uint32_t>((1ull << members) - 1)),
      eager_bytes_(EagerBytes(members)),
      eager_slot_(EagerSlot(members)) {
  HORA_CHECK(members >= 1 && members <= kMaxMembers && member >= 0 && member < members);
  static_assert(sizeof(Header) <= kMembersOffset && sizeof(MemberState) == 64, "board header");
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "board words");
  static_assert(kMaxEntries <= (1u << 16), "log slots hold the entry in 16 bits");
}

ShmSteadyBoard::MemberState* ShmSteadyBoard::member(int m) const {
  return reinterpret_cast<MemberState*>(static_cast<char*>(base_) + kMembersOffset) + m;
}

std::atomic<uint64_t>* ShmSteadyBoard::word(uint32_t e) const {
  HORA_CHECK(e < kMaxEntries);
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + kWordsOffset) + e;
}

std::atomic<uint64_t>* ShmSteadyBoard::slot(uint64_t index) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + kSlotsOffset) +
         index % kLogSlots;
}

char* ShmSteadyBoard::eager(uint32_t e, uint32_t n, int m) const {
  HORA_CHECK(e < kEagerEntries && m >= 0 && m < members_);
  const size_t index = (static_cast<size_t>(e) * members_ + m) * 2 + (n & 1);
  return static_cast<char*>(base_) + kEagerOffset + index * eager_slot_;
}

void ShmSteadyBoard::PutEager(uint32_t e, uint32_t n, const void* data, size_t bytes) {
  HORA_CHECK(Eager(e, bytes));
  char* s = eager(e, n, member_);
  auto* stamp = reinterpret_cast<std::atomic<uint64_t>*>(s);
  stamp->store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // readers see 0 before any new byte
  CopyBytes(s + kEagerData, data, bytes);
  stamp->store(EagerStamp(n), std::memory_order_release);
}

bool ShmSteadyBoard::GetEager(uint32_t e, uint32_t n, int m, void* data, size_t bytes) const {
  HORA_CHECK(Eager(e, bytes));
  const char* s = eager(e, n, m);
  const auto* stamp = reinterpret_cast<const std::atomic<uint64_t>*>(s);
  if (stamp->load(std::memory_order_acquire) != EagerStamp(n)) return false;
  CopyBytes(data, s + kEagerData, bytes);
  std::atomic_thread_fence(std::memory_order_acquire);  // the copy is done before the re-check
  return stamp->load(std::memory_order_relaxed) == EagerStamp(n);
}

SteadyBoard::Outcome ShmSteadyBoard::Offer(uint32_t e, uint32_t n, bool eager) {
  std::atomic<uint64_t>* w = word(e);
  uint64_t old = w->load(std::memory_order_acquire);
  for (;;) {
    const int32_t c = Compare(old, n);
    if (c > 0) return Outcome::kSlow;  // decided without this member: slow
    uint64_t next;
    if (c == 0) {
      if (StateOf(old) != kStatePending) return OutcomeOf(StateOf(old));
      next = Word(n, kStatePending, MaskOf(old) | bit_);
    } else {
      next = Word(n, kStatePending, bit_);  // n - 1 is decided: this member finished it
    }
    if (MaskOf(next) == full_) next = Word(n, kStateFast, full_);
    if (w->compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (StateOf(next) != kStateFast) return Outcome::kPending;
      Append(e, eager);
      return Outcome::kFast;
    }
  }
}

SteadyBoard::Outcome ShmSteadyBoard::Refuse(uint32_t e, uint32_t n) {
  std::atomic<uint64_t>* w = word(e);
  uint64_t old = w->load(std::memory_order_acquire);
  for (;;) {
    const int32_t c = Compare(old, n);
    if (c > 0) return Outcome::kSlow;
    if (c == 0 && StateOf(old) != kStatePending) return OutcomeOf(StateOf(old));
    const uint64_t next = Word(n, kStateSlow, c == 0 ? MaskOf(old) : 0);
    if (w->compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      Wake();  // members that offered n take the normal path now
      return Outcome::kSlow;
    }
  }
}

SteadyBoard::Outcome ShmSteadyBoard::State(uint32_t e, uint32_t n, uint64_t unread) const {
  const uint64_t w = word(e)->load(std::memory_order_acquire);
  const int32_t c = Compare(w, n);
  if (c > 0) return Passed(e, unread);
  if (c < 0) return Outcome::kPending;
  return OutcomeOf(StateOf(w));
}

SteadyBoard::Outcome ShmSteadyBoard::Withdraw(uint32_t e, uint32_t n, uint64_t unread) {
  const Outcome o = Refuse(e, n);
  if (o == Outcome::kSlow && Compare(word(e)->load(std::memory_order_acquire), n) > 0) {
    return Passed(e, unread);  // decided before the refusal
  }
  return o;
}

SteadyBoard::Outcome ShmSteadyBoard::Passed(uint32_t e, uint64_t unread) const {
  const uint64_t tail = header()->tail.load(std::memory_order_acquire);
  for (uint64_t i = unread; i < tail; ++i) {
    uint32_t logged = 0;
    if (LogAt(i, &logged) && logged == e) return Outcome::kFast;
  }
  return Outcome::kSlow;
}

void ShmSteadyBoard::Append(uint32_t e, bool eager) {
  const uint64_t index = header()->tail.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t value =
      ((index + 1) & 0xffffffffull) << 32 | static_cast<uint64_t>(member_) << 16 | e;  // e < 2^16
  slot(index)->store(value, std::memory_order_seq_cst);
  // Whoever runs the log on each other member: its helpers (read after the slot was
  // written; LeaveHelp reads the slot after it stopped counting, so one of the two sees the
  // other), else its driver unless it sleeps lazily and the instance is Eager (a driver that
  // has just woken from a lazy sleep and still reads as lazy looks at the log before it
  // sleeps again: the bell moved).
  uint64_t targets = 0;
  for (int m = 0; m < members_; ++m) {
    if (m == member_) continue;
    if (member(m)->helpers.load(std::memory_order_seq_cst) > 0) {
      targets |= TargetBit(m, Role::kHelper);
    } else if (!eager || member(m)->lazy.load(std::memory_order_seq_cst) == 0) {
      targets |= TargetBit(m, Role::kDriver);
    }
  }
  Ring(targets);
}

bool ShmSteadyBoard::LogAt(uint64_t index, uint32_t* e, int* last, bool* more) const {
  const uint64_t v = slot(index)->load(std::memory_order_acquire);
  if ((v >> 32) != ((index + 1) & 0xffffffffull)) return false;
  *e = static_cast<uint32_t>(v & 0xffff);
  if (last != nullptr) *last = static_cast<int>((v >> 16) & 0xffff);
  if (more != nullptr) *more = false;  // every instance is a group of its own
  return true;
}

bool ShmSteadyBoard::Sleep(uint32_t seen, int64_t timeout_us, Role role, bool lazy) {
  Header* h = header();
  std::atomic<uint32_t>& sleepers = member(member_)->sleepers[static_cast<int>(role)];
  lazy = lazy && role == Role::kDriver;
  if (lazy) member(member_)->lazy.store(1, std::memory_order_seq_cst);
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  bool woken = true;
  if (h->bell.load(std::memory_order_seq_cst) == seen && timeout_us > 0) {
    timespec ts;  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const int64_t ns = ts.tv_nsec + (timeout_us % 1000000) * 1000;
    ts.tv_sec += static_cast<time_t>(timeout_us / 1000000 + ns / 1000000000);
    ts.tv_nsec = static_cast<long>(ns % 1000000000);
    const uint32_t bitset = FutexBit(member_, role);
    const long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->bell), FUTEX_WAIT_BITSET,
                            seen, &ts, nullptr, bitset);
    woken = !(rc != 0 && errno == ETIMEDOUT);
  }
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
  if (lazy) member(member_)->lazy.store(0, std::memory_order_seq_cst);
  return woken;
}

void ShmSteadyBoard::SetJoined() {
  header()->joined.store(1, std::memory_order_release);
  Wake();
}

void ShmSteadyBoard::Wake() { Ring(~0ull); }

void ShmSteadyBoard::WakeOwn() {
  Ring(TargetBit(member_, Role::kDriver) | TargetBit(member_, Role::kHelper));
}

void ShmSteadyBoard::EnterHelp() {
  member(member_)->helpers.fetch_add(1, std::memory_order_seq_cst);
}

void ShmSteadyBoard::LeaveHelp() {
  member(member_)->helpers.fetch_sub(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the caller's look at the log is after
}

int ShmSteadyBoard::helpers() const {
  return static_cast<int>(member(member_)->helpers.load(std::memory_order_seq_cst));
}

int ShmSteadyBoard::sleeping(Role role) const {
  return static_cast<int>(
      member(member_)->sleepers[static_cast<int>(role)].load(std::memory_order_seq_cst));
}

void ShmSteadyBoard::Ring(uint64_t targets) {
  header()->bell.fetch_add(1, std::memory_order_seq_cst);
  uint32_t bitset = 0;
  for (int m = 0; m < members_; ++m) {
    for (Role role : {Role::kDriver, Role::kHelper}) {
      if ((targets & TargetBit(m, role)) == 0) continue;
      if (member(m)->sleepers[static_cast<int>(role)].load(std::memory_order_seq_cst) == 0) {
        continue;
      }
      bitset |= FutexBit(m, role);
    }
  }
  if (bitset != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header()->bell), FUTEX_WAKE_BITSET, INT_MAX,
            nullptr, nullptr, bitset);
  }
}

}  // namespace hora
