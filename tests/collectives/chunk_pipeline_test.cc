// RunChunkPipeline (collectives/hierarchical/chunk_pipeline.h) with phases that record what
// ran: the order on each thread, that chunk k crosses only after its scatter and is gathered
// only after it crossed, that phases overlap, and that the first error ends both threads
// before the call returns.
#include "collectives/hierarchical/chunk_pipeline.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace hora;

namespace {

// Every phase call, in the order they started, as "s3" / "c3" / "g3", and on which thread.
class Log {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(what);
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  int IndexOf(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i] == what) return static_cast<int>(i);
    }
    return -1;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> calls_;
  std::vector<std::thread::id> threads_;
};

ChunkPhases Recording(Log* log, std::chrono::microseconds cross_takes = {}) {
  ChunkPhases p;
  p.scatter = [log](size_t k) {
    log->Add("s" + std::to_string(k));
    return Status::Ok();
  };
  p.cross = [log, cross_takes](size_t k) {
    log->Add("c" + std::to_string(k));
    std::this_thread::sleep_for(cross_takes);
    return Status::Ok();
  };
  p.gather = [log](size_t k) {
    log->Add("g" + std::to_string(k));
    return Status::Ok();
  };
  return p;
}

// The calling thread's calls, in order.
std::vector<std::string> OnThread(Log& log, std::thread::id id) {
  std::vector<std::string> out;
  const auto calls = log.calls();
  const auto threads = log.threads();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (threads[i] == id) out.push_back(calls[i]);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "chunk pipeline: each thread's order is fixed, and every chunk goes scatter, cross, "
    "gather") {
  for (size_t chunks : {size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    Log log;
    REQUIRE(RunChunkPipeline(chunks, Recording(&log)).ok());
    INFO("chunks " << chunks);
    std::vector<std::string> want = {"s0"};
    for (size_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) want.push_back("s" + std::to_string(k + 1));
      want.push_back("g" + std::to_string(k));
    }
    CHECK(OnThread(log, std::this_thread::get_id()) == want);
    REQUIRE(log.calls().size() == 3 * chunks);
    for (size_t k = 0; k < chunks; ++k) {
      const std::string n = std::to_string(k);
      CHECK(log.IndexOf("s" + n) < log.IndexOf("c" + n));
      CHECK(log.IndexOf("c" + n) < log.IndexOf("g" + n));
      if (k > 0) CHECK(log.IndexOf("c" + std::to_string(k - 1)) < log.IndexOf("c" + n));
    }
    for (size_t i = 0; i < log.calls().size(); ++i) {
      if (log.calls()[i][0] == 'c') CHECK(log.threads()[i] != std::this_thread::get_id());
    }
  }
}

TEST_CASE("chunk pipeline: the next chunk's scatter runs while a chunk crosses") {
  // Chunk 0's cross takes 200 ms; scatter(1) does not wait for it.
  Log log;
  std::atomic<bool> crossing{false}, overlapped{false};
  ChunkPhases p = Recording(&log);
  p.cross = [&](size_t k) {
    log.Add("c" + std::to_string(k));
    crossing = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(k == 0 ? 200 : 0));
    crossing = false;
    return Status::Ok();
  };
  p.scatter = [&](size_t k) {
    log.Add("s" + std::to_string(k));
    if (k == 1) {
      // Give the helper time to start chunk 0's cross, then see it in progress.
      for (int i = 0; i < 100 && !crossing; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      overlapped = crossing.load();
    }
    return Status::Ok();
  };
  REQUIRE(RunChunkPipeline(2, p).ok());
  REQUIRE(overlapped);
}

TEST_CASE("chunk pipeline: a failed cross ends the pipeline with its error; no later phase runs") {
  Log log;
  ChunkPhases p = Recording(&log);
  p.cross = [&](size_t k) {
    log.Add("c" + std::to_string(k));
    return k == 2 ? Unavailable("cross of chunk 2 broke") : Status::Ok();
  };
  Status s = RunChunkPipeline(6, p);
  REQUIRE(s.code() == Code::kUnavailable);
  REQUIRE(s.message() == "cross of chunk 2 broke");
  CHECK(log.IndexOf("g1") >= 0);
  CHECK(log.IndexOf("g2") < 0);
  CHECK(log.IndexOf("c3") < 0);
  // Nothing runs after the call returned (the helper was joined).
  const size_t n = log.calls().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(log.calls().size() == n);
}

TEST_CASE("chunk pipeline: a failed scatter or gather ends the pipeline; its chunk never crosses") {
  for (const char* failing : {"s0", "s3", "g1"}) {
    Log log;
    ChunkPhases p = Recording(&log, std::chrono::microseconds(500));
    auto inner_scatter = p.scatter;
    auto inner_gather = p.gather;
    p.scatter = [&, inner_scatter](size_t k) {
      Status s = inner_scatter(k);
      return "s" + std::to_string(k) == failing ? Internal(std::string(failing) + " failed") : s;
    };
    p.gather = [&, inner_gather](size_t k) {
      Status s = inner_gather(k);
      return "g" + std::to_string(k) == failing ? Internal(std::string(failing) + " failed") : s;
    };
    Status s = RunChunkPipeline(5, p);
    INFO("failing " << failing);
    REQUIRE(s.code() == Code::kInternal);
    REQUIRE(s.message() == std::string(failing) + " failed");
    if (failing[0] == 's') CHECK(log.IndexOf("c" + std::string(failing + 1)) < 0);
    CHECK(log.IndexOf("g4") < 0);
    const size_t n = log.calls().size();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(log.calls().size() == n);
  }
}
