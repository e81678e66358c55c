// PeerChannel over TCP (peer_channel.h): one listening socket, one connection per direction
// of a pair, dialed by the sender on its first message; one thread reads every connection
// and writes what a caller could not write at once.
//
// A frame is a Header and `bytes` of body. The sender writes kData (body: the tensor) or
// kRefusal (body: why); the receiver answers each kData on the same connection with kAck
// (code 0, or the refusal's code and text) once a recv matched it.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/peer_channel.h"
#include "collectives/peer_match.h"
#include "collectives/tcp_mesh.h"
#include "common/mutex.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;

enum Kind : uint32_t { kData = 1, kRefusal = 2, kAck = 3, kBye = 4 };

struct Header {
  uint32_t kind;
  int32_t set;
  int32_t tag;
  int32_t code;  // kData: the dtype; kAck, kRefusal: the status code (0 = OK)
  int64_t seq;
  int64_t bytes;  // the body's size
};
constexpr int64_t kMaxText = 1 << 16;

struct Out {
  Header header;
  const char* body = nullptr;  // kData: the sender's buffer; else text.data()
  std::string text;
  size_t sent = 0;  // of header and body
};

struct Conn {
  int id = -1;
  int fd = -1;
  int peer = -1;  // -1 until an accepted connection's hello
  // Under the channel's mutex.
  std::deque<Out> out;
  bool dead = false;
  bool bye = false;  // the peer closed its channel (the loop's)
  // The channel thread's alone: the frame being read.
  enum class In { kHello, kHeader, kBody } in = In::kHeader;
  char head[sizeof(Header)];
  size_t got = 0;
  Header header{};
  char* dest = nullptr;  // where the body goes (a recv's output, an arrival, text); null: dropped
  size_t left = 0;
  std::string text;
};

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
    thread_ = std::thread([this] { Loop(); });
  }

  ~TcpPeerChannel() override {
    Abort(Aborted("the point-to-point channel was closed"));
    // A goodbye on every connection: a peer with something pending then knows that this
    // process shut down and did not die.
    const Header bye{kBye, 0, 0, 0, 0, 0};
    MutexLock lock(&mu_);
    for (auto& [id, c] : conns_) {
      if (c->out.empty() && !c->dead) (void)!send(c->fd, &bye, sizeof(bye), MSG_NOSIGNAL);
      close(c->fd);
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
        Out o;
        o.header =
            Header{kData, key.set, key.tag, static_cast<int32_t>(meta.dtype), key.seq, meta.bytes};
        o.body = static_cast<const char*>(data);
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
      Queue(conn.value(), Text(kRefusal, key, why), &e);
    }
    Run(&e);
  }

  void Recv(int peer, Key key, Meta meta, void* out, std::string what, Done done) override {
    Effects e;
    std::string data;
    {
      MutexLock lock(&mu_);
      if (!aborted_.ok()) {
        e.done.emplace_back(std::move(done),
                            Status(aborted_.code(), what + ": " + aborted_.message()));
      } else {
        match_.Recv(peer, key, meta, out, std::move(what), std::move(done), &e, &data);
        Answer(&e);
      }
    }
    if (!data.empty()) std::memcpy(out, data.data(), data.size());  // it had arrived
    Run(&e);
  }

  void RefuseRecv(int peer, Key key, const Status& why) override {
    Effects e;
    {
      MutexLock lock(&mu_);
      if (aborted_.ok()) match_.RefuseRecv(peer, key, why, &e);
      Answer(&e);
    }
    Run(&e);
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

  static Out Text(Kind kind, const Key& key, const Status& s) {
    Out o;
    o.text = s.message().substr(0, kMaxText);
    o.header = Header{kind,    key.set,
                      key.tag, static_cast<int32_t>(s.code()),
                      key.seq, static_cast<int64_t>(o.text.size())};
    return o;
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
                      what + ": rank " + std::to_string(rank_), "rank " + std::to_string(peer));
    if (!fd.ok()) return fd.status();
    MutexLock lock(&mu_);
    auto c = std::make_unique<Conn>();
    c->id = next_conn_++;
    c->fd = fd.value();
    c->peer = peer;
    dialed_[peer] = c->id;
    const int id = c->id;
    conns_[id] = std::move(c);
    Wake();  // the loop reads its acknowledgements
    return id;
  }

  // Appends a frame; writes what the socket takes at once when nothing is ahead of it.
  void Queue(int id, Out o, Effects* e) REQUIRES(mu_) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead) return;
    Conn* c = it->second.get();
    c->out.push_back(std::move(o));
    if (c->out.back().header.kind != kData) c->out.back().body = c->out.back().text.data();
    if (c->out.size() == 1) Flush(c, e);
    if (!c->out.empty()) Wake();  // the loop waits for room
  }

  // Queues the acknowledgements the matcher decided on.
  void Answer(Effects* e) REQUIRES(mu_) {
    std::vector<Effects::Answer> answers;
    answers.swap(e->answers);
    for (const auto& a : answers) Queue(a.conn, Text(kAck, a.key, a.status), e);
  }

  // Writes queued frames until the socket is full.
  void Flush(Conn* c, Effects* e) REQUIRES(mu_) {
    while (!c->out.empty() && !c->dead) {
      Out& o = c->out.front();
      const size_t total = sizeof(Header) + static_cast<size_t>(o.header.bytes);
      iovec v[2];
      int n = 0;
      if (o.sent < sizeof(Header)) {
        v[n++] = {reinterpret_cast<char*>(&o.header) + o.sent, sizeof(Header) - o.sent};
        v[n++] = {const_cast<char*>(o.body), static_cast<size_t>(o.header.bytes)};
      } else {
        v[n++] = {const_cast<char*>(o.body) + (o.sent - sizeof(Header)), total - o.sent};
      }
      msghdr m{};
      m.msg_iov = v;
      m.msg_iovlen = static_cast<size_t>(n);
      const ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (w < 0) {
        Lost(c, std::string("writing to it failed: ") + strerror(errno), e);
        return;
      }
      o.sent += static_cast<size_t>(w);
      if (o.sent == total) c->out.pop_front();
    }
  }

  // The connection failed or ended: nothing more to or from its peer. Without its goodbye
  // the peer died (or its host is unreachable): on_lost hears of it.
  void Lost(Conn* c, const std::string& how, Effects* e) REQUIRES(mu_) {
    c->dead = true;
    c->out.clear();
    if (c->peer < 0 || !match_.Gone(c->peer).ok()) return;
    const std::string peer =
        options_.name ? options_.name(c->peer) : "rank " + std::to_string(c->peer);
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
    auto next_check = Clock::now();
    for (;;) {
      fds.assign({pollfd{listener_.fd, POLLIN, 0}, pollfd{wake_, POLLIN, 0}});
      ids.assign({-1, -1});
      {
        MutexLock lock(&mu_);
        if (!aborted_.ok()) break;
        for (auto it = conns_.begin(); it != conns_.end();) {
          Conn* c = it->second.get();
          if (c->dead) {
            match_.Closed(c->id, Refused(c->peer), &e);
            close(c->fd);
            it = conns_.erase(it);
            continue;
          }
          fds.push_back(
              pollfd{c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
          ids.push_back(c->id);
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
        Conn* c = it->second.get();
        if (fds[i].revents & POLLOUT) Flush(c, &e);
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          lock.Unlock();  // reading writes outputs without the lock
          Read(c, &e);
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
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->in = Conn::In::kHello;
      MutexLock lock(&mu_);
      c->id = next_conn_++;
      const int id = c->id;
      conns_[id] = std::move(c);
    }
  }

  // Reads what the connection has; the only reader of every connection.
  void Read(Conn* c, Effects* e) {
    for (;;) {
      char* into;
      size_t want;
      if (c->in == Conn::In::kBody) {
        into = c->dest != nullptr ? c->dest : scratch_;
        want = c->dest != nullptr ? c->left : std::min(c->left, sizeof(scratch_));
      } else {
        const size_t need = c->in == Conn::In::kHello ? sizeof(TcpHello) : sizeof(Header);
        into = c->head + c->got;
        want = need - c->got;
      }
      const ssize_t r = recv(c->fd, into, want, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (r <= 0) {
        MutexLock lock(&mu_);
        Lost(c, r == 0 ? "closed" : std::string("reading failed: ") + strerror(errno), e);
        return;
      }
      if (c->in == Conn::In::kBody) {
        if (c->dest != nullptr) c->dest += r;
        c->left -= static_cast<size_t>(r);
        if (c->left == 0) BodyDone(c, e);
        continue;
      }
      c->got += static_cast<size_t>(r);
      if (c->in == Conn::In::kHello && c->got == sizeof(TcpHello)) {
        TcpHello hello;
        std::memcpy(&hello, c->head, sizeof(hello));
        MutexLock lock(&mu_);
        if (hello.token != listener_.token || hello.rank >= static_cast<uint32_t>(size_) ||
            static_cast<int>(hello.rank) == rank_) {
          c->dead = true;  // not one of ours
          return;
        }
        c->peer = static_cast<int>(hello.rank);
        c->in = Conn::In::kHeader;
        c->got = 0;
      } else if (c->in == Conn::In::kHeader && c->got == sizeof(Header)) {
        std::memcpy(&c->header, c->head, sizeof(Header));
        c->got = 0;
        if (!HeaderDone(c, e)) return;
      }
    }
  }

  // Decides where the body goes. False when the frame is malformed (the connection is lost).
  bool HeaderDone(Conn* c, Effects* e) {
    const Header& h = c->header;
    {
      MutexLock lock(&mu_);
      if (h.bytes < 0 || (h.kind != kData && h.bytes > kMaxText) || h.kind < kData ||
          h.kind > kBye) {
        Lost(c, "it sent a malformed frame", e);
        return false;
      }
      c->in = Conn::In::kBody;
      c->left = static_cast<size_t>(h.bytes);
      if (h.kind != kData) {
        c->text.resize(c->left);
        c->dest = c->text.data();
      } else {
        c->dest = match_.Arriving(c->id, c->peer, Key{h.set, h.tag, h.seq},
                                  Meta{static_cast<DataType>(h.code), h.bytes}, e);
      }
    }
    if (c->left == 0) BodyDone(c, e);
    return true;
  }

  void BodyDone(Conn* c, Effects* e) {
    const Header& h = c->header;
    const Key key{h.set, h.tag, h.seq};
    c->in = Conn::In::kHeader;
    MutexLock lock(&mu_);
    const Status said = h.code == 0 ? Status::Ok() : Status(static_cast<Code>(h.code), c->text);
    if (h.kind == kBye) {
      c->bye = true;
    } else if (h.kind == kAck) {
      match_.Answered(c->peer, key, said, e);
    } else if (h.kind == kRefusal) {
      match_.Refusal(c->peer, key, Status(said.code(), "the sender refused it: " + c->text), e);
    } else {
      match_.Arrived(c->id, c->peer, key, e);
      Answer(e);
    }
  }

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
  char scratch_[1 << 16];  // the loop's: where a dropped body goes

  Mutex mu_;
  Status aborted_ GUARDED_BY(mu_);
  PeerMatch match_ GUARDED_BY(mu_);
  int next_conn_ GUARDED_BY(mu_) = 0;
  std::map<int, std::unique_ptr<Conn>> conns_ GUARDED_BY(mu_);
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
