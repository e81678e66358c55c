// PeerCrossMemory (peer_cross_memory.h).
#include "collectives/peer_cross_memory.h"

#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/mutex.h"

namespace hora {

PeerCrossMemory::PeerCrossMemory(const BackendConfig& config, int64_t min_bytes)
    : min_bytes_(min_bytes) {
  for (const std::string& host : config.hostnames) {
    same_host_.push_back(min_bytes > 0 && host == config.hostnames[config.rank]);
  }
  std::random_device random;
  for (uint32_t& t : token_) t = random();
}

bool PeerCrossMemory::Probes(int peer) const {
  return peer >= 0 && static_cast<size_t>(peer) < same_host_.size() && same_host_[peer];
}

PeerOut PeerCrossMemory::Probe() const {
  const PeerMemory at{getpid(), reinterpret_cast<uint64_t>(token_), sizeof(token_)};
  PeerOut probe;
  probe.header = PeerHeader{kPeerProbe, 0, 0, 0, 0, sizeof(at) + sizeof(token_)};
  probe.text.assign(reinterpret_cast<const char*>(&at), sizeof(at));
  probe.text.append(reinterpret_cast<const char*>(token_), sizeof(token_));
  return probe;
}

bool PeerCrossMemory::Verify(const std::string& body) {
  PeerMemory at{};
  char want[sizeof(token_)] = {}, got[sizeof(want)] = {};
  if (body.size() != sizeof(at) + sizeof(want)) return false;
  std::memcpy(&at, body.data(), sizeof(at));
  std::memcpy(want, body.data() + sizeof(at), sizeof(want));
  // Not this host, or the kernel refuses: the tensors come over the socket.
  return at.bytes == static_cast<int64_t>(sizeof(want)) && ReadPeerMemory(at, got).empty() &&
         std::memcmp(want, got, sizeof(want)) == 0;
}

namespace {

// The live words of this process's pending cross-memory sends. They live as long as the
// process (a receiver may read one after its channel closed) and are reused once released;
// every use has a token of its own, so a reused word never passes for an earlier send.
class LiveWords {
 public:
  static PeerCrossMemory::Live* Acquire(uint64_t* token) {
    static std::atomic<uint64_t> next{1};
    *token = next.fetch_add(1, std::memory_order_relaxed);
    PeerCrossMemory::Live* word;
    {
      MutexLock lock(&mu_);
      if (free_.empty()) {
        auto* chunk = new PeerCrossMemory::Live[kChunk];  // never freed: see above
        for (size_t i = 0; i < kChunk; ++i) free_.push_back(&chunk[i]);
      }
      word = free_.back();
      free_.pop_back();
    }
    word->store(*token, std::memory_order_seq_cst);
    return word;
  }

  static void Release(PeerCrossMemory::Live* word) {
    word->store(0, std::memory_order_seq_cst);  // before the send's buffer is let go
    MutexLock lock(&mu_);
    free_.push_back(word);
  }

 private:
  static constexpr size_t kChunk = 1024;
  static inline Mutex mu_;
  static inline std::vector<PeerCrossMemory::Live*> free_ GUARDED_BY(mu_);
};

}  // namespace

PeerCrossMemory::Live* PeerCrossMemory::Describe(bool probed, const void* data, int64_t bytes,
                                                 PeerOut* frame) const {
  if (!probed || min_bytes_ <= 0 || bytes < min_bytes_) return nullptr;
  PeerTensorAt at{{getpid(), reinterpret_cast<uint64_t>(data), bytes}, 0, 0};
  Live* live = LiveWords::Acquire(&at.token);
  at.live = reinterpret_cast<uint64_t>(live);
  frame->header.kind = kPeerDataAt;
  frame->header.bytes = sizeof(at);
  frame->body = nullptr;
  frame->text.assign(reinterpret_cast<const char*>(&at), sizeof(at));
  return live;
}

void PeerCrossMemory::Release(Live* live) { LiveWords::Release(live); }

bool PeerCrossMemory::Parse(const std::string& body, PeerTensorAt* at) {
  if (body.size() != sizeof(*at)) return false;
  std::memcpy(at, body.data(), sizeof(*at));
  return at->data.bytes >= 0;
}

std::string PeerCrossMemory::Read(const PeerTensorAt& at, char* to) {
  std::string why = ReadPeerMemory(at.data, to);
  uint64_t live = 0;
  if (why.empty()) {
    why = ReadPeerMemory(PeerMemory{at.data.pid, at.live, sizeof(live)},
                         reinterpret_cast<char*>(&live));
  }
  if (why.empty() && live != at.token) why = "its send ended while the tensor was read";
  if (why.empty()) reads_.fetch_add(1, std::memory_order_relaxed);
  return why;
}

bool PeerCrossMemory::Unpark(int peer, const Key& key, PeerTensorAt* at) {
  auto it = parked_.find({peer, key});
  if (it == parked_.end()) return false;
  *at = it->second;
  parked_.erase(it);
  return true;
}

}  // namespace hora
