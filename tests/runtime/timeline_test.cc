// The timeline: its file format on its own, the planner's arrival record, and engines as
// threads writing every rank's file (a rank made late is the one the plans name as last).
#include "runtime/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "coordinator/planner.h"
#include "runtime/engine.h"
#include "tests/runtime/engine_threads.h"

using namespace hora;
using namespace hora::testing;

namespace {

// One event line of a timeline file (the writer puts each event on its own line).
struct Ev {
  std::string name, ph;
  int64_t pid = -1, tid = -1, ts = -1, dur = -1, last_rank = -2, bucket = -1;
  std::string line;
};

std::string StringField(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  auto p = line.find(k);
  if (p == std::string::npos) return "";
  auto e = line.find('"', p + k.size());
  return line.substr(p + k.size(), e - p - k.size());
}

int64_t IntField(const std::string& line, const std::string& key, int64_t missing) {
  const std::string k = "\"" + key + "\":";
  auto p = line.find(k);
  if (p == std::string::npos) return missing;
  return std::stoll(line.substr(p + k.size()));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Ev> ReadEvents(const std::string& path) {
  std::vector<Ev> out;
  std::istringstream in(ReadAll(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    Ev e;
    e.line = line;
    e.name = StringField(line, "name");
    e.ph = StringField(line, "ph");
    e.pid = IntField(line, "pid", -1);
    e.tid = IntField(line, "tid", -1);
    e.ts = IntField(line, "ts", -1);
    e.dur = IntField(line, "dur", -1);
    e.last_rank = IntField(line, "last_rank", -2);
    e.bucket = IntField(line, "bucket", -1);
    out.push_back(e);
  }
  return out;
}

// In the test's own folder: parallel runs of this test share /tmp and, in Bazel's sandbox,
// their pids.
std::string TempBase(const std::string& tag) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/hora_timeline_test_" +
         std::to_string(getpid()) + "_" + tag + ".json";
}

// tid -> track name, from the thread_name metadata.
std::map<int64_t, std::string> Tracks(const std::vector<Ev>& events) {
  std::map<int64_t, std::string> tracks;
  for (const Ev& e : events) {
    if (e.ph == "M" && e.name == "thread_name") {
      auto p = e.line.find("\"args\":{\"name\":\"");
      auto s = p + std::string("\"args\":{\"name\":\"").size();
      tracks[e.tid] = e.line.substr(s, e.line.find('"', s) - s);
    }
  }
  return tracks;
}

// The event names on the track called `track`, in time order.
std::vector<std::string> PhasesOf(const std::vector<Ev>& events, const std::string& track) {
  auto tracks = Tracks(events);
  std::vector<const Ev*> on;
  for (const Ev& e : events) {
    if ((e.ph == "X" || e.ph == "i") && tracks.count(e.tid) && tracks[e.tid] == track) {
      on.push_back(&e);
    }
  }
  std::stable_sort(on.begin(), on.end(), [](const Ev* a, const Ev* b) { return a->ts < b->ts; });
  std::vector<std::string> names;
  for (const Ev* e : on) names.push_back(e->name);
  return names;
}

// Rounds of phases, each starting with NEGOTIATE_ALLREDUCE and the rest in the timeline's
// order (a phase that took no time may be missing; "DATA" stands for <BACKEND>_ALLREDUCE).
bool InOrder(const std::vector<std::string>& phases, int rounds) {
  const std::vector<std::string> order = {
      "NEGOTIATE_ALLREDUCE",     "ALLREDUCE", "QUEUE",
      "MEMCPY_IN_FUSION_BUFFER", "DATA",      "MEMCPY_OUT_FUSION_BUFFER"};
  int seen = 0;
  size_t at = 0;
  for (const std::string& name : phases) {
    const bool data = std::find(order.begin(), order.end(), name) == order.end() &&
                      name.size() > 10 && name.compare(name.size() - 10, 10, "_ALLREDUCE") == 0;
    const std::string p = data ? "DATA" : name;
    auto it = std::find(order.begin(), order.end(), p);
    if (it == order.end()) return false;
    const size_t i = it - order.begin();
    if (i == 0) {
      ++seen;
    } else if (seen == 0 || i <= at) {
      return false;
    }
    at = i;
  }
  return seen == rounds;
}

}  // namespace

TEST_CASE("timeline: rank file names (rank 0's is the path itself, as Horovod's)") {
  CHECK(TimelineRankPath("/tmp/t.json", 0) == "/tmp/t.json");
  CHECK(TimelineRankPath("/tmp/t.json", 3) == "/tmp/t.rank3.json");
  CHECK(TimelineRankPath("trace", 1) == "trace.rank1");
  CHECK(TimelineRankPath(".json", 1) == ".json.rank1");
}

TEST_CASE("timeline: a bucket's phases in order, with the plan's arrivals, as a JSON array") {
  const std::string path = TempBase("unit");
  Timeline t;
  CHECK_FALSE(t.on());
  REQUIRE(t.Start(path, 2, "rank 2 (h)", 1000).ok());
  CHECK(t.on());
  CHECK(t.Start(path, 2, "again", 0).code() == Code::kFailedPrecondition);
  TensorSpec a;
  a.name = "grad.a";
  a.shape = {4};
  TensorSpec quoted = a;
  quoted.name = "q \"x\"";
  TensorSpec b = a;
  b.name = "grad.b";
  t.Submitted(7, a, 100);
  t.Submitted(8, b, 110);
  t.Submitted(6, quoted, 105);
  t.Planned({{0, 5}}, 200);
  TimelineBucket bucket;
  bucket.seq = 5;
  bucket.backend = "gloo";
  bucket.bytes = 32;
  bucket.tensors.push_back({7, 16, 1, 90, 80});
  bucket.tensors.push_back({8, 16, 1, 90, 70});
  bucket.start_us = 210;
  bucket.collective_us = 220;
  bucket.collective_done_us = 300;
  bucket.unpacked_us = 310;
  bucket.completed_us = 320;
  t.BucketDone(bucket);
  REQUIRE(t.Stop().ok());
  CHECK_FALSE(t.on());
  CHECK(t.Stop().ok());
  t.Submitted(9, a, 400);  // off: dropped

  const std::string text = ReadAll(path);
  CHECK(text.rfind("[\n", 0) == 0);
  CHECK(text.substr(text.size() - 3) == "\n]\n");
  auto events = ReadEvents(path);
  for (const Ev& e : events) CHECK(e.pid == 2);
  // Horovod's names: what its users' tools look for.
  const std::vector<std::string> round = {
      "NEGOTIATE_ALLREDUCE",     "ALLREDUCE",      "QUEUE",
      "MEMCPY_IN_FUSION_BUFFER", "GLOO_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"};
  CHECK(PhasesOf(events, "grad.a") == round);
  CHECK(PhasesOf(events, "grad.b") == round);
  CHECK(PhasesOf(events, "set 0 buckets") ==
        std::vector<std::string>{"bucket", "MEMCPY_IN_FUSION_BUFFER", "GLOO_ALLREDUCE",
                                 "MEMCPY_OUT_FUSION_BUFFER"});
  int negotiations = 0;
  for (const Ev& e : events) {
    if (e.name == "ALLREDUCE") {  // from the plan to the handles' completion
      CHECK(e.ts == 1200);
      CHECK(e.dur == 120);
    }
    if (e.name != "NEGOTIATE_ALLREDUCE") continue;
    ++negotiations;
    CHECK(e.last_rank == 1);
    CHECK(e.bucket == 5);
    CHECK(e.ts == 1000 + (e.line.find("\"wait_us\":80") != std::string::npos ? 100 : 110));
    CHECK(e.ts + e.dur == 1200);  // on the coordinator's clock: offset added
  }
  CHECK(negotiations == 2);
  CHECK(text.find("CYCLE_START") == std::string::npos);  // not asked for
  CHECK(text.find("\"backend\":\"gloo\"") != std::string::npos);
  CHECK(text.find("\"names\":[\"grad.a\",\"grad.b\"]") != std::string::npos);
  CHECK(text.find("\"name\":\"q \\\"x\\\"\"") != std::string::npos);  // escaped
  std::remove(path.c_str());
}

TEST_CASE("timeline: mark_cycles puts a CYCLE_START on the steps track per plan and steady round") {
  const std::string path = TempBase("cycles");
  Timeline t;
  REQUIRE(t.Start(path, 1, "rank 1 (h)", 0, /*mark_cycles=*/true).ok());
  TensorSpec a;
  a.name = "a";
  t.Submitted(1, a, 100);
  t.Planned({{0, 1}, {0, 2}}, 200);  // one plan of two buckets: one cycle
  t.Planned({{0, 3}}, 300);
  TimelineBucket steady;
  steady.steady = true;
  steady.backend = "steady:shm";
  steady.tensors.push_back({1, 4, 0, 0, 0});
  steady.start_us = 400;
  steady.collective_us = 410;
  steady.collective_done_us = 420;
  t.BucketDone(steady);
  REQUIRE(t.Stop().ok());
  std::vector<int64_t> cycles;
  std::vector<std::string> names;
  for (const Ev& e : ReadEvents(path)) {
    if (e.name == "CYCLE_START") {
      CHECK(e.ph == "i");
      CHECK(e.tid == 0);
      cycles.push_back(e.ts);
    }
    names.push_back(e.name);
  }
  std::sort(cycles.begin(), cycles.end());
  CHECK(cycles == std::vector<int64_t>{200, 300, 400});
  CHECK(std::count(names.begin(), names.end(), "STEADY_ALLREDUCE") == 2);  // bucket and tensor
  std::remove(path.c_str());
}

TEST_CASE("timeline: a file that cannot be written is INVALID_ARGUMENT naming it") {
  Timeline t;
  Status s = t.Start("/nonexistent-dir/t.json", 0, "rank 0", 0);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("/nonexistent-dir/t.json") != std::string::npos);
  CHECK_FALSE(t.on());
}

