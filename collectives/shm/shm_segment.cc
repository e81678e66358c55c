#include "collectives/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "collectives/shm/shm_communicator.h"
#include "common/logging.h"

namespace hora {
namespace shm {
namespace {

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

std::string Errno(int e) { return std::string(std::strerror(e)); }

uint64_t RandomNonce() {
  std::random_device rd;
  uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return x == 0 ? 1 : x;
}

StatusOr<uint8_t*> Map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    return Unavailable("shm: cannot map segment " + name + " (" + std::to_string(bytes) +
                       " bytes): " + Errno(errno));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Layout Layout::Make(int size, size_t half_bytes, size_t ring_bytes, size_t board_bytes) {
  Layout l;
  l.size = size;
  l.half_bytes = AlignUp(half_bytes, 4096);
  l.ring_bytes = size > 1 ? AlignUp(ring_bytes, 4096) : 0;
  const size_t channels = static_cast<size_t>(size) * (size - 1);
  l.ranks_offset = AlignUp(sizeof(Header), 64);
  l.channels_offset = l.ranks_offset + AlignUp(sizeof(RankControl) * size, 64);
  l.regions_offset = AlignUp(l.channels_offset + sizeof(ChannelControl) * channels, 4096);
  l.rings_offset = l.regions_offset + 2 * static_cast<size_t>(size) * l.half_bytes;
  l.board_offset = AlignUp(l.rings_offset + channels * l.ring_bytes, 4096);
  l.board_bytes = AlignUp(board_bytes, 4096);
  l.total_bytes = l.board_offset + l.board_bytes;
  return l;
}

std::string SanitizeTag(const std::string& key_prefix) {
  std::string t;
  for (char c : key_prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    t += ok ? c : '_';
    if (t.size() == 64) break;
  }
  return t.empty() ? "set" : t;
}

StatusOr<std::unique_ptr<Segment>> Segment::Create(const std::string& tag, const Layout& layout) {
  const uint64_t nonce = RandomNonce();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(nonce));
  const std::string name =
      "/" + std::string(kNamePrefix) + std::to_string(getpid()) + "." + tag + "." + hex;
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("shm: cannot create segment " + name + ": " + Errno(errno));
  // Reserve every page now: a tmpfs that runs out later would SIGBUS a collective.
  const int err = posix_fallocate(fd, 0, static_cast<off_t>(layout.total_bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return Unavailable(
        "shm: cannot reserve " + std::to_string(layout.total_bytes) + " bytes for segment " + name +
        " in /dev/shm: " + Errno(err) +
        " (make /dev/shm larger, e.g. docker --shm-size, or lower the member count)");
  }
  auto base = Map(fd, layout.total_bytes, name);
  close(fd);
  if (!base.ok()) {
    shm_unlink(name.c_str());
    return base.status();
  }
  // fallocate zeroed the memory: every counter and flag starts at 0.
  auto* h = new (base.value()) Header;
  h->nonce = nonce;
  h->size = static_cast<uint32_t>(layout.size);
  h->half_bytes = layout.half_bytes;
  h->ring_bytes = layout.ring_bytes;
  h->total_bytes = layout.total_bytes;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return std::unique_ptr<Segment>(new Segment(name, layout, base.value(), true));
}

StatusOr<std::unique_ptr<Segment>> Segment::Open(const std::string& name, uint64_t nonce,
                                                 const Layout& layout) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    const int e = errno;
    return Unavailable("shm: cannot open segment " + name + " that rank 0 created: " + Errno(e) +
                       (e == ENOENT ? " (the members do not share /dev/shm: not one host, or "
                                      "another container; or rank 0 already gave up)"
                                    : ""));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != layout.total_bytes) {
    close(fd);
    return InvalidArgument("shm: segment " + name + " has " + std::to_string(st.st_size) +
                           " bytes, this member expects " + std::to_string(layout.total_bytes) +
                           " (the members were configured differently)");
  }
  auto base = Map(fd, layout.total_bytes, name);
  close(fd);
  if (!base.ok()) return base.status();
  std::unique_ptr<Segment> seg(new Segment(name, layout, base.value(), false));
  const Header* h = seg->header();
  if (h->magic != kMagic || h->nonce != nonce || h->size != static_cast<uint32_t>(layout.size) ||
      h->half_bytes != layout.half_bytes || h->ring_bytes != layout.ring_bytes) {
    return InvalidArgument("shm: segment " + name +
                           " does not match this member's configuration (size, chunk or ring "
                           "bytes differ, or it is another job's segment)");
  }
  return seg;
}

Segment::~Segment() {
  if (creator_) Unlink();
  munmap(base_, layout_.total_bytes);
}

void Segment::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    HORA_LOG_WARN("shm: cannot unlink segment {}: {}", name_, Errno(errno));
  }
}

}  // namespace shm

int CleanStaleShmSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const size_t plen = std::strlen(shm::kNamePrefix);
  while (dirent* e = readdir(dir)) {
    const char* n = e->d_name;
    if (std::strncmp(n, shm::kNamePrefix, plen) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(n + plen, &end, 10);
    if (end == n + plen || *end != '.' || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // creator alive
    const std::string name = std::string("/") + n;
    if (shm_unlink(name.c_str()) == 0) {
      HORA_LOG_WARN("shm: removed {} left behind by process {}, which is gone", name, pid);
      ++removed;
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace hora
