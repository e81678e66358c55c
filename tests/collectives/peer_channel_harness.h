// Helpers of the point-to-point channel's tests (peer_channel_test.cc,
// peer_channel_cross_memory_test.cc): channels of one process over real sockets, a completion
// to wait for, a stand-in for a peer that dies.
#ifndef HORA_TESTS_COLLECTIVES_PEER_CHANNEL_HARNESS_H_
#define HORA_TESTS_COLLECTIVES_PEER_CHANNEL_HARNESS_H_

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "collectives/peer_channel.h"
#include "collectives/tcp_mesh.h"
#include "tests/harness/local_config.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace testing {

using Key = PeerChannel::Key;
using Meta = PeerChannel::Meta;

// Channels that move every payload over their sockets unless `cross_memory` (the cases below
// that test cross-memory transfers say so); `hostnames` overrides LocalConfig's.
inline std::vector<std::unique_ptr<PeerChannel>> Open(int size, MemoryStore* store,
                                                      PeerChannel::Options options = {},
                                                      bool cross_memory = false,
                                                      std::vector<std::string> hostnames = {}) {
  if (!cross_memory) options.cross_memory_bytes = 0;
  std::vector<std::unique_ptr<PeerChannel>> channels;
  for (int r = 0; r < size; ++r) {
    BackendConfig config = LocalConfig(r, size, store, "p2p/");
    if (!hostnames.empty()) {  // "hosts" of one machine: loopback
      config.hostnames = hostnames;
      config.bind_address = "127.0.0.1";
    }
    auto ch = PeerChannel::Open(config, options);
    INFO(ch.status().ToString());
    REQUIRE(ch.ok());
    channels.push_back(std::move(ch).value());
  }
  return channels;
}

// A completion to wait for.
struct Pending {
  std::shared_ptr<std::promise<Status>> promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  PeerChannel::Done done() {
    auto p = promise;
    return [p](Status s) { p->set_value(std::move(s)); };
  }
  Status Get() {
    if (future.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      return DeadlineExceeded("the test waited 20 s");
    }
    return future.get();
  }
};

// A connection to rank 0's channel as rank 1 would open it (with the token rank 0 published):
// a stand-in for a process that can then die.
inline int DialAsRank1(MemoryStore* store) {
  auto published = store->Get("p2p/0", std::chrono::milliseconds(1000));
  REQUIRE(published.ok());
  auto fd =
      DialPublished(published.value(), 1, 0, 0,
                    std::chrono::steady_clock::now() + std::chrono::seconds(5), "test", "rank 0");
  REQUIRE(fd.ok());
  return fd.value();
}

inline Meta Floats(size_t n) {
  return Meta{DataType::kFloat32, static_cast<int64_t>(n * sizeof(float))};
}

inline std::vector<float> Filled(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// A message of `a` from rank `from` to rank `to` under `key` arrives whole and both sides
// complete: the connection is (still) in step.
inline void Delivered(const std::vector<std::unique_ptr<PeerChannel>>& ch, int from, int to,
                      Key key, const std::vector<float>& a) {
  std::vector<float> got(a.size(), -1);
  Pending s, r;
  ch[static_cast<size_t>(from)]->Send(to, key, Floats(a.size()), a.data(), "send", s.done());
  ch[static_cast<size_t>(to)]->Recv(from, key, Floats(a.size()), got.data(), "recv", r.done());
  REQUIRE(r.Get().ok());
  REQUIRE(s.Get().ok());
  REQUIRE(got == a);
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_PEER_CHANNEL_HARNESS_H_
