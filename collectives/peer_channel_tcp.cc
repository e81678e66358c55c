// PeerChannel over TCP (peer_channel.h): one listening socket, one connection per direction
// of a pair, dialed by the sender on its first message; one thread reads every connection
// and writes what a caller could not write at once.
//
// The frames and one connection's framing are in peer_wire.h. A message whose recv is posted
// while its body is arriving (into a buffer of its own) has the rest of its body read straight
// into the recv's output.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/peer_channel.h"
#include "collectives/peer_match.h"
#include "collectives/peer_wire.h"
#include "collectives/tcp_mesh.h"
#include "common/mutex.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;

class TcpPeerChannel final : public PeerChannel {
 public:
  TcpPeerChannel(const BackendConfig& config, Options options, TcpListener listener, int wake)
      : store_(config.store),
        key_prefix_(config.key_prefix),
        rank_(config.rank),
        size_(config.size()),
        dial_timeout_(config.timeout),
        options_(std::move(options)),
        listener_(std::move(listener)),
        wake_(wake),
        match_(config.rank) {
    for (size_t r = 0; r < config.hostnames.size(); ++r) {
      same_host_.push_back(options_.cross_memory_bytes > 0 &&
                           config.hostnames[r] == config.hostnames[rank_]);
    }
    std::random_device random;
    for (uint32_t& t : token_) t = random();
    thread_ = std::thread([this] { Loop(); });
  }

  ~TcpPeerChannel() override {
    Abort(Aborted("the point-to-point channel was closed"));
    // A goodbye on every connection: a peer with something pending then knows that this
    // process shut down and did not die.
    const PeerHeader bye{kPeerBye, 0, 0, 0, 0, 0};
    MutexLock lock(&mu_);
    for (auto& [id, c] : conns_) {
      if (c->out.empty() && !c->dead) (void)!send(c->fd(), &bye, sizeof(bye), MSG_NOSIGNAL);
      close(c->fd());
    }
    close(listener_.fd);
    close(wake_);
  }

  void Send(int peer, Key key, Meta meta, const void* data, std::string what, Done done) override {
    auto conn = Dial(peer, what);
    if (!conn.ok())
      return done(Status(conn.status().code(), what + ": " + conn.status().message()));
    Effects e;
    {
      MutexLock lock(&mu_);
      if (Status s = Refused(peer); !s.ok()) {
        e.done.emplace_back(std::move(done), Status(s.code(), what + ": " + s.message()));
      } else {
        match_.Send(peer, key, std::move(what), std::move(done));
        PeerOut o;
        o.header = PeerHeader{kPeerData, key.set,   key.tag, static_cast<int32_t>(meta.dtype),
                              key.seq,   meta.bytes};
        o.body = static_cast<const char*>(data);
        auto c = conns_.find(conn.value());
        if (c != conns_.end() && c->second->cross_memory &&
            meta.bytes >= options_.cross_memory_bytes) {  // the receiver reads it from here
          const PeerMemory at{getpid(), reinterpret_cast<uint64_t>(data), meta.bytes};
          o.header.kind = kPeerDataAt;
          o.header.bytes = sizeof(at);
          o.text.assign(reinterpret_cast<const char*>(&at), sizeof(at));
        }
        Queue(conn.value(), std::move(o), &e);
      }
    }
    Run(&e);
  }

  void SendRefusal(int peer, Key key, const Status& why) override {
    auto conn = Dial(peer, "refusal");
    if (!conn.ok()) return;  // the peer is gone: nothing waits for the refusal
    Effects e;
    {
      MutexLock lock(&mu_);
      Queue(conn.value(), Text(kPeerRefusal, key, why), &e);
    }
    Run(&e);
  }

  void Recv(int peer, Key key, Meta meta, void* out, std::string what, Done done) override {
    Effects e;
    std::unique_ptr<char[]> data;
    PeerMatch::Take take;
    PeerMemory at{};
    std::string named = what;
    {
      MutexLock lock(&mu_);
      if (!aborted_.ok()) {
        e.done.emplace_back(std::move(done),
                            Status(aborted_.code(), what + ": " + aborted_.message()));
      } else {
        match_.Recv(peer, key, meta, out, std::move(what), std::move(done), &e, &data, &take);
        auto parked = parked_.find({peer, key});
        if (parked != parked_.end()) {
          at = parked->second;
          parked_.erase(parked);
        }
        Answer(&e);
        for (int id : e.redirects) {  // its body is arriving: the rest can go straight to out
          auto it = conns_.find(id);
          if (it != conns_.end()) it->second->RedirectSoon();
        }
        e.redirects.clear();
      }
    }
    if (data) std::memcpy(out, data.get(), static_cast<size_t>(meta.bytes));  // it had arrived
    if (take.done) TakeParked(peer, key, at, static_cast<char*>(out), named, &take, &e);
    Run(&e);
  }

