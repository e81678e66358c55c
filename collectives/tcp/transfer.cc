// Links::Run: the progress engine of transfer.h.
#include "collectives/tcp/transfer.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "collectives/tcp_mesh.h"

namespace hora {

using Clock = std::chrono::steady_clock;

void CutPieces(char* data, size_t bytes, size_t piece, std::vector<Piece>* out) {
  for (size_t off = 0; off < bytes; off += piece) {
    out->push_back({data + off, std::min(piece, bytes - off)});
  }
}

// One connection's share of a Run: the next piece it sends and the next it receives.
struct Links::Slot {
  int fd = -1;
  int peer = -1;
  SendStream* send = nullptr;
  size_t si = 0;  // index of the piece being sent (steps by send->lanes)
  size_t soff = 0;
  RecvStream* recv = nullptr;
  size_t ri = 0;
  size_t roff = 0;

  bool sending() const { return send != nullptr && si < send->pieces.size(); }
  bool receiving() const { return recv != nullptr && ri < recv->pieces.size(); }
  // Bytes the pace lets this stream send now (SIZE_MAX: unpaced).
  size_t allowance() const {
    const RecvStream* pace = send->pace;
    if (pace == nullptr || pace->received >= pace->total) return SIZE_MAX;
    const size_t limit = pace->received + send->window;
    return limit > send->sent ? limit - send->sent : 0;
  }
  // A paced stream sends its pieces in order (whatever their lanes): the receiver's next step
  // waits for whole pieces, and bytes of a later piece would spend the window on them.
  bool send_ready() const {
    return sending() &&
           (send->after == nullptr || si < send->lag || send->after->done[si - send->lag]) &&
           (send->pace == nullptr || (si == send->next && allowance() > 0));
  }
};

Links::Links(int rank, std::vector<Member> members, std::vector<std::vector<int>> fds, int channels,
             std::chrono::milliseconds timeout, std::chrono::microseconds spin)
    : rank_(rank),
      members_(std::move(members)),
      fds_(std::move(fds)),
      channels_(channels),
      timeout_(timeout),
      spin_(spin),
      abort_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Links::~Links() {
  for (const auto& peer : fds_) {
    for (int fd : peer) close(fd);
  }
  if (abort_fd_ >= 0) close(abort_fd_);
}

std::string Links::Describe(int m) const {
  const Member& who = members_[static_cast<size_t>(m)];
  return "member " + std::to_string(m) + " (rank " + std::to_string(who.global_rank) + " on host " +
         who.host + ")";
}

Status Links::error() const {
  MutexLock lock(&mu_);
  return error_;
}

Status Links::Fail(Status s) {
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    error_ = std::move(s);
  }
  for (const auto& peer : fds_) {
    for (int fd : peer) shutdown(fd, SHUT_RDWR);
  }
  return error();
}

void Links::Abort(const Status& reason) {
  const Status first = Fail(reason.ok() ? Aborted("tcp: the communicator was aborted") : reason);
  (void)first;
  const uint64_t one = 1;
  (void)!write(abort_fd_, &one, sizeof(one));
}

