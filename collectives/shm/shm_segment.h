// The shared-memory segment of one shm communicator: its layout, and how it is created,
// attached, named and removed.
//
// Lifetime. Rank 0 creates a POSIX shared-memory object (shm_open, O_EXCL) named
//   /hora-shm.<creator pid>.<tag>.<nonce>
// (tag: the communicator's key prefix with every byte outside [A-Za-z0-9_-] turned into '_';
// nonce: 64 random bits), reserves its whole size with posix_fallocate (so a full /dev/shm is
// an error at creation, never a SIGBUS in a collective), maps it with MAP_POPULATE (every
// page touched once, here) and publishes "name nonce" through the KvStore. The other members
// open and map it, and everyone waits until every member has attached; then the name is
// unlinked at once (by every member: the first wins), so from then on the memory lives
// exactly as long as some member maps it, and a crash of any process leaves nothing behind.
// The only window in which a kill can leave a name in /dev/shm is between rank 0's shm_open
// and the end of that attach barrier (bounded by the timeout); CleanStaleShmSegments removes
// such names whose creator process is gone (rank 0 calls it before it creates a segment;
// horarun may call it too). memfd_create was not used: its fd cannot cross processes through
// the KvStore (it would need a unix socket and SCM_RIGHTS), and a name plus an immediate
// unlink gives the same crash behaviour.
//
// Layout (every part 64-byte aligned, data parts 4 KiB aligned):
//   Header                      magic, nonce, sizes, attach count, the "broken" record
//   RankControl[size]           per member: ready step, doorbell, pid, left flag
//   ChannelControl[size*(size-1)]  per ordered pair (src -> dst): head / tail byte counts
//   regions: size x 2 halves of half_bytes   a member's staging area, by step parity
//   rings: size*(size-1) x ring_bytes        point-to-point byte streams
//   board: board_bytes (may be 0)            zeroed memory for the runtime's agreement
//                                            (Communicator::SharedBoard)
#ifndef HORA_COLLECTIVES_SHM_SHM_SEGMENT_H_
#define HORA_COLLECTIVES_SHM_SHM_SEGMENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace hora {
namespace shm {

constexpr uint64_t kMagic = 0x31686d732d61726full;  // "ora-shm1"
constexpr size_t kReasonBytes = 480;

// Atomics here are lock-free and address-free on every platform we build for, so they work
// across processes mapping the same memory.
struct Header {
  uint64_t magic;
  uint64_t nonce;
  uint32_t size;
  uint32_t pad0;
  uint64_t half_bytes;
  uint64_t ring_bytes;
  uint64_t total_bytes;
  alignas(64) std::atomic<uint32_t> attached;  // members that mapped the segment
  // The first failure of any member: 0 healthy, 1 being written, 2 set (rank and reason
  // are valid once it is 2).
  alignas(64) std::atomic<uint32_t> broken;
  int32_t broken_rank;
  char broken_reason[kReasonBytes];
};

struct RankControl {
  // The last step this member published (see shm_communicator.cc). Written by the member.
  alignas(64) std::atomic<uint64_t> ready;
  // The member sleeps on bell (a futex) while sleepers > 0; whoever makes progress the member
  // may wait for increments bell and wakes it.
  alignas(64) std::atomic<uint32_t> bell;
  std::atomic<uint32_t> sleepers;
  alignas(64) std::atomic<int32_t> pid;  // 0 until the member attached
  std::atomic<uint32_t> left;            // 1 once the member destroyed its communicator
};

struct ChannelControl {
  alignas(64) std::atomic<uint64_t> head;  // bytes the sender wrote into the ring, ever
  alignas(64) std::atomic<uint64_t> tail;  // bytes the receiver consumed, ever
};

struct Layout {
  int size = 1;
  size_t half_bytes = 0;
  size_t ring_bytes = 0;
  size_t ranks_offset = 0;
  size_t channels_offset = 0;
  size_t regions_offset = 0;
  size_t rings_offset = 0;
  size_t board_offset = 0;
  size_t board_bytes = 0;
  size_t total_bytes = 0;

  static Layout Make(int size, size_t half_bytes, size_t ring_bytes, size_t board_bytes);
  // The index of channel src -> dst (src != dst).
  size_t Channel(int src, int dst) const {
    return static_cast<size_t>(src) * (size - 1) + (dst < src ? dst : dst - 1);
  }
};

// One mapping of a segment. Not thread-safe by itself; the communicator synchronizes.
class Segment {
 public:
  // Rank 0: creates, reserves, maps and initializes the segment.
  static StatusOr<std::unique_ptr<Segment>> Create(const std::string& tag, const Layout& layout);
  // The other members: maps the segment rank 0 published, checking that it is the one meant.
  static StatusOr<std::unique_ptr<Segment>> Open(const std::string& name, uint64_t nonce,
                                                 const Layout& layout);
  ~Segment();  // unmaps; unlinks the name if this mapping created it and it is still named
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name (idempotent; a name already gone is fine).
  void Unlink();

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return header()->nonce; }
  const Layout& layout() const { return layout_; }

  Header* header() const { return reinterpret_cast<Header*>(base_); }
  RankControl* rank(int r) const {
    return reinterpret_cast<RankControl*>(base_ + layout_.ranks_offset) + r;
  }
  ChannelControl* channel(int src, int dst) const {
    return reinterpret_cast<ChannelControl*>(base_ + layout_.channels_offset) +
           layout_.Channel(src, dst);
  }
  // Member r's staging half (0 or 1).
  uint8_t* region(int r, int half) const {
    return base_ + layout_.regions_offset +
           (2 * static_cast<size_t>(r) + half) * layout_.half_bytes;
  }
  uint8_t* board() const { return base_ + layout_.board_offset; }
  uint8_t* ring(int src, int dst) const {
    return base_ + layout_.rings_offset + layout_.Channel(src, dst) * layout_.ring_bytes;
  }

 private:
  Segment(std::string name, const Layout& layout, uint8_t* base, bool creator)
      : name_(std::move(name)), layout_(layout), base_(base), creator_(creator) {}

  const std::string name_;
  const Layout layout_;
  uint8_t* const base_;
  const bool creator_;
  bool unlinked_ = false;
};

// The name prefix of every segment in /dev/shm.
constexpr const char* kNamePrefix = "hora-shm.";
// "gloo/0/" -> "gloo_0_", at most 64 bytes.
std::string SanitizeTag(const std::string& key_prefix);

}  // namespace shm
}  // namespace hora

#endif  // HORA_COLLECTIVES_SHM_SHM_SEGMENT_H_