TEST_CASE("timeline: steps start when the first name comes again") {
  const std::string path = TempBase("steps");
  Timeline t;
  REQUIRE(t.Start(path, 0, "rank 0", 0).ok());
  TensorSpec first, other, elsewhere;
  first.name = "first";
  other.name = "other";
  elsewhere.name = "first";
  elsewhere.process_set = 3;  // another set does not mark steps
  int64_t h = 1;
  for (int step = 0; step < 4; ++step) {
    t.Submitted(h++, first, 1000 * step);
    t.Submitted(h++, other, 1000 * step + 10);
    t.Submitted(h++, elsewhere, 1000 * step + 500);
  }
  REQUIRE(t.Stop().ok());
  auto events = ReadEvents(path);
  std::vector<int64_t> starts;
  for (const Ev& e : events) {
    if (e.name == "step") starts.push_back(e.ts);
  }
  CHECK(starts == std::vector<int64_t>{0, 1000, 2000});
  std::remove(path.c_str());
}

TEST_CASE("timeline: a diagnosis is a global instant on its own track, with both texts") {
  const std::string path = TempBase("diagnosis");
  Timeline t;
  REQUIRE(t.Start(path, 0, "rank 0", 25).ok());
  t.Diagnosis(5000, "diagnosis (stall timeout):\n  rank 1 \"x\" never submitted", "whole\treport");
  REQUIRE(t.Stop().ok());
  int found = 0;
  bool named = false;
  for (const Ev& e : ReadEvents(path)) {
    if (e.name == "thread_name" && e.tid == 999999) {
      named = e.line.find("\"name\":\"diagnosis\"") != std::string::npos;
    }
    if (e.name != "diagnosis") continue;
    ++found;
    CHECK(e.ph == "i");
    CHECK(e.ts == 5025);  // on the coordinator's clock
    CHECK(e.line.find("\"s\":\"g\"") != std::string::npos);
    CHECK(e.line.find("\"summary\":\"diagnosis (stall timeout):\\n  rank 1 \\\"x\\\" never "
                      "submitted\"") != std::string::npos);
    CHECK(e.line.find("\"report\":\"whole\\treport\"") != std::string::npos);
  }
  CHECK(found == 1);
  CHECK(named);
  std::remove(path.c_str());
}

