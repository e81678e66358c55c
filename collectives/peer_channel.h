// Point-to-point messages between the processes of a job, without the coordinator: how a
// send meets its recv (runtime/peer_transfers.h).
//
// Every process opens one listening socket at start and publishes "address port token" in
// the job's store (key_prefix + rank). The first message to a peer dials it (one connection
// per direction of a pair, made on the sending thread); after that a message is one header
// and its payload on that connection, Nagle off.
//
// Matching. A message carries a Key; the receiver pairs it with the recv posted for the same
// (sender, Key), whatever the order the two sides reach it. A message that arrives before its
// recv is read into a buffer of its own (the receiving side always drains its sockets: two
// peers sending each other large messages cannot block each other). A recv posted first is
// read straight into its output.
//
// Between processes of one host, a large payload is not written to the socket: the receiver
// reads it from the sender's memory (Options::cross_memory_bytes), the header and the
// acknowledgement still going over the connection. Such a message that comes before its recv
// is parked (nothing read) and read by the recv's caller straight into its output. A read
// whose send ended meanwhile (the sender aborted) does not complete the recv.
//
// Completion. A recv completes when its payload is in place. A send completes when the
// receiver has matched it: its status is the receiver's word (OK, or why the receiver
// refused it: a size or dtype that differs, a recv refused for bad input), so both sides of a
// mismatch fail with the same message. The sender's buffer is read until then.
//
// Failure. A peer whose connection ends fails what is pending with it, naming it: "shut
// down" when it closed its channel (a goodbye came first; with the error that ended its job,
// when Abort had one that was not ABORTED), else "exited or died", which
// on_lost hears before the operations complete (after a grace in which the job's own
// verdict, through Abort, takes precedence). An
// operation pending longer than Options::stall fails with DEADLINE_EXCEEDED naming both
// sides, and so does a message no recv claimed in that time (on_stall hears of both). Abort
// fails everything pending and every later call; no output is written after it returns.
//
// Thread safety: every method from any thread. Callbacks run on the channel's thread, or on
// the calling thread when an operation completes at once; they must not block.
#ifndef HORA_COLLECTIVES_PEER_CHANNEL_H_
#define HORA_COLLECTIVES_PEER_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collectives/registry.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

class PeerChannel {
 public:
  // With the sender, unique to one transfer.
  struct Key {
    int32_t set = 0;
    int32_t tag = 0;
    int64_t seq = 0;
    bool operator<(const Key& o) const {
      return set != o.set ? set < o.set : tag != o.tag ? tag < o.tag : seq < o.seq;
    }
  };
  // What both sides must agree on.
  struct Meta {
    DataType dtype = DataType::kFloat32;
    int64_t bytes = 0;
  };
  using Done = std::function<void(Status)>;

  struct Options {
    // Pending longer than this: DEADLINE_EXCEEDED (<= 0: never).
    std::chrono::milliseconds stall{0};
    // An operation or an unclaimed message stalled (after the operation's own Done).
    std::function<void(const Status&)> on_stall;
    // A peer's connection ended without its goodbye (it died): after lost_grace (unless Abort
    // came first), on_lost hears of it and what is pending with the peer fails.
    std::function<void(const Status&)> on_lost;
    std::chrono::milliseconds lost_grace{0};
    // How errors name a process ("rank 3 (host a, pid 12)"); null: "rank 3".
    std::function<std::string(int rank)> name;
    // A tensor of at least this many bytes to a peer on this host (the same hostname) is
    // read by the receiver straight from the sender's memory (process_vm_readv: one copy, no
    // socket), once a probe showed that the kernel allows it (peer_wire.h); 0: never.
    int64_t cross_memory_bytes = 64 << 10;
  };

  // config: rank and global_ranks are the job's (this process and every process), store
  // the job's (it must outlive the channel), key_prefix this channel's; config.timeout bounds
  // a dial. Publishes this process's address; not collective.
  static StatusOr<std::unique_ptr<PeerChannel>> Open(const BackendConfig& config, Options options);

  virtual ~PeerChannel() = default;

  // `what` names the operation in errors ("send to rank 1 of process set 0, tag 3, #0").
  // `data` is read until done runs.
  virtual void Send(int peer, Key key, Meta meta, const void* data, std::string what,
                    Done done) = 0;
  // The peer's recv of `key` fails with `why` (this side refused its send).
  virtual void SendRefusal(int peer, Key key, const Status& why) = 0;
  // `out` (meta.bytes) is written until done runs.
  virtual void Recv(int peer, Key key, Meta meta, void* out, std::string what, Done done) = 0;
  // This side refused its recv of `key`: the message is dropped when it comes and its send
  // fails with `why`.
  virtual void RefuseRecv(int peer, Key key, const Status& why) = 0;

  // Fails what is pending and every later call with `why`. Idempotent.
  virtual void Abort(const Status& why) = 0;

  // How many tensors this process has read from a peer's memory (Options::cross_memory_bytes).
  virtual int64_t cross_memory_reads() const = 0;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_PEER_CHANNEL_H_
