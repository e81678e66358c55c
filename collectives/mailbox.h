// Small ordered messages among the members of a process set, on any number of hosts: how the
// members agree without the coordinator and without waiting inside a collective when they
// share no memory (runtime/steady_net_board.h). A message a member posts reaches every other
// member (or the members it names), and every member receives one member's messages in the
// order it posted them (so all members see the same sequence from each sender). Nothing is reduced
// or ordered across senders here.
//
// Built over TCP: one connection per pair of peers, Nagle off, bootstrapped through the
// set's KvStore (each member publishes an address and a token the connecting side must
// present). A peer whose connection ends (it died, or closed its mailbox) is reported by Read.
//
// Thread safety: Post, Await and Abort from any thread; Read from one thread at a time.
#ifndef HORA_COLLECTIVES_MAILBOX_H_
#define HORA_COLLECTIVES_MAILBOX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/registry.h"
#include "common/status.h"

namespace hora {

class Mailbox {
 public:
  // The largest message Post takes.
  static constexpr size_t kMaxMessage = 1 << 20;

  virtual ~Mailbox() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sends `bytes` bytes to every other member, bounded by the mailbox's timeout (a member
  // that reads nothing for that long fails it with DEADLINE_EXCEEDED naming it).
  virtual Status Post(const void* data, size_t bytes) = 0;
  // The same, to the listed members only (each another member), in list order.
  virtual Status PostTo(const std::vector<int>& members, const void* data, size_t bytes) = 0;
  // Hands every complete message that has arrived to fn(member, data, bytes), without
  // blocking. A connection that ended or failed: PEER_FAILURE naming the member (later
  // calls still read the others and report it again).
  virtual Status Read(
      const std::function<void(int member, const char* data, size_t bytes)>& fn) = 0;
  // Whether member m's connection ended (Read handed out what it had sent before).
  virtual bool Ended(int member) const = 0;
  // Blocks until a message may have arrived, `wake_fd` (if >= 0) is readable, or timeout_us
  // passed. True unless the timeout passed.
  virtual bool Await(int64_t timeout_us, int wake_fd) = 0;
  // Ends every Post and Await in progress and every later one with `reason`.
  virtual void Abort(const Status& reason) = 0;
};

// Collective over the set's members (config as for CreateCommunicator; key_prefix unique to
// this mailbox), bounded by config.timeout. peers: the members this one is connected to
// (empty: every other member); the relation must be symmetric (m lists n when n lists m).
// Post reaches the peers; PostTo takes peers only.
StatusOr<std::unique_ptr<Mailbox>> CreateMailbox(const BackendConfig& config,
                                                 const std::vector<int>& peers = {});

}  // namespace hora

#endif  // HORA_COLLECTIVES_MAILBOX_H_
