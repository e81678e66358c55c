// What TCP carries between two hosts: the ceiling a cross-host data plane is measured against
// (docs/benchmarks-cross-host.md). One receiver, one sender, N parallel streams, a thread each.
//
//   tcp_limit serve --port P [--bind ADDR] [--buf-kib K]
//   tcp_limit send --to ADDR --port P [--streams N] [--mib M] [--buf-kib K] [--rounds R] [--stop]
//   tcp_limit exchange --port P (--bind ADDR | --to ADDR) [--window-kib W] [--mib M] [--rounds R]
//
// The sender connects N streams and pushes M MiB in all, split evenly, R times after one
// warm-up round; the receiver reads every stream to its end and answers with the byte count,
// so each round's time ends when the last byte is read. --buf-kib sets SO_SNDBUF/SO_RCVBUF
// (0: the kernel's autotuning). The last line, for scripts:
//
//   TCP_LIMIT streams=N mib=M rounds=R best_gbs=X median_gbs=Y
//
// `exchange` is an allreduce's traffic between two hosts: both ends (one listening on --bind,
// one connecting --to it) send M MiB and receive M MiB at once on one connection, from one
// thread (non-blocking, poll() when stalled), each sending at most W KiB beyond what it has
// received (0: no limit), as the tcp backend paces its exchanges (TcpOptions::inflight_bytes),
// and trying again for up to 300 us (yielding the core) before it sleeps in poll(), as the
// backend does (TcpOptions::spin_us).
// The buffers are M MiB each, so the memory traffic is an allreduce's of that size, not a
// cache-resident loop's. Its line: TCP_EXCHANGE window_kib=W mib=M rounds=R best_gbs=X median_gbs=Y
// (GB/s each way).
//
// GB/s = 1e9 bytes per second of payload. Written in C++ (it replaced a Python tool whose
// per-stream cost held a stream to 1.8 GB/s where this reads 2.6-2.8 on the same netns
// hosts). On a real cluster run `serve` on one node and `send` on another with the addresses
// of the NIC the job uses (and compare with iperf3 -P N).
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kChunk = 4 << 20;

struct Args {
  std::string mode, bind = "0.0.0.0", to;
  int port = 0, streams = 1, rounds = 3, buf_kib = 0, window_kib = 128;
  int64_t mib = 1024;
  bool stop = false;
};

[[noreturn]] void Die(const std::string& why) {
  fprintf(stderr, "tcp_limit: %s\n", why.c_str());
  exit(1);
}

void Tune(int fd, int buf_kib) {
  if (buf_kib <= 0) return;
  const int bytes = buf_kib << 10;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

sockaddr_in Address(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) Die("not an IPv4 address: " + host);
  return a;
}

// "best_gbs=X median_gbs=Y"
std::string Summary(std::vector<double> rates) {
  std::sort(rates.begin(), rates.end());
  const size_t m = rates.size();
  const double median = m % 2 ? rates[m / 2] : (rates[m / 2 - 1] + rates[m / 2]) / 2;
  char line[96];
  snprintf(line, sizeof(line), "best_gbs=%.2f median_gbs=%.2f", rates.back(), median);
  return line;
}

bool SendAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool RecvAll(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

void Serve(const Args& args) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  Tune(ls, args.buf_kib);
  const sockaddr_in a = Address(args.bind, args.port);
  if (bind(ls, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || listen(ls, 64) != 0) {
    Die("cannot listen on " + args.bind + ":" + std::to_string(args.port) + ": " + strerror(errno));
  }
  printf("tcp_limit: serving on %s:%d\n", args.bind.c_str(), args.port);
  fflush(stdout);
  for (;;) {  // one control connection per round: "N streams follow" (N = 0: the sender is done)
    const int ctrl = accept(ls, nullptr, nullptr);
    uint32_t n = 0;
    if (ctrl < 0 || !RecvAll(ctrl, &n, sizeof(n))) {
      if (ctrl >= 0) close(ctrl);
      continue;
    }
    n = ntohl(n);
    if (n == 0) {
      close(ctrl);
      close(ls);
      return;
    }
    std::vector<int> conns(n);
    for (int& c : conns) c = accept(ls, nullptr, nullptr);
    std::vector<uint64_t> counts(n, 0);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        std::vector<char> buf(kChunk);
        ssize_t got;
        while ((got = recv(conns[i], buf.data(), buf.size(), 0)) > 0) {
          counts[i] += static_cast<uint64_t>(got);
        }
      });
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; ++i) {
      threads[i].join();
      sum += counts[i];
      close(conns[i]);
    }
    const uint64_t wire = htobe64(sum);
    (void)SendAll(ctrl, &wire, sizeof(wire));
    close(ctrl);
  }
}