  // A recv took a message parked in the sender's memory: reads it, then answers the sender.
  void TakeParked(int peer, const Key& key, const PeerMemory& at, char* out,
                  const std::string& what, PeerMatch::Take* take, PeerMatch::Effects* e) {
    const std::string why = ReadPeerMemory(at, out);
    const Status s =
        why.empty() ? Status::Ok()
                    : PeerFailure(what + ": " + Named(peer) +
                                  " exited or died: its memory could not be read (" + why + ")");
    if (s.ok()) cross_memory_reads_.fetch_add(1, std::memory_order_relaxed);
    {
      MutexLock lock(&mu_);
      e->answers.push_back({take->conn, key, s});
      Answer(e);
    }
    e->done.emplace_back(std::move(take->done), s);
  }

  void RefuseRecv(int peer, Key key, const Status& why) override {
    Effects e;
    {
      MutexLock lock(&mu_);
      if (aborted_.ok()) match_.RefuseRecv(peer, key, why, &e);
      parked_.erase({peer, key});
      Answer(&e);
    }
    Run(&e);
  }

  int64_t cross_memory_reads() const override {
    return cross_memory_reads_.load(std::memory_order_relaxed);
  }

  void Abort(const Status& why) override {
    {
      MutexLock lock(&mu_);
      if (aborted_.ok()) aborted_ = why.ok() ? Aborted("aborted") : why;
    }
    Wake();
    if (std::this_thread::get_id() == thread_.get_id()) return;  // the loop ends after this
    {
      std::lock_guard<std::mutex> join(join_mu_);
      if (thread_.joinable()) thread_.join();
    }
    FailAll();
  }

 private:
  using Effects = PeerMatch::Effects;

  void Run(Effects* e) {
    if (options_.on_lost) {  // before the operations complete: the job hears it first
      for (const Status& s : e->lost) options_.on_lost(s);
    }
    e->lost.clear();
    for (auto& [done, status] : e->done) done(std::move(status));
    if (options_.on_stall) {
      for (const Status& s : e->stalls) options_.on_stall(s);
    }
    e->done.clear();
    e->stalls.clear();
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
  }

  static PeerOut Text(PeerFrameKind kind, const Key& key, const Status& s) {
    PeerOut o;
    o.text = s.message().substr(0, kPeerMaxText);
    o.header = PeerHeader{kind,    key.set,
                          key.tag, static_cast<int32_t>(s.code()),
                          key.seq, static_cast<int64_t>(o.text.size())};
    return o;
  }

  // How errors name `peer`.
  std::string Named(int peer) const {
    return options_.name ? options_.name(peer) : "rank " + std::to_string(peer);
  }

  // Why nothing more can be exchanged with `peer`; OK when it can.
  Status Refused(int peer) const REQUIRES(mu_) {
    return aborted_.ok() ? match_.Gone(peer) : aborted_;
  }

  // The connection this process sends to `peer` on, dialed on first use.
  StatusOr<int> Dial(int peer, const std::string& what) {
    std::lock_guard<std::mutex> dialing(dial_mu_);
    {
      MutexLock lock(&mu_);
      if (Status s = Refused(peer); !s.ok()) return s;
      auto it = dialed_.find(peer);
      if (it != dialed_.end()) return it->second;
    }
    const auto deadline = Clock::now() + dial_timeout_;
    auto published = store_->Get(key_prefix_ + std::to_string(peer), dial_timeout_);
    if (!published.ok()) return published.status();
    auto fd =
        DialPublished(published.value(), static_cast<uint32_t>(rank_), 0, 0, deadline,
                      what + ": rank " + std::to_string(rank_), "rank " + std::to_string(peer),
                      [this] {  // the job's verdict ends a dial to a dead peer
                        MutexLock lock(&mu_);
                        return aborted_;
                      });
    if (!fd.ok()) return fd.status();
    Effects e;
    int id;
    {
      MutexLock lock(&mu_);
      id = next_conn_++;
      auto c = std::make_unique<PeerConn>(id, fd.value(), /*accepted=*/false);
      c->peer = peer;
      dialed_[peer] = id;
      conns_[id] = std::move(c);
      if (static_cast<size_t>(peer) < same_host_.size() && same_host_[peer]) {  // may it read ours?
        const PeerMemory at{getpid(), reinterpret_cast<uint64_t>(token_), sizeof(token_)};
        PeerOut probe;
        probe.header = PeerHeader{kPeerProbe, 0, 0, 0, 0, sizeof(at) + sizeof(token_)};
        probe.text.assign(reinterpret_cast<const char*>(&at), sizeof(at));
        probe.text.append(reinterpret_cast<const char*>(token_), sizeof(token_));
        Queue(id, std::move(probe), &e);
      }
      Wake();  // the loop reads its acknowledgements
    }
    Run(&e);
    return id;
  }

