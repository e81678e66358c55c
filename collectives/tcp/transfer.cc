// Links::Run: the progress engine of transfer.h.
#include "collectives/tcp/transfer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// Bytes a member receives can depend on bytes it sent before (the ring's final block comes
// back after this member sent its partial sum of it), an order the network makes and
// ThreadSanitizer cannot see when the send and the later recv into the same memory run on
// two lanes' threads. Under TSan every send releases and every recv acquires the links,
// which says exactly that: what was sent happens before what is received afterwards.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void NetworkRelease(void* links) { __tsan_release(links); }
void NetworkAcquire(void* links) { __tsan_acquire(links); }
#else
void NetworkRelease(void*) {}
void NetworkAcquire(void*) {}
#endif

// Whether piece i of r has arrived (and was handed to on_piece), on any lane's thread.
bool Done(const RecvStream* r, size_t i) { return __atomic_load_n(&r->done[i], __ATOMIC_ACQUIRE); }

// One connection's share of a Run: the next piece it sends and the next it receives.

struct Links::Slot {
  int fd = -1;
  int peer = -1;
  int channel = 0;
  SendStream* send = nullptr;
  size_t si = 0;  // index of the piece being sent (steps by send->lanes)
  size_t soff = 0;
  RecvStream* recv = nullptr;
  size_t ri = 0;
  size_t roff = 0;

  bool sending() const { return send != nullptr && si < send->pieces.size(); }
  bool receiving() const { return recv != nullptr && ri < recv->pieces.size(); }
  bool send_ready() const {
    return sending() &&
           (send->after == nullptr || si < send->lag || Done(send->after, si - send->lag));
  }
};

