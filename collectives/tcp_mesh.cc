// ConnectMesh (tcp_mesh.h): listen, publish, dial the members below, accept the members above.
#include "collectives/tcp_mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "collectives/address.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;

bool WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, RemainingMs(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Reads or writes exactly `bytes` of a non-blocking fd until the deadline.
bool Move(int fd, void* data, size_t bytes, bool write, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = write ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !write) return false;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (!WaitFd(fd, write ? POLLOUT : POLLIN, deadline)) return false;
  }
  return true;
}

void SetBuffers(int fd, int bytes) {
  if (bytes <= 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

class MeshBuilder {
 public:
  MeshBuilder(const BackendConfig& config, const MeshSpec& spec)
      : config_(config),
        spec_(spec),
        rank_(config.rank),
        size_(config.size()),
        deadline_(Clock::now() + config.timeout),
        fds_(static_cast<size_t>(config.size())) {}

  StatusOr<std::vector<std::vector<int>>> Run() {
    auto listener =
        OpenListener(config_, spec_.what, std::max(16, size_ * spec_.channels), spec_.buffer_bytes);
    if (!listener.ok()) return listener.status();
    Status s = Build(listener.value());
    close(listener.value().fd);
    if (!s.ok()) {
      CloseMesh(&fds_);
      return s;
    }
    return std::move(fds_);
  }

 private:
  Status Build(const TcpListener& listener) {
    HORA_RETURN_IF_ERROR(
        config_.store->Set(spec_.key_prefix + std::to_string(rank_), listener.published));
    for (int m = 0; m < rank_; ++m) {
      if (!spec_.linked[static_cast<size_t>(m)]) continue;
      auto value = config_.store->Get(spec_.key_prefix + std::to_string(m),
                                      std::chrono::milliseconds(RemainingMs(deadline_)));
      if (!value.ok()) return value.status();
      for (int c = 0; c < spec_.channels; ++c) {
        auto fd = DialPublished(value.value(), static_cast<uint32_t>(rank_),
                                static_cast<uint32_t>(c), spec_.buffer_bytes, deadline_,
                                spec_.what + ": member " + std::to_string(rank_),
                                "member " + std::to_string(m));
        if (!fd.ok()) return fd.status();
        fds_[static_cast<size_t>(m)].push_back(fd.value());
      }
    }
    return AcceptAbove(listener.fd, listener.token);
  }

  Status AcceptAbove(int listener, uint64_t token) {
    int waiting = 0;
    for (int m = rank_ + 1; m < size_; ++m) {
      if (spec_.linked[static_cast<size_t>(m)]) {
        waiting += spec_.channels;
        fds_[static_cast<size_t>(m)].assign(static_cast<size_t>(spec_.channels), -1);
      }
    }
    while (waiting > 0) {
      if (!WaitFd(listener, POLLIN, deadline_)) {
        std::string missing;
        for (int m = rank_ + 1; m < size_; ++m) {
          const auto& got = fds_[static_cast<size_t>(m)];
          if (std::find(got.begin(), got.end(), -1) != got.end()) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(m);
          }
        }
        return DeadlineExceeded(spec_.what + ": member " + std::to_string(rank_) + " waited " +
                                std::to_string(config_.timeout.count()) + " ms for " +
                                std::to_string(waiting) + " connection(s) of member(s) above it " +
                                "(" + missing + ") to connect");
      }
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      TuneSocket(fd);
      TcpHello hello{};
      const Clock::time_point hello_deadline =
          std::min(deadline_, Clock::now() + std::chrono::seconds(5));
      const bool ok = Move(fd, &hello, sizeof(hello), false, hello_deadline) &&
                      hello.token == token && hello.rank > static_cast<uint32_t>(rank_) &&
                      hello.rank < static_cast<uint32_t>(size_) && spec_.linked[hello.rank] &&
                      hello.channel < static_cast<uint32_t>(spec_.channels) &&
                      fds_[hello.rank][hello.channel] < 0;
      if (!ok) {
        close(fd);  // not one of ours (or a duplicate): keep waiting for the members
        continue;
      }
      fds_[hello.rank][hello.channel] = fd;
      --waiting;
    }
    return Status::Ok();
  }

  const BackendConfig& config_;
  const MeshSpec& spec_;
  const int rank_;
  const int size_;
  const Clock::time_point deadline_;
  std::vector<std::vector<int>> fds_;
};

}  // namespace

void TuneSocket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

StatusOr<TcpListener> OpenListener(const BackendConfig& config, const std::string& what,
                                   int backlog, int buffer_bytes) {
  StatusOr<std::string> address = BindAddress(config);
  if (!address.ok()) return address.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.value().c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument(what + ": '" + address.value() + "' is not an IPv4 address");
  }
  TcpListener l;
  l.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd < 0) return Unavailable(what + ": socket: " + strerror(errno));
  SetBuffers(l.fd, buffer_bytes);  // accepted sockets inherit the sizes
  socklen_t len = sizeof(addr);
  if (bind(l.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(l.fd, backlog) != 0 ||
      getsockname(l.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = strerror(errno);
    close(l.fd);
    return Unavailable(what + ": cannot listen on " + address.value() + ": " + why);
  }
  std::random_device random;
  l.token = (static_cast<uint64_t>(random()) << 32) ^ random();
  std::ostringstream mine;
  mine << address.value() << ' ' << ntohs(addr.sin_port) << ' ' << l.token;
  l.published = mine.str();
  return l;
}

StatusOr<int> DialPublished(const std::string& published, uint32_t rank, uint32_t channel,
                            int buffer_bytes, Clock::time_point deadline, const std::string& what,
                            const std::string& whom, const std::function<Status()>& cancelled) {
  std::istringstream in(published);
  std::string host;
  int port = 0;
  uint64_t token = 0;
  if (!(in >> host >> port >> token)) {
    return Internal(what + ": " + whom + " published '" + published + "'");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Unavailable(what + ": socket: " + strerror(errno));
    SetBuffers(fd, buffer_bytes);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      TuneSocket(fd);
      TcpHello hello{rank, channel, token};
      if (Move(fd, &hello, sizeof(hello), true, deadline)) return fd;
    }
    const std::string why = strerror(errno);
    close(fd);
    if (cancelled) {
      if (Status s = cancelled(); !s.ok()) return s;
    }
    if (Clock::now() >= deadline) {
      return Unavailable(what + " cannot connect to " + whom + " at " + host + ":" +
                         std::to_string(port) + ": " + why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1 << 30)));
}

StatusOr<std::vector<std::vector<int>>> ConnectMesh(const BackendConfig& config,
                                                    const MeshSpec& spec) {
  if (config.store == nullptr) return InvalidArgument(spec.what + ": no store");
  if (spec.channels < 1 || spec.linked.size() != static_cast<size_t>(config.size())) {
    return InvalidArgument(spec.what + ": a mesh of " + std::to_string(spec.channels) +
                           " channel(s) over " + std::to_string(spec.linked.size()) +
                           " member flags for " + std::to_string(config.size()) + " members");
  }
  return MeshBuilder(config, spec).Run();
}

void CloseMesh(std::vector<std::vector<int>>* fds) {
  for (auto& peer : *fds) {
    for (int fd : peer) {
      if (fd >= 0) close(fd);
    }
    peer.clear();
  }
}

}  // namespace hora