// The round's control connection; the receiver may still be starting: retried for 10 s while
// the connection is refused.
int Control(const Args& args) {
  const sockaddr_in a = Address(args.to, args.port);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0) return fd;
    close(fd);
    if (errno != ECONNREFUSED || std::chrono::steady_clock::now() > deadline) {
      Die("nothing listens on " + args.to + ":" + std::to_string(args.port) +
          " (is the other end running?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

double OneRound(const Args& args, uint64_t total) {
  const int ctrl = Control(args);
  const uint32_t n = htonl(static_cast<uint32_t>(args.streams));
  if (!SendAll(ctrl, &n, sizeof(n))) Die("the control connection failed");
  const sockaddr_in a = Address(args.to, args.port);
  std::vector<int> socks;
  for (int i = 0; i < args.streams; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    Tune(fd, args.buf_kib);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
      Die(std::string("connect: ") + strerror(errno));
    }
    socks.push_back(fd);
  }
  const std::vector<char> payload(kChunk, 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < args.streams; ++i) {
    const uint64_t mine = total / args.streams + (static_cast<uint64_t>(i) < total % args.streams);
    threads.emplace_back([&, i, mine] {
      uint64_t left = mine;
      while (left > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(left, payload.size()));
        if (!SendAll(socks[i], payload.data(), k)) break;
        left -= k;
      }
      shutdown(socks[i], SHUT_WR);
    });
  }
  for (std::thread& t : threads) t.join();
  uint64_t wire = 0;
  if (!RecvAll(ctrl, &wire, sizeof(wire))) Die("the receiver did not answer");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t got = be64toh(wire);
  for (int fd : socks) close(fd);
  close(ctrl);
  if (got != total) {
    Die("the receiver read " + std::to_string(got) + " of " + std::to_string(total) + " bytes");
  }
  return static_cast<double>(total) / seconds / 1e9;
}

void Send(const Args& args) {
  const uint64_t total = static_cast<uint64_t>(args.mib) << 20;
  std::vector<double> rates;
  for (int r = 0; r <= args.rounds; ++r) {
    const double gbs = OneRound(args, total);
    if (r == 0) continue;  // the first round warms up
    rates.push_back(gbs);
    printf("round %d: %d stream(s), %lld MiB: %.2f GB/s\n", r, args.streams,
           static_cast<long long>(args.mib), gbs);
    fflush(stdout);
  }
  if (args.stop) {
    const int ctrl = Control(args);
    const uint32_t zero = 0;
    (void)SendAll(ctrl, &zero, sizeof(zero));
    close(ctrl);
  }
  printf("TCP_LIMIT streams=%d mib=%lld rounds=%d %s\n", args.streams,
         static_cast<long long>(args.mib), args.rounds, Summary(rates).c_str());
}

