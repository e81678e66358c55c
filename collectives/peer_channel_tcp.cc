// TcpPeerChannel's calls and its connections' writing side (peer_channel_tcp.h).
#include "collectives/peer_channel_tcp.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace hora {

TcpPeerChannel::TcpPeerChannel(const BackendConfig& config, Options options, TcpListener listener,
                               int wake)
    : store_(config.store),
      key_prefix_(config.key_prefix),
      rank_(config.rank),
      size_(config.size()),
      dial_timeout_(config.timeout),
      options_(std::move(options)),
      listener_(std::move(listener)),
      wake_(wake),
      cross_(config, options_.cross_memory_bytes),
      match_(config.rank) {
  thread_ = std::thread([this] { Loop(); });
}

TcpPeerChannel::~TcpPeerChannel() {
  Abort(Aborted("the point-to-point channel was closed"));
  // A goodbye on every connection: a peer with something pending then knows that this
  // process shut down and did not die, and after which error of its own (not a shutdown's).
  MutexLock lock(&mu_);
  const std::string why =
      aborted_.code() == Code::kAborted ? "" : aborted_.message().substr(0, kPeerMaxText);
  const PeerHeader header{kPeerBye, 0, 0, 0, 0, static_cast<int64_t>(why.size())};
  std::string bye(reinterpret_cast<const char*>(&header), sizeof(header));
  bye += why;
  for (auto& [id, c] : conns_) {
    if (c->out.empty() && !c->dead) (void)!send(c->fd(), bye.data(), bye.size(), MSG_NOSIGNAL);
    close(c->fd());
  }
  close(listener_.fd);
  close(wake_);
}

void TcpPeerChannel::Send(int peer, Key key, Meta meta, const void* data, std::string what,
                          Done done) {
  auto conn = Dial(peer, what);
  if (!conn.ok()) return done(Status(conn.status().code(), what + ": " + conn.status().message()));
  Effects e;
  {
    MutexLock lock(&mu_);
    if (Status s = Refused(peer); !s.ok()) {
      e.done.emplace_back(std::move(done), Status(s.code(), what + ": " + s.message()));
    } else {
      PeerOut o;
      o.header = PeerHeader{kPeerData, key.set,   key.tag, static_cast<int32_t>(meta.dtype),
                            key.seq,   meta.bytes};
      o.body = static_cast<const char*>(data);
      auto c = conns_.find(conn.value());  // the receiver may read it from here
      if (auto* live =
              cross_.Describe(c != conns_.end() && c->second->cross_memory, data, meta.bytes, &o)) {
        done = [live, done = std::move(done)](Status s) {
          PeerCrossMemory::Release(live);
          done(std::move(s));
        };
      }
      match_.Send(peer, key, std::move(what), std::move(done));
      Queue(conn.value(), std::move(o), &e);
    }
  }
  Run(&e);
}

void TcpPeerChannel::SendRefusal(int peer, Key key, const Status& why) {
  auto conn = Dial(peer, "refusal");
  if (!conn.ok()) return;  // the peer is gone: nothing waits for the refusal
  Effects e;
  {
    MutexLock lock(&mu_);
    Queue(conn.value(), Text(kPeerRefusal, key, why), &e);
  }
  Run(&e);
}

void TcpPeerChannel::Recv(int peer, Key key, Meta meta, void* out, std::string what, Done done) {
  Effects e;
  std::unique_ptr<char[]> data;
  PeerMatch::Take take;
  PeerTensorAt at{};
  {
    MutexLock lock(&mu_);
    if (!aborted_.ok()) {
      e.done.emplace_back(std::move(done),
                          Status(aborted_.code(), what + ": " + aborted_.message()));
    } else {
      match_.Recv(peer, key, meta, out, std::move(what), std::move(done), &e, &data, &take);
      if (take.done) cross_.Unpark(peer, key, &at);
      Answer(&e);
      for (int id : e.redirects) {  // its body is arriving: the rest can go straight to out
        auto it = conns_.find(id);
        if (it != conns_.end()) it->second->RedirectSoon();
      }
      e.redirects.clear();
    }
  }
  if (data) std::memcpy(out, data.get(), static_cast<size_t>(meta.bytes));  // it had arrived
  if (take.done) TakeParked(peer, key, at, static_cast<char*>(out), &take, &e);
  Run(&e);
}

