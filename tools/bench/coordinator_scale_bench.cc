// coordinator_scale_bench: how many steps per second the coordinator sustains for N simulated
// ranks x T tensors per step, and its CPU per step (coordinator_scale.h,
// docs/coordinator-scale.md).
//
//   coordinator_scale_bench [--modes=planner,local,grpc] [--ranks=64,256,1024] [--tensors=200]
//                           [--batch=runtime|N] [--steps=20] [--warmup=2] [--drivers=4] [--relay=0]
//                           [--step_timeout_ms=120000] [--max_service_ranks=1024]
//
// Prints one markdown table row per (mode, ranks). Exits 1 on any failure (a wrong plan, a
// missed deadline), never hangs. --serve is the grpc mode's child (internal).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/fd_limit.h"
#include "common/logging.h"
#include "tools/bench/coordinator_scale.h"

namespace hora {
namespace scale_bench {
namespace {

bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string Kb(double bytes) {
  if (bytes <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", bytes / 1024.0);
  return buf;
}

void PrintRow(const ScaleResult& r) {
  const ScaleOptions& o = r.options;
  char client[32] = "-";
  if (r.client_cpu_s > 0)
    std::snprintf(client, sizeof(client), "%.1f", 1e3 * r.client_cpu_s / o.steps);
  const char* relay = o.mode != "grpc" ? "-" : o.relay ? "yes" : "no";
  const std::string batch = o.batch == 0
                                ? "runtime (" + std::to_string(NoticeChunks(o).size()) + " msgs)"
                                : std::to_string(o.batch);
  std::printf("| %s | %s | %d | %d | %s | %.1f | %.2f | %.0f | %s | %.0f | %s | %.1f | %s |\n",
              o.mode.c_str(), relay, o.ranks, o.tensors, batch.c_str(), r.steps_per_s(),
              r.cpu_ms_per_step(), r.messages_in, Kb(r.bytes_in).c_str(), r.messages_out,
              Kb(r.bytes_out).c_str(), r.buckets, client);
  std::fflush(stdout);
}

struct Args {
  std::string modes = "planner,local,grpc";
  std::string ranks = "64,256,1024";
  ScaleOptions base;
  int max_service_ranks = 1024;
  bool serve = false;
  int64_t timeout_ms = 600000;  // --serve only: the child's lifetime
};

// False (after saying why) on an unknown or invalid argument.
bool ParseArgs(int argc, char** argv, Args* args) {
  ScaleOptions& base = args->base;
  base.self_path = "/proc/self/exe";
  std::string value;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--serve") == 0) {
      args->serve = true;
    } else if (Flag(a, "--modes", &value)) {
      args->modes = value;
    } else if (Flag(a, "--ranks", &value)) {
      args->ranks = value;
    } else if (Flag(a, "--tensors", &value)) {
      base.tensors = std::atoi(value.c_str());
    } else if (Flag(a, "--batch", &value)) {
      base.batch = value == "runtime" ? 0 : std::atoi(value.c_str());
      if (value != "runtime" && base.batch < 1) {
        std::fprintf(stderr,
                     "coordinator_scale_bench: --batch takes 'runtime' or a positive count, not "
                     "'%s'\n",
                     value.c_str());
        return false;
      }
    } else if (Flag(a, "--steps", &value)) {
      base.steps = std::atoi(value.c_str());
    } else if (Flag(a, "--warmup", &value)) {
      base.warmup = std::atoi(value.c_str());
    } else if (Flag(a, "--relay", &value)) {
      base.relay = value == "1";
      if (value != "0" && value != "1") {
        std::fprintf(stderr, "coordinator_scale_bench: --relay takes 0 or 1, not '%s'\n",
                     value.c_str());
        return false;
      }
    } else if (Flag(a, "--drivers", &value)) {
      base.drivers = std::atoi(value.c_str());
    } else if (Flag(a, "--step_timeout_ms", &value)) {
      base.step_timeout = std::chrono::milliseconds(std::atoll(value.c_str()));
    } else if (Flag(a, "--max_service_ranks", &value)) {
      args->max_service_ranks = std::atoi(value.c_str());
    } else if (Flag(a, "--timeout_ms", &value)) {
      args->timeout_ms = std::atoll(value.c_str());
    } else {
      std::fprintf(stderr, "coordinator_scale_bench: unknown argument '%s'\n", a);
      return false;
    }
  }
  if (base.tensors < 1 || base.steps < 1 || base.warmup < 0 || base.drivers < 1 ||
      base.step_timeout.count() < 1) {
    std::fprintf(stderr,
                 "coordinator_scale_bench: tensors, steps, drivers and "
                 "step_timeout_ms must be positive, warmup non-negative\n");
    return false;
  }
  for (const std::string& n : Split(args->ranks)) {
    if (std::atoi(n.c_str()) < 1) {
      std::fprintf(stderr, "coordinator_scale_bench: --ranks: '%s' is not a positive count\n",
                   n.c_str());
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  const ScaleOptions& base = args.base;
  SetLogLevel(spdlog::level::warn);  // the service's start and stop lines would fill the table
  // The parent holds a client connection per simulated rank, the service a connection each:
  // as a job's ranks do (runtime/engine.cc), raise the soft open-file limit for the largest.
  int most = 1;
  for (const std::string& n : Split(args.ranks)) most = std::max(most, std::atoi(n.c_str()));
  const std::string files = RaiseOpenFileLimit(OpenFilesWanted(most));
  if (!files.empty()) std::fprintf(stderr, "coordinator_scale_bench: %s\n", files.c_str());
  if (args.serve) {
    return ServeMain(std::atoi(args.ranks.c_str()), std::chrono::milliseconds(args.timeout_ms));
  }
  std::printf(
      "| mode | relay | ranks | tensors | notices/msg | steps/s | rank-0 CPU ms/step "
      "| msgs in/step | KiB in/step | msgs out/step | KiB out/step | buckets/step "
      "| client CPU ms/step |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const std::string& mode : Split(args.modes)) {
    for (const std::string& n : Split(args.ranks)) {
      ScaleOptions o = base;
      o.mode = mode;
      o.ranks = std::atoi(n.c_str());
      if (mode != "planner" && o.ranks > args.max_service_ranks) continue;
      if (mode != "planner" && mode != "local" && mode != "grpc") {
        std::fprintf(stderr, "coordinator_scale_bench: unknown mode '%s'\n", mode.c_str());
        return 2;
      }
      StatusOr<ScaleResult> r = mode == "planner" ? RunPlannerBench(o) : RunServiceBench(o);
      if (!r.ok()) {
        std::fprintf(stderr, "coordinator_scale_bench: %s, %d ranks: FAILED: %s\n", mode.c_str(),
                     o.ranks, r.status().ToString().c_str());
        ++failures;
        continue;
      }
      PrintRow(r.value());
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace scale_bench
}  // namespace hora

int main(int argc, char** argv) { return hora::scale_bench::Main(argc, argv); }
