// The matching half of PeerChannel (peer_channel.h), without sockets: which send meets which
// recv, where a message that came first waits, what each sender is answered, which peers are
// gone and what stalled. The channel's transport carries out what a call decides (Effects)
// after releasing its lock.
//
// Thread safety: none; the channel holds its lock around every call.
#ifndef HORA_COLLECTIVES_PEER_MATCH_H_
#define HORA_COLLECTIVES_PEER_MATCH_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/peer_channel.h"

namespace hora {

class PeerMatch {
 public:
  using Key = PeerChannel::Key;
  using Meta = PeerChannel::Meta;
  using Done = PeerChannel::Done;
  using Clock = std::chrono::steady_clock;

  // What a call decided.
  struct Effects {
    struct Answer {
      int conn;  // the connection the message came on
      Key key;
      Status status;  // OK: matched; else why the receiver refused it
    };
    std::vector<Answer> answers;                // acknowledgements to write
    std::vector<std::pair<Done, Status>> done;  // callbacks to run, in order
    std::vector<Status> stalls;
    std::vector<Status> lost;    // peers that died (the transport's)
    std::vector<int> redirects;  // connections whose arriving body a recv now waits for
  };

  explicit PeerMatch(int rank) : rank_(rank) {}

  // OK while `peer` can still be exchanged with; else why not.
  Status Gone(int peer) const;

  // A send about to go out: `done` gets the receiver's answer.
  void Send(int peer, const Key& key, std::string what, Done done);
  // A parked message a recv took (Recv): the transport reads its body into the recv's output
  // (after the lock), then answers `conn` and runs `done` with how that went.
  struct Take {
    int conn = -1;
    std::string what;  // the recv's, for errors
    Done done;         // null: nothing to take
  };

  // A recv: true when its message had arrived; the caller then copies *data (meta.bytes,
  // null when the recv does not take it) into `out` (after the lock) before running e->done,
  // which holds its completion; or, for a parked message, reads it as *take says. A message
  // still arriving puts its connection in e->redirects: the transport then asks Redirect
  // where the rest of the body goes.
  bool Recv(int peer, const Key& key, const Meta& meta, void* out, std::string what, Done done,
            Effects* e, std::unique_ptr<char[]>* data, Take* take);
  void RefuseRecv(int peer, const Key& key, const Status& why, Effects* e);
  // A taken message that could not be read (its sender died): the recv waits again, with
  // nothing to come, until its peer is Lost (the transport's verdict), or it stalls, or
  // FailAll; at once when the peer is gone already.
  void Unread(int peer, const Key& key, Take take, Effects* e);

  // The transport's events. Arriving: a data message's header came on connection `conn`;
  // returns where its body goes (null: drop it). Arrived: the body is in place.
  char* Arriving(int conn, int peer, const Key& key, const Meta& sent, Effects* e);
  // A message whose body the transport can read later (from the sender's memory, which the
  // sender keeps until it is answered): true when no recv waits for it yet, and it is kept
  // until one takes it (Recv's *take), or it stalls, or its connection ends. False: a recv
  // waits; read it now (Arriving, Arrived).
  bool Park(int conn, int peer, const Key& key, const Meta& sent);
  void Arrived(int conn, int peer, const Key& key, Effects* e);
  // A recv that takes a message still arriving on `conn` (into its own buffer): the recv's
  // output, where the rest of the body goes; the buffer moves to *arrived, and the caller
  // copies what it read so far from there. Null when no such recv waits (or it does not
  // take the message: the body then arrives whole and Arrived decides).
  char* Redirect(int conn, int peer, const Key& key, std::unique_ptr<char[]>* arrived);
  void Refusal(int peer, const Key& key, const Status& why, Effects* e);
  void Answered(int peer, const Key& key, const Status& answer, Effects* e);
  // Everything pending with `peer` fails with `why` (its connection ended); a body being read
  // stays where it goes until Closed.
  void Lost(int peer, const Status& why, Effects* e);
  // Connection `conn` closed (no more reads): the recv its body was going into fails with
  // `why`, a message cut off while arriving is forgotten.
  void Closed(int conn, const Status& why, Effects* e);

  // Operations and messages older than `stall`: DEADLINE_EXCEEDED (e->stalls too).
  void Stalls(std::chrono::milliseconds stall, Effects* e);
  // Fails everything pending with `why` and forgets every message.
  void FailAll(const Status& why, Effects* e);

 private:
  using Peered = std::pair<int, Key>;
  struct SendOp {
    std::string what;
    Done done;
    Clock::time_point since;
  };
  struct RecvOp {
    Meta meta;
    char* out = nullptr;
    std::string what;
    Done done;  // null: refused by this side (refusal)
    Status refusal;
    Clock::time_point since;
  };
  // A message that came before its recv: its data, or the sender's refusal.
  struct Arrival {
    int conn = -1;
    Meta meta;
    std::unique_ptr<char[]> data;  // meta.bytes, uninitialised until read
    bool complete = false;
    bool parked = false;  // Park: no body here; a recv's transport reads it
    Status refusal;
    Clock::time_point since;
  };
  struct Answer {
    int peer;
    Key key;
    Status status;  // what the sender is told once the body is read
    RecvOp recv;    // the recv the body goes into (done null: dropped)
  };

  // A recv meets a complete arrival: the answer, the copy, the completion.
  Status Match(const Arrival& a, const RecvOp& op, const Key& key, Effects* e);

  const int rank_;
  std::map<int, Status> gone_;
  std::map<Peered, SendOp> sends_;
  std::map<Peered, RecvOp> recvs_;
  std::map<Peered, Arrival> arrivals_;
  std::map<int, Answer> reading_;  // by connection: the data message being read
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_PEER_MATCH_H_
