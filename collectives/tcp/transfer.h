// The tcp backend's transport: a set's connections (several channels per peer, plus one for
// Send / Recv) and the progress engine every collective runs on.
//
// A collective is described as streams: per peer at most one SendStream and one RecvStream,
// each a list of pieces. Piece i of a stream travels on channel lane0 + i % lanes, so both
// ends, cutting a transfer the same way, agree on which bytes each connection carries, in
// order. Run drives every stream of a call at once on the calling thread: non-blocking
// send / recv on whichever connection can move bytes, one poll() over all of them when none
// can. A RecvStream's on_piece runs when its piece i has arrived (the ring reduces it there),
// and a SendStream's piece may wait for a piece of a RecvStream (the ring forwards what it
// has just reduced): reduction of one piece overlaps the transfer of the next, and nothing
// is copied that the reduction does not read.
//
// Failures: a connection that ends or errs is PEER_FAILURE naming the member, its rank in
// the job and its host; no byte moving on any pending stream for the timeout is
// DEADLINE_EXCEEDED naming the members still owed bytes. Both are sticky: the links shut
// every connection down (so the members waiting on this one fail at once too) and every
// later Run returns the first error. Abort does the same from any thread.
//
// Thread safety: Run from one thread at a time; Abort and error() from any.
#ifndef HORA_COLLECTIVES_TCP_TRANSFER_H_
#define HORA_COLLECTIVES_TCP_TRANSFER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace hora {

struct Piece {
  char* data = nullptr;
  size_t bytes = 0;  // > 0
};

// Appends pieces of at most `piece` bytes covering [data, data + bytes).
void CutPieces(char* data, size_t bytes, size_t piece, std::vector<Piece>* out);

struct RecvStream {
  int peer = -1;
  int lane0 = 0;  // the first channel; piece i arrives on lane0 + i % lanes
  int lanes = 1;
  std::vector<Piece> pieces;
  std::function<void(size_t i)> on_piece;  // may be empty
  std::vector<char> done;                  // by Run: done[i] once piece i arrived
  size_t received = 0;                     // by Run: bytes arrived so far, of `total`
  size_t total = 0;
};

struct SendStream {
  int peer = -1;
  int lane0 = 0;
  int lanes = 1;
  std::vector<Piece> pieces;
  // When set, piece i >= lag is sent only after after->done[i - lag].
  const RecvStream* after = nullptr;
  size_t lag = 0;
  // When set, the pieces go in order and at most `window` bytes beyond what `pace` has
  // received, until `pace` is complete: what a member sends is clocked by what arrives, so
  // few bytes wait in the sockets (TcpOptions::inflight_bytes). Safe where what arrives never
  // waits for more than the window of what this stream sends: an exchange with one peer, each
  // pair of an alltoallv, a ring of blocks equal within one element. A ring of uneven blocks
  // (allgatherv, reducescatter) is not: a member with a large block of its own would wait
  // for bytes that wait for its block.
  const RecvStream* pace = nullptr;
  size_t window = 0;
  size_t sent = 0;  // by Run
  size_t next = 0;  // by Run: the first piece not sent whole
};

struct Member {
  int global_rank = 0;
  std::string host;
};

class Links {
 public:
  // fds[m][c]: channel c to member m (channels + 1 of them for every other member). Takes
  // ownership of the descriptors.
  // spin: how long Run keeps trying a stalled transfer (yielding the core between tries)
  // before it sleeps in poll().
  Links(int rank, std::vector<Member> members, std::vector<std::vector<int>> fds, int channels,
        std::chrono::milliseconds timeout, std::chrono::microseconds spin);
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  int channels() const { return channels_; }  // for collectives; channel `channels()` is p2p

  // Moves every stream to its end (see above). `what` names the collective in errors.
  Status Run(std::vector<SendStream>* sends, std::vector<RecvStream>* recvs,
             const std::string& what);

  // "member 3 (rank 5 on host b)".
  std::string Describe(int member) const;

  void Abort(const Status& reason);
  Status error() const;

 private:
  struct Slot;
  Status Fail(Status s);
  Status Progress(Slot* slot, bool* moved, const std::string& what);

  // Constant after construction.
  const int rank_;
  const std::vector<Member> members_;
  const std::vector<std::vector<int>> fds_;
  const int channels_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::microseconds spin_;
  const int abort_fd_;

  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_TRANSFER_H_
