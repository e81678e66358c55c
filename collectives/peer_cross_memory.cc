// PeerCrossMemory (peer_cross_memory.h).
#include "collectives/peer_cross_memory.h"

#include <unistd.h>

#include <cstring>
#include <random>

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

void PeerCrossMemory::Describe(bool probed, const void* data, int64_t bytes, PeerOut* frame) const {
  if (!probed || min_bytes_ <= 0 || bytes < min_bytes_) return;
  const PeerMemory at{getpid(), reinterpret_cast<uint64_t>(data), bytes};
  frame->header.kind = kPeerDataAt;
  frame->header.bytes = sizeof(at);
  frame->body = nullptr;
  frame->text.assign(reinterpret_cast<const char*>(&at), sizeof(at));
}

bool PeerCrossMemory::Parse(const std::string& body, PeerMemory* at) {
  if (body.size() != sizeof(*at)) return false;
  std::memcpy(at, body.data(), sizeof(*at));
  return at->bytes >= 0;
}

std::string PeerCrossMemory::Read(const PeerMemory& at, char* to) {
  std::string why = ReadPeerMemory(at, to);
  if (why.empty()) reads_.fetch_add(1, std::memory_order_relaxed);
  return why;
}

bool PeerCrossMemory::Unpark(int peer, const Key& key, PeerMemory* at) {
  auto it = parked_.find({peer, key});
  if (it == parked_.end()) return false;
  *at = it->second;
  parked_.erase(it);
  return true;
}

}  // namespace hora
