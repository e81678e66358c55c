// Modes "local" and "grpc": the real service and real clients (coordinator_scale.h).
//
// In grpc mode the service runs in a child process (this binary with --serve, started by
// fork + exec before this process creates any client), so that its CPU time can be read
// apart from the simulated ranks'. Both processes share this machine's cores; the child's CPU
// per step is what one core at rank 0 would have to provide.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "coordinator/service.h"
#include "tools/bench/coordinator_scale_ranks.h"

namespace hora {
namespace scale_bench {
namespace {

using std::chrono::milliseconds;

// The coordinator child of the grpc mode: line-oriented commands on pipes, every read bounded.
class ServiceChild {
 public:
  ~ServiceChild() { Stop(); }

  Status Start(const ScaleOptions& o, milliseconds lifetime) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return Internal("pipe failed");
    const std::string ranks = "--ranks=" + std::to_string(o.ranks);
    const std::string timeout = "--timeout_ms=" + std::to_string(lifetime.count());
    pid_ = fork();
    if (pid_ < 0) return Internal("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl(o.self_path.c_str(), o.self_path.c_str(), "--serve", ranks.c_str(), timeout.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = to_child[1];
    from_ = from_child[0];
    std::string line;
    HORA_RETURN_IF_ERROR(ReadLine(milliseconds(30000), &line));
    if (std::sscanf(line.c_str(), "port %d", &port_) != 1) {
      return Internal("the coordinator child said '" + line + "' instead of its port");
    }
    return Status::Ok();
  }

  int port() const { return port_; }

  StatusOr<double> CpuSeconds() {
    HORA_RETURN_IF_ERROR(Send("cpu\n"));
    std::string line;
    HORA_RETURN_IF_ERROR(ReadLine(milliseconds(10000), &line));
    long long ns = 0;
    if (std::sscanf(line.c_str(), "cpu %lld", &ns) != 1) {
      return Internal("the coordinator child said '" + line + "' instead of its CPU time");
    }
    return 1e-9 * static_cast<double>(ns);
  }

  // Asks the child to shut down; kills it if it has not exited within 20 s.
  void Stop() {
    if (pid_ <= 0) return;
    (void)Send("quit\n");  // a child that cannot be told is killed below
    close(to_);
    const auto deadline = Clock::now() + milliseconds(20000);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      usleep(10000);
    }
    close(from_);
    pid_ = -1;
  }

 private:
  Status Send(const std::string& s) {
    if (write(to_, s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
      return Internal("cannot write to the coordinator child");
    }
    return Status::Ok();
  }

  Status ReadLine(milliseconds timeout, std::string* line) {
    line->clear();
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        return DeadlineExceeded("the coordinator child did not answer within " +
                                std::to_string(timeout.count()) + " ms");
      }
      char c;
      if (read(from_, &c, 1) != 1) return Internal("the coordinator child exited");
      if (c == '\n') return Status::Ok();
      *line += c;
    }
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  int port_ = 0;
};

Status RunSteps(SimulatedRanks* ranks, int first, int count) {
  for (int s = first; s < first + count; ++s) HORA_RETURN_IF_ERROR(ranks->Step(s, s == 0));
  return Status::Ok();
}

}  // namespace

StatusOr<ScaleResult> RunServiceBench(const ScaleOptions& o) {
  const bool grpc = o.mode == "grpc";
  const milliseconds lifetime = o.step_timeout * (o.steps + o.warmup + 2) + milliseconds(120000);
  ServiceChild child;
  std::unique_ptr<CoordinatorService> service;
  int port = 0;
  if (grpc) {
    HORA_RETURN_IF_ERROR(child.Start(o, lifetime));
    port = child.port();
  } else {
    auto started = CoordinatorService::Start(BenchServiceConfig(o.ranks));
    if (!started.ok()) return started.status();
    service = std::move(started).value();
    port = service->port();
  }
  ScaleResult r;
  r.options = o;
  {
    SimulatedRanks ranks(o);
    HORA_RETURN_IF_ERROR(
        ranks.Connect("127.0.0.1:" + std::to_string(port), grpc ? nullptr : service->local_host()));
    HORA_RETURN_IF_ERROR(RunSteps(&ranks, 0, std::max(o.warmup, 1)));
    ranks.ResetCounters();
    double service_cpu0 = 0;
    if (grpc) {
      auto cpu = child.CpuSeconds();
      if (!cpu.ok()) return cpu.status();
      service_cpu0 = cpu.value();
    }
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    HORA_RETURN_IF_ERROR(RunSteps(&ranks, std::max(o.warmup, 1), o.steps));
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = ProcessCpuSeconds() - cpu0;
    if (grpc) {
      auto service_cpu = child.CpuSeconds();
      if (!service_cpu.ok()) return service_cpu.status();
      r.cpu_s = service_cpu.value() - service_cpu0;
      r.client_cpu_s = cpu;
    } else {
      r.cpu_s = cpu;
    }
    HORA_RETURN_IF_ERROR(ranks.CheckSameOrder());
    r.messages_in = static_cast<double>(ranks.MessagesInPerStep());
    r.bytes_in = ranks.BytesInPerStep();
    r.messages_out = ranks.messages_out() / o.steps;
    r.bytes_out = ranks.bytes_out() / o.steps;
    r.buckets = ranks.buckets() / o.steps;
    ranks.Close();
  }
  if (service) service->Shutdown("the benchmark is done", milliseconds(10000));
  child.Stop();
  return r;
}

int ServeMain(int ranks, milliseconds timeout) {
  alarm(static_cast<unsigned>(timeout.count() / 1000 + 1));  // a hard bound on the child's life
  // The answers get their own descriptor; anything else written to stdout goes to stderr.
  FILE* answers = fdopen(dup(1), "w");
  dup2(2, 1);
  auto started = CoordinatorService::Start(BenchServiceConfig(ranks));
  if (!started.ok()) {
    std::fprintf(answers, "error %s\n", started.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<CoordinatorService> service = std::move(started).value();
  std::fprintf(answers, "port %d\n", service->port());
  std::fflush(answers);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    if (std::strncmp(line, "cpu", 3) == 0) {
      std::fprintf(answers, "cpu %lld\n", static_cast<long long>(ProcessCpuSeconds() * 1e9));
      std::fflush(answers);
    } else if (std::strncmp(line, "quit", 4) == 0) {
      break;
    }
  }
  service->Shutdown("the benchmark is done", milliseconds(10000));
  return 0;
}

}  // namespace scale_bench
}  // namespace hora