  // Appends a frame; writes what the socket takes at once when nothing is ahead of it.
  void Queue(int id, PeerOut o, Effects* e) REQUIRES(mu_) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead) return;
    PeerConn* c = it->second.get();
    c->out.push_back(std::move(o));
    if (c->out.back().header.kind != kPeerData) c->out.back().body = c->out.back().text.data();
    if (c->out.size() == 1) Flush(c, e);
    if (!c->out.empty()) Wake();  // the loop waits for room
  }

  // Queues the acknowledgements the matcher decided on.
  void Answer(Effects* e) REQUIRES(mu_) {
    std::vector<Effects::Answer> answers;
    answers.swap(e->answers);
    for (const auto& a : answers) Queue(a.conn, Text(kPeerAck, a.key, a.status), e);
  }

  // Writes queued frames until the socket is full.
  void Flush(PeerConn* c, Effects* e) REQUIRES(mu_) {
    if (c->dead) return;
    if (std::string why = c->Flush(); !why.empty()) Lost(c, why, e);
  }

  // The connection failed or ended: nothing more to or from its peer. Without its goodbye
  // the peer died (or its host is unreachable): on_lost hears of it.
  void Lost(PeerConn* c, const std::string& how, Effects* e) REQUIRES(mu_) {
    c->dead = true;
    c->out.clear();
    if (c->peer < 0 || !match_.Gone(c->peer).ok()) return;
    const std::string peer = Named(c->peer);
    if (c->bye) {
      match_.Lost(c->peer, PeerFailure(peer + " shut down with this transfer pending"), e);
      return;
    }
    const Status why =
        PeerFailure(peer + " exited or died: its point-to-point connection with rank " +
                    std::to_string(rank_) + " ended (" + how + ")");
    // The job's verdict may name another culprit (this peer may have exited after its own
    // error): it has options_.lost_grace to come (Abort) before this one stands.
    suspects_.emplace(c->peer, std::make_pair(why, Clock::now() + options_.lost_grace));
  }

  void Loop() {
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
  int PollMs() {
    auto until = Clock::now() + std::chrono::milliseconds(200);
    MutexLock lock(&mu_);
    for (const auto& [peer, verdict] : suspects_) until = std::min(until, verdict.second);
    return RemainingMs(until);
  }

  void Accept() {
    for (;;) {
      const int fd = accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      TuneSocket(fd);
      MutexLock lock(&mu_);
      const int id = next_conn_++;
      conns_[id] = std::make_unique<PeerConn>(id, fd, /*accepted=*/true);
    }
  }

  // What the frames read on the loop mean (PeerConn::Reader), with the loop's effects.
  class Reader final : public PeerConn::Reader {
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
      if (h.kind == kPeerProbe) return Probed(c);
      if (h.kind == kPeerProbeOk) {
        c->cross_memory = true;
        return;
      }
      const Status said = h.code == 0 ? Status::Ok() : Status(static_cast<Code>(h.code), c->text());
      if (h.kind == kPeerBye) {
        c->bye = true;
      } else if (h.kind == kPeerAck) {
        ch_->match_.Answered(c->peer, key, said, e_);
      } else if (h.kind == kPeerRefusal) {
        ch_->match_.Refusal(c->peer, key,
                            Status(said.code(), "the sender refused it: " + c->text()), e_);
      } else {
        ch_->match_.Arrived(c->id(), c->peer, key, e_);  // answered after the read (Loop)
      }
    }

   private:
    // A kPeerDataAt: the tensor is read from the sender's memory into where its recv wants
    // it (or a buffer of its own), without the lock, as a kPeerData's body is.
    void ReadAt(PeerConn* c, const Key& key) {
      PeerMemory at{};
      std::string why;
      if (c->text().size() == sizeof(at)) {
        std::memcpy(&at, c->text().data(), sizeof(at));
        char* into;
        {
          MutexLock lock(&ch_->mu_);
          const Meta sent{static_cast<DataType>(c->header().code), at.bytes};
          if (ch_->match_.Park(c->id(), c->peer, key, sent)) {  // read when a recv takes it
            ch_->parked_[{c->peer, key}] = at;
            return;
          }
          into = ch_->match_.Arriving(c->id(), c->peer, key, sent, e_);
        }
        if (into != nullptr) why = ReadPeerMemory(at, into);
        if (into != nullptr && why.empty()) {
          ch_->cross_memory_reads_.fetch_add(1, std::memory_order_relaxed);
        }
      } else {
        why = "a malformed cross-memory frame";
      }
      MutexLock lock(&ch_->mu_);
      if (!why.empty()) return ch_->Lost(c, "reading the tensor from its memory: " + why, e_);
      ch_->match_.Arrived(c->id(), c->peer, key, e_);  // answered after the read (Loop)
    }

    // A kPeerProbe on an accepted connection: kPeerProbeOk when its token could be read.
    void Probed(PeerConn* c) REQUIRES(ch_->mu_) {
      PeerMemory at{};
      char want[sizeof(ch_->token_)] = {}, got[sizeof(want)] = {};
      if (c->text().size() != sizeof(at) + sizeof(want)) return;
      std::memcpy(&at, c->text().data(), sizeof(at));
      std::memcpy(want, c->text().data() + sizeof(at), sizeof(want));
      if (at.bytes != static_cast<int64_t>(sizeof(want)) || !ReadPeerMemory(at, got).empty() ||
          std::memcmp(want, got, sizeof(want)) != 0) {
        return;  // not this host, or the kernel refuses: the tensors come over the socket
      }
      PeerOut ok;
      ok.header = PeerHeader{kPeerProbeOk, 0, 0, 0, 0, 0};
      ch_->Queue(c->id(), std::move(ok), e_);
    }

    TcpPeerChannel* const ch_;
    Effects* const e_;
  };

  // After the loop ended: fails everything pending (with the abort's reason).
  void FailAll() {
    Effects e;
    {
      MutexLock lock(&mu_);
      match_.FailAll(aborted_.ok() ? Aborted("the point-to-point channel stopped") : aborted_, &e);
    }
    Run(&e);
  }

  KvStore* const store_;
  const std::string key_prefix_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds dial_timeout_;
  const Options options_;
  const TcpListener listener_;
  const int wake_;  // an eventfd: wakes the loop
  std::thread thread_;
  std::mutex join_mu_;
  std::mutex dial_mu_;
  char scratch_[1 << 16];        // the loop's: where a dropped body goes
  std::vector<bool> same_host_;  // per rank: cross-memory transfers may be tried
  uint32_t token_[4];            // what a peer on this host reads to show that it can
  std::atomic<int64_t> cross_memory_reads_{0};
  // Parked messages (PeerMatch::Park): where their bodies are. An entry whose arrival ended
  // otherwise (stalled, its connection closed) stays until the channel closes: a few bytes.
  std::map<std::pair<int, Key>, PeerMemory> parked_ GUARDED_BY(mu_);

  Mutex mu_;
  Status aborted_ GUARDED_BY(mu_);
  PeerMatch match_ GUARDED_BY(mu_);
  int next_conn_ GUARDED_BY(mu_) = 0;
  std::map<int, std::unique_ptr<PeerConn>> conns_ GUARDED_BY(mu_);
  std::map<int, int> dialed_ GUARDED_BY(mu_);  // peer -> connection
  // Peers whose connection ended without a goodbye: why, and when it stands.
  std::map<int, std::pair<Status, Clock::time_point>> suspects_ GUARDED_BY(mu_);
};

}  // namespace

StatusOr<std::unique_ptr<PeerChannel>> PeerChannel::Open(const BackendConfig& config,
                                                         Options options) {
  if (config.store == nullptr) return InvalidArgument("point-to-point channel: no store");
  auto listener = OpenListener(config, "point-to-point channel", 128, 0);
  if (!listener.ok()) return listener.status();
  TuneSocket(listener.value().fd);  // non-blocking accept
  Status s = config.store->Set(config.key_prefix + std::to_string(config.rank),
                               listener.value().published);
  const int wake = s.ok() ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
  if (wake < 0) {
    close(listener.value().fd);
    return s.ok() ? Internal(std::string("eventfd: ") + strerror(errno)) : s;
  }
  return std::unique_ptr<PeerChannel>(
      new TcpPeerChannel(config, std::move(options), std::move(listener).value(), wake));
}

}  // namespace hora
