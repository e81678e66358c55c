// TcpPeerChannel's thread (peer_channel_tcp.h): it reads every connection, writes what a
// caller could not write at once, and judges lost peers and stalls.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/peer_channel_tcp.h"

namespace hora {

// What the frames read on the loop mean (PeerConn::Reader), with the loop's effects.
class TcpPeerChannel::Reader final : public PeerConn::Reader {
 public:
  Reader(TcpPeerChannel* channel, Effects* e) : ch_(channel), e_(e) {}

  bool OnHello(PeerConn* c, const TcpHello& hello) override {
    MutexLock lock(&ch_->mu_);
    if (hello.token != ch_->listener_.token || hello.rank >= static_cast<uint32_t>(ch_->size_) ||
        static_cast<int>(hello.rank) == ch_->rank_) {
      return false;
    }
    c->peer = static_cast<int>(hello.rank);
    return true;
  }

  char* OnData(PeerConn* c) override {
    const PeerHeader& h = c->header();
    MutexLock lock(&ch_->mu_);
    return ch_->match_.Arriving(c->id(), c->peer, Key{h.set, h.tag, h.seq},
                                Meta{static_cast<DataType>(h.code), h.bytes}, e_);
  }

  char* OnRedirect(PeerConn* c, size_t received) override {
    const PeerHeader& h = c->header();
    std::unique_ptr<char[]> arrived;
    char* out;
    {
      MutexLock lock(&ch_->mu_);
      out = ch_->match_.Redirect(c->id(), c->peer, Key{h.set, h.tag, h.seq}, &arrived);
    }
    if (out != nullptr && received > 0) std::memcpy(out, arrived.get(), received);
    return out;
  }

  void OnFrame(PeerConn* c) override {
    const PeerHeader& h = c->header();
    const Key key{h.set, h.tag, h.seq};
    if (h.kind == kPeerDataAt) return ReadAt(c, key);
    MutexLock lock(&ch_->mu_);
    if (h.kind == kPeerProbe) {  // kPeerProbeOk when the dialer's token could be read
      if (!PeerCrossMemory::Verify(c->text())) return;
      PeerOut ok;
      ok.header = PeerHeader{kPeerProbeOk, 0, 0, 0, 0, 0};
      return ch_->Queue(c->id(), std::move(ok), e_);
    }
    if (h.kind == kPeerProbeOk) {
      c->cross_memory = true;
      return;
    }
    const Status said = h.code == 0 ? Status::Ok() : Status(static_cast<Code>(h.code), c->text());
    if (h.kind == kPeerBye) {
      c->bye = true;
      c->bye_why = c->text();
    } else if (h.kind == kPeerAck) {
      ch_->match_.Answered(c->peer, key, said, e_);
    } else if (h.kind == kPeerRefusal) {
      ch_->match_.Refusal(c->peer, key, Status(said.code(), "the sender refused it: " + c->text()),
                          e_);
    } else {
      ch_->match_.Arrived(c->id(), c->peer, key, e_);  // answered after the read (Loop)
    }
  }

 private:
  // A kPeerDataAt: the tensor is read from the sender's memory into where its recv wants
  // it (or a buffer of its own), without the lock, as a kPeerData's body is.
  void ReadAt(PeerConn* c, const Key& key) {
    PeerTensorAt at{};
    std::string why = "a malformed cross-memory frame";
    if (PeerCrossMemory::Parse(c->text(), &at)) {
      char* into;
      {
        MutexLock lock(&ch_->mu_);
        const Meta sent{static_cast<DataType>(c->header().code), at.data.bytes};
        if (ch_->match_.Park(c->id(), c->peer, key, sent)) {  // read when a recv takes it
          ch_->cross_.Park(c->peer, key, at);
          return;
        }
        into = ch_->match_.Arriving(c->id(), c->peer, key, sent, e_);
      }
      why = into != nullptr ? ch_->cross_.Read(at, into) : "";
    }
    MutexLock lock(&ch_->mu_);
    if (!why.empty()) return ch_->Lost(c, "reading the tensor from its memory: " + why, e_);
    ch_->match_.Arrived(c->id(), c->peer, key, e_);  // answered after the read (Loop)
  }

  TcpPeerChannel* const ch_;
  Effects* const e_;
};

void TcpPeerChannel::Loop() {
  std::vector<pollfd> fds;
  std::vector<int> ids;
  Effects e;
  Reader reader(this, &e);
  auto next_check = Clock::now();
  for (;;) {
    fds.assign({pollfd{listener_.fd, POLLIN, 0}, pollfd{wake_, POLLIN, 0}});
    ids.assign({-1, -1});
    {
      MutexLock lock(&mu_);
      if (!aborted_.ok()) break;
      for (auto it = conns_.begin(); it != conns_.end();) {
        PeerConn* c = it->second.get();
        if (c->dead) {
          match_.Closed(c->id(), Refused(c->peer), &e);
          close(c->fd());
          it = conns_.erase(it);
          continue;
        }
        fds.push_back(
            pollfd{c->fd(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(c->id());
        ++it;
      }
    }
    Run(&e);
    const int n = poll(fds.data(), fds.size(), PollMs());
    if (n < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      uint64_t v;
      (void)!read(wake_, &v, sizeof(v));
    }
    if (fds[0].revents != 0) Accept();
    for (size_t i = 2; i < fds.size() && n > 0; ++i) {
      if (fds[i].revents == 0) continue;
      MutexLock lock(&mu_);
      auto it = conns_.find(ids[i]);
      if (it == conns_.end()) continue;
      PeerConn* c = it->second.get();
      if (fds[i].revents & POLLOUT) Flush(c, &e);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        lock.Unlock();  // reading writes outputs without the lock
        std::string how = c->Read(&reader, scratch_, sizeof(scratch_));
        Run(&e);  // the recvs that completed wake their callers before the acknowledgements
        MutexLock relock(&mu_);
        if (!how.empty()) Lost(c, how, &e);
        Answer(&e);
      }
    }
    {
      MutexLock lock(&mu_);
      for (auto it = suspects_.begin(); it != suspects_.end();) {
        if (Clock::now() < it->second.second) {
          ++it;
          continue;
        }
        match_.Lost(it->first, it->second.first, &e);
        e.lost.push_back(it->second.first);
        it = suspects_.erase(it);
      }
    }
    if (options_.stall.count() > 0 && Clock::now() >= next_check) {
      next_check = Clock::now() + std::chrono::milliseconds(200);
      MutexLock lock(&mu_);
      match_.Stalls(options_.stall, &e);
    }
    Run(&e);
  }
  FailAll();
}

// Until the loop next has something to check: a suspect's grace, the stall check.
int TcpPeerChannel::PollMs() {
  auto until = Clock::now() + std::chrono::milliseconds(200);
  MutexLock lock(&mu_);
  for (const auto& [peer, verdict] : suspects_) until = std::min(until, verdict.second);
  return RemainingMs(until);
}

void TcpPeerChannel::Accept() {
  for (;;) {
    const int fd = accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    TuneSocket(fd);
    MutexLock lock(&mu_);
    const int id = next_conn_++;
    conns_[id] = std::make_unique<PeerConn>(id, fd, /*accepted=*/true);
  }
}

// After the loop ended: fails everything pending (with the abort's reason).
void TcpPeerChannel::FailAll() {
  Effects e;
  {
    MutexLock lock(&mu_);
    match_.FailAll(aborted_.ok() ? Aborted("the point-to-point channel stopped") : aborted_, &e);
  }
  Run(&e);
}

}  // namespace hora