// One connection, both ways at once from this thread: `total` bytes out and in, at most
// `window` bytes (0: any number) sent beyond those received. Seconds it took.
double Exchange(int fd, uint64_t total, uint64_t window, std::vector<char>* out,
                std::vector<char>* in) {
  uint64_t sent = 0, got = 0;
  const auto start = std::chrono::steady_clock::now();
  auto idle_since = start;
  while (sent < total || got < total) {
    bool moved = false;
    const uint64_t limit = window == 0 || got == total ? total : std::min(total, got + window);
    if (sent < limit) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(limit - sent, kChunk));
      const ssize_t n = send(fd, out->data() + sent, k, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<uint64_t>(n), moved = true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) Die(std::string("send: ") + strerror(errno));
    }
    if (got < total) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(total - got, kChunk));
      const ssize_t n = recv(fd, in->data() + got, k, MSG_DONTWAIT);
      if (n == 0) Die("the peer closed the connection");
      if (n > 0) got += static_cast<uint64_t>(n), moved = true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) Die(std::string("recv: ") + strerror(errno));
    }
    const auto now = std::chrono::steady_clock::now();
    if (moved) idle_since = now;
    if (now - idle_since < std::chrono::microseconds(300)) {
      sched_yield();
      continue;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (sent < limit ? POLLOUT : 0)), 0};
    poll(&p, 1, 1000);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ExchangeMode(const Args& args) {
  int fd = -1;
  if (args.to.empty()) {
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const sockaddr_in a = Address(args.bind, args.port);
    if (bind(ls, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || listen(ls, 1) != 0) {
      Die("cannot listen on " + args.bind + ":" + std::to_string(args.port));
    }
    fd = accept(ls, nullptr, nullptr);
    close(ls);
  } else {
    fd = Control(args);
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Tune(fd, args.buf_kib);
  const uint64_t total = static_cast<uint64_t>(args.mib) << 20;
  std::vector<char> out(total, 1), in(total);  // whole buffers, as an allreduce's
  std::vector<double> rates;
  for (int r = 0; r <= args.rounds; ++r) {
    const double seconds =
        Exchange(fd, total, static_cast<uint64_t>(args.window_kib) << 10, &out, &in);
    if (r > 0) rates.push_back(static_cast<double>(total) / seconds / 1e9);  // r 0: warm-up
  }
  close(fd);
  printf("TCP_EXCHANGE window_kib=%d mib=%lld rounds=%d %s\n", args.window_kib,
         static_cast<long long>(args.mib), args.rounds, Summary(rates).c_str());
}

[[noreturn]] void Usage() {
  Die("usage: tcp_limit serve --port P [--bind ADDR] [--buf-kib K] | tcp_limit send --to ADDR "
      "--port P [--streams N] [--mib M] [--rounds R] [--buf-kib K] [--stop] | tcp_limit exchange "
      "--port P (--bind ADDR | --to ADDR) [--window-kib W] [--mib M] [--rounds R]");
}

long long Int(const char* flag, const char* v, long long lo) {
  char* end = nullptr;
  const long long x = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || x < lo) {
    Die(std::string(flag) + " must be an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage();
  Args args;
  args.mode = argv[1];
  if (args.mode != "serve" && args.mode != "send" && args.mode != "exchange") Usage();
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--stop") {
      args.stop = true;
      continue;
    }
    if (i + 1 >= argc) Usage();
    const char* v = argv[++i];
    if (f == "--port") {
      args.port = static_cast<int>(Int("--port", v, 1));
    } else if (f == "--bind") {
      args.bind = v;
    } else if (f == "--to") {
      args.to = v;
    } else if (f == "--streams") {
      args.streams = static_cast<int>(Int("--streams", v, 1));
    } else if (f == "--mib") {
      args.mib = Int("--mib", v, 1);
    } else if (f == "--rounds") {
      args.rounds = static_cast<int>(Int("--rounds", v, 1));
    } else if (f == "--window-kib") {
      args.window_kib = static_cast<int>(Int("--window-kib", v, 0));
    } else if (f == "--buf-kib") {
      args.buf_kib = static_cast<int>(Int("--buf-kib", v, 0));
    } else {
      Usage();
    }
  }
  if (args.port == 0 || (args.mode == "send" && args.to.empty())) Usage();
  if (args.mode == "serve") {
    Serve(args);
  } else if (args.mode == "exchange") {
    ExchangeMode(args);
  } else {
    Send(args);
  }
  return 0;
}
