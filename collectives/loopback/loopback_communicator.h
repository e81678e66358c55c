// The loopback backend: a small, asynchronous CPU backend for tests. Every collective's data
// loops back through the coordinator's key-value store (common/kv_store.h): each member
// writes its contribution under a key of its own and reads the others'. It is slow (every
// byte crosses rank 0) and carries at most config.max_message_bytes per contribution, but it
// is a real second backend: it lets one job run process sets on two backends, and it is the
// asynchronous backend that exercises the runtime's completion path on machines without a
// device.
//
// Asynchronous: every call only checks its arguments and queues the work; a progress thread
// of the communicator (its "stream") runs the queue in order. Fence() returns a Work that is
// done when everything queued before it ran. The first failure is sticky.
//
// Keys. Collective number k of member r is "<prefix>c/<k>/<r>"; every member writes one for
// every collective (an empty marker when it has nothing to give) and reads every other
// member's. Writing key k means a member finished collective k-1, so once a member has read
// every key of k, no one reads its key of k-1 any more: it deletes it then. The n-th message
// from s to d with tag t is "<prefix>p/<s>/<d>/<t>/<n>"; the receiver deletes it. So the store
// holds at most one collective key per member plus the messages not yet received.
#ifndef HORA_COLLECTIVES_LOOPBACK_LOOPBACK_COMMUNICATOR_H_
#define HORA_COLLECTIVES_LOOPBACK_LOOPBACK_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "common/kv_store.h"
#include "common/limits.h"
#include "common/status.h"

namespace hora {

struct LoopbackConfig {
  int rank = 0;
  int size = 1;
  KvStore* store = nullptr;                  // not owned; must outlive the communicator
  std::string key_prefix;                    // unique per communicator, the same on every member
  std::chrono::milliseconds timeout{30000};  // bounds every wait for a peer's key
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
};

// Not collective: nothing is exchanged until the first operation.
StatusOr<std::unique_ptr<Communicator>> CreateLoopbackCommunicator(const LoopbackConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_LOOPBACK_LOOPBACK_COMMUNICATOR_H_