Status Links::Progress(Slot* s, bool* moved, const std::string& what) {
  while (s->send_ready()) {
    const Piece& p = s->send->pieces[s->si];
    const size_t len = std::min(p.bytes - s->soff, s->allowance());
    const ssize_t n = send(s->fd, p.data + s->soff, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *moved = true;
      s->soff += static_cast<size_t>(n);
      s->send->sent += static_cast<size_t>(n);
      if (s->soff == p.bytes) {
        s->soff = 0;
        s->send->next = s->si + 1;
        s->si += static_cast<size_t>(s->send->lanes);
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return PeerFailure("tcp " + what + ": sending to " + Describe(s->peer) +
                       " failed: " + strerror(errno) + " (it closed its connection or died)");
  }
  while (s->receiving()) {
    const Piece& p = s->recv->pieces[s->ri];
    const ssize_t n = recv(s->fd, p.data + s->roff, p.bytes - s->roff, MSG_DONTWAIT);
    if (n > 0) {
      *moved = true;
      s->roff += static_cast<size_t>(n);
      s->recv->received += static_cast<size_t>(n);
      if (s->roff == p.bytes) {
        s->roff = 0;
        s->recv->done[s->ri] = 1;
        if (s->recv->on_piece) s->recv->on_piece(s->ri);
        s->ri += static_cast<size_t>(s->recv->lanes);
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return PeerFailure("tcp " + what + ": the connection to " + Describe(s->peer) +
                       " ended: " + (n == 0 ? std::string("closed by the peer") : strerror(errno)));
  }
  return Status::Ok();
}

Status Links::Run(std::vector<SendStream>* sends, std::vector<RecvStream>* recvs,
                  const std::string& what) {
  HORA_RETURN_IF_ERROR(error());
  std::vector<Slot> slots;
  std::map<std::pair<int, int>, size_t> index;  // (peer, channel) -> slot
  auto slot_for = [&](int peer, int channel) -> Slot& {
    auto it = index.find({peer, channel});
    if (it != index.end()) return slots[it->second];
    index[{peer, channel}] = slots.size();
    Slot s;
    s.peer = peer;
    s.fd = fds_[static_cast<size_t>(peer)][static_cast<size_t>(channel)];
    slots.push_back(s);
    return slots.back();
  };
  for (RecvStream& r : *recvs) {
    r.done.assign(r.pieces.size(), 0);
    r.received = r.total = 0;
    for (const Piece& p : r.pieces) r.total += p.bytes;
    for (int c = 0; c < r.lanes && static_cast<size_t>(c) < r.pieces.size(); ++c) {
      Slot& s = slot_for(r.peer, r.lane0 + c);
      s.recv = &r;
      s.ri = static_cast<size_t>(c);
    }
  }
  for (SendStream& st : *sends) {
    st.sent = st.next = 0;
    for (int c = 0; c < st.lanes && static_cast<size_t>(c) < st.pieces.size(); ++c) {
      Slot& s = slot_for(st.peer, st.lane0 + c);
      s.send = &st;
      s.si = static_cast<size_t>(c);
    }
  }
  std::vector<pollfd> fds;
  Clock::time_point last = Clock::now();
  for (;;) {
    // Bytes that stopped moving usually move again within microseconds (the peer's next
    // piece), sooner than poll() would wake this thread: keep trying for spin_ first.
    Clock::time_point idle_since = Clock::now();
    for (;;) {
      bool moved = false;
      for (Slot& s : slots) {
        Status st = Progress(&s, &moved, what);
        if (!st.ok()) return Fail(std::move(st));
      }
      const Clock::time_point now = Clock::now();
      if (moved) {
        idle_since = now;
        continue;
      }
      if (now - idle_since >= spin_) break;
      bool pending = false;
      for (const Slot& s : slots) pending = pending || s.sending() || s.receiving();
      if (!pending) break;
      sched_yield();  // a member sharing this core runs first
    }
    fds.clear();
    for (const Slot& s : slots) {
      const short events =
          static_cast<short>((s.receiving() ? POLLIN : 0) | (s.send_ready() ? POLLOUT : 0));
      if (events != 0) fds.push_back({s.fd, events, 0});
    }
    bool pending = false;
    for (const Slot& s : slots) pending = pending || s.sending() || s.receiving();
    if (!pending) return Status::Ok();
    if (fds.empty()) return Fail(Internal("tcp " + what + ": streams wait on each other"));
    fds.push_back({abort_fd_, POLLIN, 0});
    const int n = poll(fds.data(), fds.size(), RemainingMs(last + timeout_));
    HORA_RETURN_IF_ERROR(error());
    if (n > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) last = Clock::now();  // readiness is progress enough; bytes follow
      continue;
    }
    std::string owed;
    for (const Slot& s : slots) {
      if (!s.sending() && !s.receiving()) continue;
      const std::string who = Describe(s.peer);
      if (owed.find(who) == std::string::npos) owed += (owed.empty() ? "" : ", ") + who;
    }
    return Fail(DeadlineExceeded("tcp " + what + ": member " + std::to_string(rank_) +
                                 " moved no byte for " + std::to_string(timeout_.count()) +
                                 " ms; still exchanging with " + owed));
  }
}

}  // namespace hora