Links::Links(int rank, std::vector<Member> members, std::vector<std::vector<int>> fds, int channels,
             std::chrono::milliseconds timeout, size_t parallel_bytes)
    : rank_(rank),
      members_(std::move(members)),
      fds_(std::move(fds)),
      channels_(channels),
      timeout_(timeout),
      abort_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      parallel_bytes_(parallel_bytes),
      pool_(members_.size() > 1 ? channels - 1 : 0) {
  for (int c = 0; c < channels; ++c) wake_fds_.push_back(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

Links::~Links() {
  for (const auto& peer : fds_) {
    for (int fd : peer) close(fd);
  }
  for (int fd : wake_fds_) close(fd);
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
  const uint64_t one = 1;  // wakes every lane of a call in progress
  (void)!write(abort_fd_, &one, sizeof(one));
  return error();
}

void Links::Abort(const Status& reason) {
  const Status first = Fail(reason.ok() ? Aborted("tcp: the communicator was aborted") : reason);
  (void)first;
}

Status Links::Progress(Slot* s, bool* moved, const std::vector<int>& notify,
                       const std::string& what) {
  while (s->send_ready()) {
    const Piece& p = s->send->pieces[s->si];
    const ssize_t n = send(s->fd, p.data + s->soff, p.bytes - s->soff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      NetworkRelease(this);
      *moved = true;
      s->soff += static_cast<size_t>(n);
      if (s->soff == p.bytes) {
        s->soff = 0;
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
    NetworkAcquire(this);
    const ssize_t n = recv(s->fd, p.data + s->roff, p.bytes - s->roff, MSG_DONTWAIT);
    if (n > 0) {
      *moved = true;
      s->roff += static_cast<size_t>(n);
      if (s->roff == p.bytes) {
        s->roff = 0;
        if (s->recv->on_piece) s->recv->on_piece(s->ri);
        __atomic_store_n(&s->recv->done[s->ri], 1, __ATOMIC_RELEASE);
        const uint64_t one = 1;
        for (int fd : notify) (void)!write(fd, &one, sizeof(one));
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
  size_t bytes = 0;
  auto slot_for = [&](int peer, int channel) -> Slot& {
    auto it = index.find({peer, channel});
    if (it != index.end()) return slots[it->second];
    index[{peer, channel}] = slots.size();
    Slot s;
    s.peer = peer;
    s.channel = channel;
    s.fd = fds_[static_cast<size_t>(peer)][static_cast<size_t>(channel)];
    slots.push_back(s);
    return slots.back();
  };
  for (RecvStream& r : *recvs) {
    r.done.assign(r.pieces.size(), 0);
    for (const Piece& p : r.pieces) bytes += p.bytes;
    for (int c = 0; c < r.lanes && static_cast<size_t>(c) < r.pieces.size(); ++c) {
      Slot& s = slot_for(r.peer, r.lane0 + c);
      s.recv = &r;
      s.ri = static_cast<size_t>(c);
    }
  }
  for (SendStream& st : *sends) {
    for (const Piece& p : st.pieces) bytes += p.bytes;
    for (int c = 0; c < st.lanes && static_cast<size_t>(c) < st.pieces.size(); ++c) {
      Slot& s = slot_for(st.peer, st.lane0 + c);
      s.send = &st;
      s.si = static_cast<size_t>(c);
    }
  }
  // By channel: the lanes that run side by side when the call is large enough.
  std::map<int, std::vector<Slot*>> lanes;
  for (Slot& s : slots) lanes[s.channel].push_back(&s);
  const bool parallel = bytes >= parallel_bytes_ && lanes.size() > 1 &&
                        lanes.size() <= static_cast<size_t>(pool_.threads()) + 1 &&
                        lanes.rbegin()->first < channels_;
  if (!parallel) {
    std::vector<Slot*> all;
    for (Slot& s : slots) all.push_back(&s);
    return Drive(all, -1, {}, what);
  }
  std::vector<std::function<Status()>> jobs;
  for (auto& [channel, lane] : lanes) {
    std::vector<int> notify;
    for (const auto& other : lanes) {
      if (other.first != channel) notify.push_back(wake_fds_[static_cast<size_t>(other.first)]);
    }
    const int wake = wake_fds_[static_cast<size_t>(channel)];
    uint64_t drained = 0;
    while (read(wake, &drained, sizeof(drained)) > 0) {
    }
    jobs.push_back(
        [this, &lane = lane, wake, notify, &what] { return Drive(lane, wake, notify, what); });
  }
  return pool_.RunAll(jobs);
}

Status Links::Drive(const std::vector<Slot*>& slots, int wake_fd, const std::vector<int>& notify,
                    const std::string& what) {
  std::vector<pollfd> fds;
  Clock::time_point last = Clock::now();
  for (;;) {
    HORA_RETURN_IF_ERROR(error());
    bool moved = true;
    while (moved) {
      moved = false;
      for (Slot* s : slots) {
        Status st = Progress(s, &moved, notify, what);
        if (!st.ok()) return Fail(std::move(st));
      }
    }
    fds.clear();
    bool pending = false;
    for (const Slot* s : slots) {
      pending = pending || s->sending() || s->receiving();
      const short events =
          static_cast<short>((s->receiving() ? POLLIN : 0) | (s->send_ready() ? POLLOUT : 0));
      if (events != 0) fds.push_back({s->fd, events, 0});
    }
    if (!pending) return Status::Ok();
    if (fds.empty() && wake_fd < 0) {
      return Fail(Internal("tcp " + what + ": streams wait on each other"));
    }
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({abort_fd_, POLLIN, 0});
    const int n = poll(fds.data(), fds.size(), RemainingMs(last + timeout_));
    HORA_RETURN_IF_ERROR(error());
    if (n > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) last = Clock::now();  // readiness is progress enough; bytes follow
      if (wake_fd >= 0 && n > 0) {
        uint64_t drained = 0;
        while (read(wake_fd, &drained, sizeof(drained)) > 0) {
        }
      }
      continue;
    }
    std::string owed;
    for (const Slot* s : slots) {
      if (!s->sending() && !s->receiving()) continue;
      const std::string who = Describe(s->peer);
      if (owed.find(who) == std::string::npos) owed += (owed.empty() ? "" : ", ") + who;
    }
    return Fail(DeadlineExceeded("tcp " + what + ": member " + std::to_string(rank_) +
                                 " moved no byte for " + std::to_string(timeout_.count()) +
                                 " ms; still exchanging with " + owed));
  }
}

}  // namespace hora