// A recv took a message parked in the sender's memory: reads it, then answers the sender.
// A read that fails loses the sender as its connection's end would (Lost): the recv fails
// when that stands, after a grace in which the job's verdict may name another culprit.
void TcpPeerChannel::TakeParked(int peer, const Key& key, const PeerTensorAt& at, char* out,
                                PeerMatch::Take* take, PeerMatch::Effects* e) {
  const std::string why = cross_.Read(at, out);
  MutexLock lock(&mu_);
  if (why.empty()) {
    e->answers.push_back({take->conn, key, Status::Ok()});
    Answer(e);
    e->done.emplace_back(std::move(take->done), Status::Ok());
  } else if (!aborted_.ok()) {
    e->done.emplace_back(std::move(take->done),
                         Status(aborted_.code(), take->what + ": " + aborted_.message()));
  } else {
    auto c = conns_.find(take->conn);
    if (c != conns_.end()) Lost(c->second.get(), "reading the tensor from its memory: " + why, e);
    match_.Unread(peer, key, std::move(*take), e);
    Wake();  // the loop keeps the suspect's time
  }
}

void TcpPeerChannel::RefuseRecv(int peer, Key key, const Status& why) {
  Effects e;
  {
    MutexLock lock(&mu_);
    if (aborted_.ok()) match_.RefuseRecv(peer, key, why, &e);
    PeerTensorAt dropped;
    (void)cross_.Unpark(peer, key, &dropped);
    Answer(&e);
  }
  Run(&e);
}

void TcpPeerChannel::Abort(const Status& why) {
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

void TcpPeerChannel::Run(Effects* e) {
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

void TcpPeerChannel::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_, &one, sizeof(one));
}

PeerOut TcpPeerChannel::Text(PeerFrameKind kind, const Key& key, const Status& s) {
  PeerOut o;
  o.text = s.message().substr(0, kPeerMaxText);
  o.header = PeerHeader{kind,    key.set,
                        key.tag, static_cast<int32_t>(s.code()),
                        key.seq, static_cast<int64_t>(o.text.size())};
  return o;
}

// How errors name `peer`.
std::string TcpPeerChannel::Named(int peer) const {
  return options_.name ? options_.name(peer) : "rank " + std::to_string(peer);
}

// Why nothing more can be exchanged with `peer`; OK when it can.
Status TcpPeerChannel::Refused(int peer) const {
  return aborted_.ok() ? match_.Gone(peer) : aborted_;
}

// The connection this process sends to `peer` on, dialed on first use.
StatusOr<int> TcpPeerChannel::Dial(int peer, const std::string& what) {
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
  auto fd = DialPublished(published.value(), static_cast<uint32_t>(rank_), 0, 0, deadline,
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
    if (cross_.Probes(peer)) Queue(id, cross_.Probe(), &e);  // may it read our memory?
    Wake();                                                  // the loop reads its acknowledgements
  }
  Run(&e);
  return id;
}

// Appends a frame; writes what the socket takes at once when nothing is ahead of it.
void TcpPeerChannel::Queue(int id, PeerOut o, Effects* e) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->dead) return;
  PeerConn* c = it->second.get();
  c->out.push_back(std::move(o));
  if (c->out.back().header.kind != kPeerData) c->out.back().body = c->out.back().text.data();
  if (c->out.size() == 1) Flush(c, e);
  if (!c->out.empty()) Wake();  // the loop waits for room
}

// Queues the acknowledgements the matcher decided on.
void TcpPeerChannel::Answer(Effects* e) {
  std::vector<Effects::Answer> answers;
  answers.swap(e->answers);
  for (const auto& a : answers) Queue(a.conn, Text(kPeerAck, a.key, a.status), e);
}

// Writes queued frames until the socket is full.
void TcpPeerChannel::Flush(PeerConn* c, Effects* e) {
  if (c->dead) return;
  if (std::string why = c->Flush(); !why.empty()) Lost(c, why, e);
}

// The connection failed or ended: nothing more to or from its peer. Without its goodbye
// the peer died (or its host is unreachable): on_lost hears of it.
void TcpPeerChannel::Lost(PeerConn* c, const std::string& how, Effects* e) {
  c->dead = true;
  c->out.clear();
  if (c->peer < 0 || !match_.Gone(c->peer).ok()) return;
  const std::string peer = Named(c->peer);
  if (c->bye) {
    const std::string after = c->bye_why.empty() ? "" : ", after its error: " + c->bye_why;
    match_.Lost(c->peer, PeerFailure(peer + " shut down with this transfer pending" + after), e);
    return;
  }
  const Status why =
      PeerFailure(peer + " exited or died: its point-to-point connection with rank " +
                  std::to_string(rank_) + " ended (" + how + ")");
  // The job's verdict may name another culprit (this peer may have exited after its own
  // error): it has options_.lost_grace to come (Abort) before this one stands.
  suspects_.emplace(c->peer, std::make_pair(why, Clock::now() + options_.lost_grace));
}

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