TEST_CASE("planner: the entry names the last rank to submit and every rank's arrival") {
  PlannerConfig config;
  config.size = 3;
  Planner planner(config);
  TensorSpec spec;
  spec.name = "w";
  spec.shape = {2};
  const TimePoint t0 = Clock::now();
  planner.Submit(1, spec, t0);
  planner.Submit(0, spec, t0 + std::chrono::microseconds(300));
  planner.Submit(2, spec, t0 + std::chrono::microseconds(1000));
  PlannerOutput out = planner.Poll(t0 + std::chrono::microseconds(1000));
  REQUIRE(out.buckets.size() == 1);
  const PlannedBucket::Entry& e = out.buckets[0].entries.at(0);
  CHECK(e.last_rank == 2);
  CHECK(e.arrival_us == std::vector<int64_t>{300, 0, 1000});
}

TEST_CASE("timeline: engines as threads, every rank's file, the late rank named last") {
  const int size = 3;
  const int late = 1;
  const std::string base = TempBase("engines");
  const int port = FreePort();
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Options o = MakeOptions(r, size, port);
      o.timeline = base;
      auto engine = Engine::Start(o);
      if (!engine.ok()) {
        errors[r] = "start: " + engine.status().ToString();
        return;
      }
      Engine& e = *engine.value();
      // Waits for and releases h; the first failure goes to errors[r].
      auto finish = [&](int64_t h, const std::string& what) {
        Status s = e.handles().Wait(h, std::chrono::seconds(30));
        Status released = e.handles().Release(h);
        if (errors[r].empty() && !s.ok()) errors[r] = what + ": " + s.ToString();
        if (errors[r].empty() && !released.ok())
          errors[r] = what + " release: " + released.ToString();
      };
      if (!e.timeline().on()) errors[r] = "timeline off after init";
      for (int step = 0; step < 3 && errors[r].empty(); ++step) {
        if (r == late) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::vector<float> small(4, 1.0f), big(5000, 1.0f);  // inline / data plane
        auto h1 = Allreduce(e, "small", &small, ReduceOp::kSum);
        auto h2 = Allreduce(e, "big", &big, ReduceOp::kSum);
        if (!h1.ok() || !h2.ok()) {
          errors[r] = "enqueue failed";
          break;
        }
        finish(h1.value(), "small");
        finish(h2.value(), "big");
      }
      // Stopped and started again mid-job: the second file holds only what came after.
      if (errors[r].empty()) {
        Status s = e.StopTimeline();
        if (!s.ok()) errors[r] = "stop: " + s.ToString();
        std::vector<float> between(4, 1.0f);
        auto h = Allreduce(e, "between", &between, ReduceOp::kSum);
        if (!h.ok())
          errors[r] = "enqueue between: " + h.status().ToString();
        else
          finish(h.value(), "between");
        s = e.StartTimeline(base + ".second.json", /*mark_cycles=*/true);
        if (!s.ok()) errors[r] = "restart: " + s.ToString();
        Status again = e.StartTimeline(base + ".third.json", false);
        if (again.code() != Code::kFailedPrecondition)
          errors[r] = "second start: " + again.ToString();
        std::vector<float> after(3000, 2.0f);
        auto h2 = Allreduce(e, "after", &after, ReduceOp::kSum);
        if (!h2.ok() && errors[r].empty()) errors[r] = "enqueue after: " + h2.status().ToString();
        if (h2.ok()) finish(h2.value(), "after");
      }
      Status down = e.Shutdown();
      if (!down.ok() && errors[r].empty()) errors[r] = "shutdown: " + down.ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r] == "");
  }
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    const std::string file = TimelineRankPath(base, r);
    auto events = ReadEvents(file);
    const std::string text = ReadAll(file);
    CHECK(text.substr(text.size() - 3) == "\n]\n");
    std::map<std::string, int> count;
    for (const Ev& e : events) {
      CHECK(e.pid == r);
      if (e.name == "NEGOTIATE_ALLREDUCE") {
        CHECK(e.last_rank == late);
      }
      ++count[e.name];
    }
    CHECK(count["NEGOTIATE_ALLREDUCE"] == 6);
    CHECK(count["step"] == 2);
    CHECK(InOrder(PhasesOf(events, "big"), 3));
    // Reduced by the coordinator: no data-plane call, no copies.
    CHECK(PhasesOf(events, "small") ==
          std::vector<std::string>{"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "NEGOTIATE_ALLREDUCE",
                                   "ALLREDUCE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE"});
    size_t inline_spans = 0;
    for (size_t at = 0;
         (at = text.find("\"collective\":\"allreduce (inline)\"", at)) != std::string::npos; ++at) {
      ++inline_spans;
    }
    CHECK(inline_spans == 3 * 3);  // each small round: its bucket, its NEGOTIATE and ALLREDUCE
    CHECK(text.find("\"between\"") == std::string::npos);

    const std::string second = TimelineRankPath(base + ".second.json", r);
    const std::string text2 = ReadAll(second);
    CHECK(text2.find("\"after\"") != std::string::npos);
    CHECK(text2.find("\"big\"") == std::string::npos);
    CHECK(text2.find("\"between\"") == std::string::npos);
    CHECK(text2.find("\"CYCLE_START\"") != std::string::npos);  // started with mark_cycles
    CHECK(text.find("\"CYCLE_START\"") == std::string::npos);
    std::ifstream third(TimelineRankPath(base + ".third.json", r));
    CHECK_FALSE(third.good());
    std::remove(file.c_str());
    std::remove(second.c_str());
  }
}
