// The TCP mailbox (collectives/mailbox.h), one connection per pair of peers from ConnectMesh
// (collectives/tcp_mesh.h). Messages are framed by a 4-byte length.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/mailbox.h"
#include "collectives/tcp_mesh.h"
#include "common/mutex.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;

class TcpMailbox : public Mailbox {
 public:
  TcpMailbox(int rank, int size, std::chrono::milliseconds timeout, std::vector<bool> linked)
      : rank_(rank), size_(size), timeout_(timeout), peers_(size), linked_(std::move(linked)) {
    abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~TcpMailbox() override {
    for (Peer& p : peers_) {
      if (p.fd >= 0) close(p.fd);
    }
    if (abort_fd_ >= 0) close(abort_fd_);
  }

  Status Connect(const BackendConfig& config) {
    MeshSpec spec;
    spec.key_prefix = config.key_prefix + "mailbox/";
    spec.linked = linked_;
    spec.what = "mailbox";
    auto fds = ConnectMesh(config, spec);
    if (!fds.ok()) return fds.status();
    for (int m = 0; m < size_; ++m) {
      if (!fds.value()[m].empty()) peers_[m].fd = fds.value()[m][0];
    }
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Post(const void* data, size_t bytes) override { return Send(nullptr, data, bytes); }

  Status PostTo(const std::vector<int>& members, const void* data, size_t bytes) override {
    for (int m : members) {
      if (m < 0 || m >= size_ || m == rank_ || !linked_[static_cast<size_t>(m)]) {
        return InvalidArgument("mailbox: member " + std::to_string(rank_) + " cannot post to " +
                               std::to_string(m) + " (not one of its peers among members 0.." +
                               std::to_string(size_ - 1) + ")");
      }
    }
    return Send(&members, data, bytes);
  }

  Status Read(const std::function<void(int, const char*, size_t)>& fn) override {
    // One poll says which connections hold bytes: a waiting thread reads often (on every
    // look at the board while it yields), and a recv per member would be n - 1 system calls
    // each time, most of them finding nothing.
    readable_.clear();
    polled_.clear();
    for (int m = 0; m < size_; ++m) {
      const Peer& p = peers_[m];
      if (m != rank_ && p.fd >= 0 && !p.closed.load(std::memory_order_acquire)) {
        readable_.push_back({p.fd, POLLIN, 0});
        polled_.push_back(m);
      }
    }
    if (!readable_.empty() && poll(readable_.data(), readable_.size(), 0) > 0) {
      for (size_t i = 0; i < readable_.size(); ++i) {
        if (readable_[i].revents != 0) Fill(&peers_[polled_[i]]);
      }
    }
    Status status;
    for (int m = 0; m < size_; ++m) {
      Peer& p = peers_[m];
      if (m == rank_ || p.fd < 0) continue;
      // Complete frames, in order.
      while (p.end - p.start >= sizeof(uint32_t)) {
        uint32_t length = 0;
        memcpy(&length, p.in.data() + p.start, sizeof(length));
        if (p.end - p.start - sizeof(length) < length) break;
        fn(m, p.in.data() + p.start + sizeof(length), length);
        p.start += sizeof(length) + length;
      }
      if (p.start == p.end) p.start = p.end = 0;
      if (p.closed.load(std::memory_order_acquire) && status.ok()) {
        status = PeerFailure("mailbox: the connection to member " + std::to_string(m) + " ended (" +
                             p.why + ")");
      }
    }
    return status;
  }

  bool Ended(int member) const override {
    return member != rank_ && peers_[member].closed.load(std::memory_order_acquire) &&
           peers_[member].start == peers_[member].end;
  }

  bool Await(int64_t timeout_us, int wake_fd) override {
    std::vector<pollfd> fds;
    fds.reserve(size_ + 1);
    for (int m = 0; m < size_; ++m) {
      const Peer& p = peers_[m];
      if (m != rank_ && p.fd >= 0 && !p.closed.load(std::memory_order_acquire)) {
        fds.push_back({p.fd, POLLIN, 0});
      }
    }
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({abort_fd_, POLLIN, 0});
    timespec ts{static_cast<time_t>(timeout_us / 1000000),
                static_cast<long>((timeout_us % 1000000) * 1000)};
    return ppoll(fds.data(), fds.size(), &ts, nullptr) != 0;
  }

  void Abort(const Status& reason) override {
    {
      MutexLock lock(&abort_mu_);
      if (!aborted_.ok()) return;
      aborted_ = reason;
    }
    const uint64_t one = 1;
    (void)!write(abort_fd_, &one, sizeof(one));
    for (Peer& p : peers_) {
      if (p.fd >= 0) shutdown(p.fd, SHUT_RDWR);
    }
  }

 private:
  struct Peer {
    int fd = -1;
    std::vector<char> in;  // in[start, end): received, not yet handed out
    size_t start = 0;
    size_t end = 0;
    std::atomic<bool> closed{false};
    std::string why;  // written before closed is set
  };

  // To `members` (null: every other member).
  Status Send(const std::vector<int>* members, const void* data, size_t bytes) {
    if (bytes > kMaxMessage)
      return InvalidArgument("mailbox: message of " + std::to_string(bytes) + " bytes");
    MutexLock lock(&send_mu_);
    if (Status a = AbortReason(); !a.ok()) return a;
    uint32_t length = static_cast<uint32_t>(bytes);
    const Clock::time_point deadline = Clock::now() + timeout_;
    const size_t count = members != nullptr ? members->size() : static_cast<size_t>(size_);
    for (size_t i = 0; i < count; ++i) {
      const int m = members != nullptr ? (*members)[i] : static_cast<int>(i);
      Peer& p = peers_[m];
      if (m == rank_ || p.fd < 0 || p.closed.load(std::memory_order_acquire)) continue;
      iovec iov[2] = {{&length, sizeof(length)}, {const_cast<void*>(data), bytes}};
      if (!SendAll(p.fd, iov, deadline)) {
        if (Status a = AbortReason(); !a.ok()) return a;
        return DeadlineExceeded("mailbox: member " + std::to_string(m) +
                                " took no message from member " + std::to_string(rank_) + " for " +
                                std::to_string(timeout_.count()) + " ms, or its connection failed");
      }
    }
    return Status::Ok();
  }

  Status AbortReason() {
    MutexLock lock(&abort_mu_);
    return aborted_;
  }

  bool SendAll(int fd, iovec* iov, Clock::time_point deadline) {
    int count = 2;
    while (count > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
        pollfd p[2] = {{fd, POLLOUT, 0}, {abort_fd_, POLLIN, 0}};
        if (poll(p, 2, RemainingMs(deadline)) <= 0 || (p[1].revents & POLLIN) != 0) return false;
        continue;
      }
      size_t sent = static_cast<size_t>(n);
      while (count > 0 && sent >= iov[0].iov_len) {
        sent -= iov[0].iov_len;
        ++iov;
        --count;
      }
      if (count > 0) {
        iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + sent;
        iov[0].iov_len -= sent;
      }
    }
    return true;
  }

  // Appends what the socket holds to p->in (non-blocking; one recv when it holds less than
  // the room); marks the peer closed at EOF or an error.
  void Fill(Peer* p) {
    constexpr size_t kChunk = 64 * 1024;
    for (;;) {
      if (p->in.size() - p->end < kChunk) {  // room for a chunk: move the unread part down
        if (p->start > 0) {
          memmove(p->in.data(), p->in.data() + p->start, p->end - p->start);
          p->end -= p->start;
          p->start = 0;
        }
        if (p->in.size() - p->end < kChunk) p->in.resize(p->end + 2 * kChunk);
      }
      const size_t room = p->in.size() - p->end;
      const ssize_t n = recv(p->fd, p->in.data() + p->end, room, MSG_DONTWAIT);
      if (n > 0) {
        p->end += static_cast<size_t>(n);
        if (static_cast<size_t>(n) < room) return;  // drained: the next Read polls again
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      p->why = n == 0 ? "closed by the peer" : strerror(errno);
      p->closed.store(true, std::memory_order_release);
      return;
    }
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<Peer> peers_;
  const std::vector<bool> linked_;  // by member: a peer (connected)
  std::vector<pollfd> readable_;    // Read's scratch (one reader at a time): the open
  std::vector<int> polled_;         // connections and their members
  int abort_fd_ = -1;
  Mutex send_mu_;
  Mutex abort_mu_;
  Status aborted_ GUARDED_BY(abort_mu_);
};

}  // namespace

StatusOr<std::unique_ptr<Mailbox>> CreateMailbox(const BackendConfig& config,
                                                 const std::vector<int>& peers) {
  if (config.store == nullptr) return InvalidArgument("mailbox: no store");
  std::vector<bool> linked(static_cast<size_t>(config.size()), peers.empty());
  for (int m : peers) {
    if (m < 0 || m >= config.size() || m == config.rank) {
      return InvalidArgument("mailbox: member " + std::to_string(config.rank) +
                             " cannot take member " + std::to_string(m) + " for a peer");
    }
    linked[static_cast<size_t>(m)] = true;
  }
  linked[static_cast<size_t>(config.rank)] = false;
  auto box =
      std::make_unique<TcpMailbox>(config.rank, config.size(), config.timeout, std::move(linked));
  Status s = box->Connect(config);
  if (!s.ok()) return s;
  return std::unique_ptr<Mailbox>(std::move(box));
}

}  // namespace hora
