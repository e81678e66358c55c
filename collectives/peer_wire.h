// The point-to-point channel's wire (peer_channel_tcp.cc): its frames, and one connection's
// framing: writing queued frames, and reading frames into where the channel says.
//
// A frame is a PeerHeader and `bytes` of body. The sender writes kPeerData (body: the tensor)
// or kPeerRefusal (body: why); the receiver answers each kPeerData on the same connection with
// kPeerAck (code 0, or the refusal's code and text) once a recv matched it; kPeerBye (body: the
// error that ended the writer's job, or none) says that the writer shut down. An accepted
// connection starts with the dialer's TcpHello.
//
// Cross-memory transfers, between processes of one host: a dialer to a peer on its host sends
// kPeerProbe (body: a PeerMemory of a token in its memory, then the token); the acceptor reads
// the token with process_vm_readv and, when it could, answers kPeerProbeOk (no body). From
// then on the dialer may send a large tensor as kPeerDataAt (body: a PeerTensorAt, code the
// dtype), which the receiver reads straight from the sender's memory (one copy, no
// socket) and acknowledges as any kPeerData: the sender's buffer stays as it is until then.
//
// Thread safety: one thread reads a connection (Read); `out` and Flush are under the
// channel's lock; RedirectSoon may be called from any thread.
#ifndef HORA_COLLECTIVES_PEER_WIRE_H_
#define HORA_COLLECTIVES_PEER_WIRE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "collectives/tcp_mesh.h"

namespace hora {

enum PeerFrameKind : uint32_t {
  kPeerData = 1,
  kPeerRefusal = 2,
  kPeerAck = 3,
  kPeerBye = 4,
  kPeerProbe = 5,
  kPeerProbeOk = 6,
  kPeerDataAt = 7,
};
constexpr uint32_t kPeerLastKind = kPeerDataAt;

// Where bytes are in another process of this host.
struct PeerMemory {
  int64_t pid;
  uint64_t address;
  int64_t bytes;
};

// Copies `from` (in process from.pid) to `to` with process_vm_readv. Returns "" or why not.
std::string ReadPeerMemory(const PeerMemory& from, char* to);

// A kPeerDataAt's body: where the tensor is, and a word of the sender's (at `live`, in the
// same process) that holds `token` while the send is pending. The receiver reads the word
// after the tensor: a send that ended meanwhile (the sender aborted, its buffer maybe reused)
// voids the read.
struct PeerTensorAt {
  PeerMemory data;
  uint64_t live;
  uint64_t token;
};

struct PeerHeader {
  uint32_t kind;
  int32_t set;
  int32_t tag;
  int32_t code;  // kPeerData: the dtype; kPeerAck, kPeerRefusal: the status code (0 = OK)
  int64_t seq;
  int64_t bytes;  // the body's size
};
constexpr int64_t kPeerMaxText = 1 << 16;  // the longest refusal or acknowledgement text

// A frame waiting to be written.
struct PeerOut {
  PeerHeader header;
  const char* body = nullptr;  // kPeerData: the sender's buffer; else text.data()
  std::string text;
  size_t sent = 0;  // of header and body
};

class PeerConn {
 public:
  // What the frames read mean: the channel's. Called on the reading thread.
  class Reader {
   public:
    virtual ~Reader() = default;
    // An accepted connection's hello: false when the dialer is not one of this job's.
    virtual bool OnHello(PeerConn* c, const TcpHello& hello) = 0;
    // A data frame's header (c->header()): where its body goes; null drops it.
    virtual char* OnData(PeerConn* c) = 0;
    // A frame's body is in place (a text frame's in c->text()).
    virtual void OnFrame(PeerConn* c) = 0;
    // After RedirectSoon, before the body's next read (`received` bytes of it in): where
    // the rest goes (the channel copied the first `received` there); null: where it went.
    virtual char* OnRedirect(PeerConn* c, size_t received) = 0;
  };

  PeerConn(int id, int fd, bool accepted)
      : id_(id), fd_(fd), in_(accepted ? In::kHello : In::kHeader) {}
  PeerConn(const PeerConn&) = delete;
  PeerConn& operator=(const PeerConn&) = delete;

  int id() const { return id_; }
  int fd() const { return fd_; }
  const PeerHeader& header() const { return header_; }
  const std::string& text() const { return text_; }

  // Reads what the socket has, frame by frame, telling `reader`; a dropped body goes to
  // `scratch`. Returns "" when the socket is drained, else how the connection ended.
  std::string Read(Reader* reader, char* scratch, size_t scratch_bytes);
  // Asks the reader for a new destination of the body being read (Reader::OnRedirect).
  void RedirectSoon() { redirect_.store(true, std::memory_order_release); }

  // Writes queued frames until the socket is full. Returns "" or why writing failed.
  std::string Flush();

  // Under the channel's lock.
  std::deque<PeerOut> out;
  int peer = -1;  // -1 until an accepted connection's hello
  bool dead = false;
  bool bye = false;           // the peer closed its channel
  std::string bye_why;        // after this error of its own ("" for none)
  bool cross_memory = false;  // dialed: the peer reads this process's memory (kPeerProbeOk)

 private:
  enum class In { kHello, kHeader, kBody };

  // The header is complete: checks it and decides where the body goes. False when the
  // frame is malformed.
  bool StartBody(Reader* reader);

  const int id_;
  const int fd_;
  std::atomic<bool> redirect_{false};
  // The reading thread's alone: the frame being read.
  In in_;
  char head_[sizeof(PeerHeader)];
  size_t got_ = 0;
  PeerHeader header_{};
  char* dest_ = nullptr;  // where the body goes; null: dropped
  size_t left_ = 0;
  std::string text_;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_PEER_WIRE_H_
