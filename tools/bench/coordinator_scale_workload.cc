// The simulated model, CPU clocks and the plan checker of the coordinator scale benchmark.
#include <time.h>

#include <algorithm>
#include <cstdio>

#include "coordinator/client.h"
#include "tools/bench/coordinator_scale.h"

namespace hora {
namespace scale_bench {
namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

std::vector<TensorSpec> ModelTensors(int count) {
  std::vector<TensorSpec> specs(count);
  for (int t = 0; t < count; ++t) {
    TensorSpec& s = specs[t];
    char name[64];
    std::snprintf(name, sizeof(name), "model.encoder.layer.%03d.%s", t / 2,
                  t % 2 == 0 ? "weight" : "bias");
    s.name = name;
    s.collective = CollectiveType::kAllreduce;
    s.dtype = DataType::kFloat32;
    s.op = ReduceOp::kAverage;
    s.postscale = 1.0;
    if (t % 2 == 0) {
      s.shape = {256 * (1 + (t / 2) % 16), 256};  // 256 KiB .. 4 MiB
    } else {
      s.shape = {1024};  // 4 KiB
    }
  }
  return specs;
}

std::vector<std::pair<int, int>> NoticeChunks(const ScaleOptions& o) {
  std::vector<std::pair<int, int>> chunks;
  int begin = 0;
  if (o.batch == 0) {
    for (; begin < std::min(o.tensors, CoordinatorClient::kUnbatchedNotices); ++begin)
      chunks.emplace_back(begin, begin + 1);
    if (begin < o.tensors) chunks.emplace_back(begin, o.tensors);
    return chunks;
  }
  for (; begin < o.tensors; begin += o.batch)
    chunks.emplace_back(begin, std::min(o.tensors, begin + o.batch));
  return chunks;
}

double ThreadCpuSeconds() { return Seconds(CLOCK_THREAD_CPUTIME_ID); }
double ProcessCpuSeconds() { return Seconds(CLOCK_PROCESS_CPUTIME_ID); }

bool PlanChecker::Entry(uint64_t seq, int32_t id) {
  const int t = id - 1;
  if (t < 0 || t >= static_cast<int>(seen_.size())) {
    error_ = "unexpected tensor id " + std::to_string(id) + " in bucket " + std::to_string(seq);
    return false;
  }
  if (seen_[t]) {
    error_ = "tensor id " + std::to_string(id) + " planned twice in one step";
    return false;
  }
  seen_[t] = true;
  ++count_;
  for (uint64_t v : {seq, static_cast<uint64_t>(id)}) {
    hash_ ^= v;
    hash_ *= 1099511628211ull;
  }
  return true;
}

Status PlanChecker::EndStep(int rank, int step) {
  if (!error_.empty()) return Internal("rank " + std::to_string(rank) + ": " + error_);
  if (count_ != static_cast<int>(seen_.size())) {
    return Internal("rank " + std::to_string(rank) + " step " + std::to_string(step) + ": " +
                    std::to_string(count_) + " of " + std::to_string(seen_.size()) +
                    " tensors planned");
  }
  seen_.assign(seen_.size(), false);
  count_ = 0;
  return Status::Ok();
}

}  // namespace scale_bench
}  // namespace hora
