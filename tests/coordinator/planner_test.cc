// Planner: readiness, cross-rank validation, duplicates, join, stalls, name reuse.
#include "coordinator/planner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "tests/coordinator/planner_test_util.h"

namespace hora {
namespace {

using testing::Allreduce;
using testing::At;
using testing::BucketNames;
using testing::Config;
using testing::Spec;
using testing::SubmitAll;
using VS = std::vector<std::string>;
using VB = std::vector<bool>;

TEST_CASE("a name is complete exactly when the last rank submits it", "[planner]") {
  for (int size : {1, 2, 3, 4, 7}) {
    SECTION("size " + std::to_string(size)) {
      std::mt19937 rng(1234 + size);
      Planner p(Config(size));
      const int kNames = 20;
      // Each rank submits every name, in its own random order; ranks interleave randomly.
      std::vector<std::vector<int>> order(size);
      for (auto& o : order) {
        for (int i = 0; i < kNames; ++i) o.push_back(i);
        std::shuffle(o.begin(), o.end(), rng);
      }
      std::vector<size_t> next(size, 0);
      std::vector<int> count(kNames, 0);
      int emitted = 0;
      for (int step = 0; step < size * kNames; ++step) {
        int rank;
        do rank = static_cast<int>(rng() % size);
        while (next[rank] == order[rank].size());
        const int i = order[rank][next[rank]++];
        const std::string name = "t" + std::to_string(i);
        p.Submit(rank, Spec(name, CollectiveType::kAllgather, {rank + 1, 2}), At(step));
        ++count[i];
        PlannerOutput out = p.Poll(At(step));
        REQUIRE(out.failures.empty());
        if (count[i] == size) {
          REQUIRE(BucketNames(out) == std::vector<VS>{{name}});
          CHECK(out.buckets[0].seq == static_cast<uint64_t>(emitted));
          CHECK(out.buckets[0].entries[0].submitted == VB(size, true));
          ++emitted;
        } else {
          REQUIRE(out.buckets.empty());
        }
      }
      CHECK(emitted == kNames);
      CHECK(p.PendingCount() == 0);
    }
  }
}

// Three ranks; rank 1 differs from ranks 0 and 2 in one field.
TensorFailure OneFailure(const TensorSpec& same, const TensorSpec& odd) {
  Planner p(Config(3));
  p.Submit(0, same, At(0));
  p.Submit(1, odd, At(0));
  p.Submit(2, same, At(0));
  PlannerOutput out = p.Poll(At(0));
  REQUIRE(out.buckets.empty());
  REQUIRE(out.failures.size() == 1);
  CHECK(p.PendingCount() == 0);
  CHECK(out.failures[0].submitted == VB{true, true, true});
  return out.failures[0];
}

TEST_CASE("every mismatched field fails the name on all ranks, naming field and ranks",
          "[planner]") {
  TensorSpec a = Allreduce("w", 4);
  TensorSpec b = a;
  std::string want;
  SECTION("collective") {
    b.collective = CollectiveType::kBroadcast;
    want =
        "tensor 'w': collective differs across ranks: allreduce on ranks 0,2; "
        "broadcast on rank 1";
  }
  SECTION("dtype") {
    b.dtype = DataType::kFloat16;
    want = "tensor 'w': dtype differs across ranks: float32 on ranks 0,2; float16 on rank 1";
  }
  SECTION("op") {
    b.op = ReduceOp::kMax;
    want = "tensor 'w': op differs across ranks: sum on ranks 0,2; max on rank 1";
  }
  SECTION("shape") {
    b.shape = {5};
    want = "tensor 'w': shape differs across ranks: [4] on ranks 0,2; [5] on rank 1";
  }
  SECTION("prescale") {
    b.prescale = 0.5;
    want = "tensor 'w': prescale differs across ranks: 1 on ranks 0,2; 0.5 on rank 1";
  }
  SECTION("postscale") {
    b.postscale = 0.125;
    want = "tensor 'w': postscale differs across ranks: 1 on ranks 0,2; 0.125 on rank 1";
  }
  SECTION("device") {
    b.device = Device::kCuda;
    want = "tensor 'w': device differs across ranks: cpu on ranks 0,2; cuda on rank 1";
  }
  SECTION("the first differing field in order is reported") {
    b.shape = {9};
    b.dtype = DataType::kInt64;
    b.device = Device::kCuda;
    want = "tensor 'w': dtype differs across ranks: float32 on ranks 0,2; int64 on rank 1";
  }
  SECTION("reducescatter compares op") {
    a.collective = b.collective = CollectiveType::kReducescatter;
    b.op = ReduceOp::kMin;
    want = "tensor 'w': op differs across ranks: sum on ranks 0,2; min on rank 1";
  }
  TensorFailure f = OneFailure(a, b);
  CHECK(f.status.code() == Code::kMismatch);
  CHECK(f.status.message() == want);
}

TEST_CASE("broadcast root and allgather shape tail mismatches", "[planner]") {
  SECTION("root") {
    TensorSpec a = Spec("b", CollectiveType::kBroadcast, {3});
    TensorSpec b = a;
    b.root = 1;
    TensorFailure f = OneFailure(a, b);
    CHECK(f.status.code() == Code::kMismatch);
    CHECK(f.status.message() ==
          "tensor 'b': root differs across ranks: 0 on ranks 0,2; 1 on rank 1");
  }
  SECTION("allgather compares shape[1:] only") {
    Planner p(Config(3));
    p.Submit(0, Spec("g", CollectiveType::kAllgather, {2, 3}), At(0));
    p.Submit(1, Spec("g", CollectiveType::kAllgather, {5, 3}), At(0));
    p.Submit(2, Spec("g", CollectiveType::kAllgather, {2, 4}), At(0));
    PlannerOutput out = p.Poll(At(0));
    REQUIRE(out.failures.size() == 1);
    CHECK(out.failures[0].status.code() == Code::kMismatch);
    CHECK(out.failures[0].status.message() ==
          "tensor 'g': shape[1:] differs across ranks: [3] on ranks 0,1; [4] on rank 2");
  }
  SECTION("three distinct values form three groups") {
    Planner p(Config(3));
    for (int r = 0; r < 3; ++r) p.Submit(r, Allreduce("w", r + 1), At(0));
    PlannerOutput out = p.Poll(At(0));
    REQUIRE(out.failures.size() == 1);
    CHECK(out.failures[0].status.message() ==
          "tensor 'w': shape differs across ranks: [1] on rank 0; [2] on rank 1; [3] on rank 2");
  }
}

TEST_CASE("fields that do not apply to a collective are not compared", "[planner]") {
  Planner p(Config(2));
  TensorSpec a = Spec("b", CollectiveType::kBroadcast, {3});
  TensorSpec b = a;
  b.op = ReduceOp::kMax;  // broadcast has no op
  b.prescale = 3.0;       // nor scales
  b.device_index = 1;     // each rank has its own device index
  p.Submit(0, a, At(0));
  p.Submit(1, b, At(0));
  TensorSpec x = Spec("x", CollectiveType::kBarrier, {});
  TensorSpec y = x;
  y.dtype = DataType::kInt8;  // barrier has no data
  y.root = 1;
  p.Submit(0, x, At(1));
  p.Submit(1, y, At(1));
  PlannerOutput out = p.Poll(At(1));
  CHECK(out.failures.empty());
  REQUIRE(BucketNames(out) == std::vector<VS>{{"b"}, {"x"}});
  CHECK(out.buckets[0].collective == CollectiveType::kBroadcast);
  CHECK(out.buckets[0].op == ReduceOp::kSum);
  CHECK(out.buckets[0].prescale == 1.0);
  CHECK(out.buckets[1].collective == CollectiveType::kBarrier);
  CHECK(out.buckets[1].entries[0].num_elements == 0);
}

TEST_CASE("allgather carries every rank's first dimension", "[planner]") {
  Planner p(Config(3));
  p.Submit(0, Spec("g", CollectiveType::kAllgather, {2, 3}), At(0));
  p.Submit(1, Spec("g", CollectiveType::kAllgather, {0, 3}), At(0));
  p.Submit(2, Spec("g", CollectiveType::kAllgather, {5, 3}), At(0));
  PlannerOutput out = p.Poll(At(0));
  REQUIRE(out.buckets.size() == 1);
  const auto& e = out.buckets[0].entries.at(0);
  CHECK(e.first_dims == std::vector<int64_t>{2, 0, 5});
  CHECK(e.num_elements == 3);  // one row
  CHECK(out.buckets[0].collective == CollectiveType::kAllgather);

  Planner q(Config(2));
  SubmitAll(&q, 2, Spec("s", CollectiveType::kAllgather, {}), At(0));
  out = q.Poll(At(0));
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].status.code() == Code::kInvalidArgument);
  CHECK(out.failures[0].status.message() ==
        "tensor 's': allgather needs at least one dimension, but rank 0 submitted a scalar");
}

TensorSpec A2a(std::vector<int64_t> shape, std::vector<int64_t> splits) {
  TensorSpec s = Spec("a", CollectiveType::kAlltoall, std::move(shape));
  s.splits = std::move(splits);
  return s;
}

TEST_CASE("alltoall carries the splits matrix, filling in even splits", "[planner]") {
  Planner p(Config(3));
  p.Submit(0, A2a({6, 2}, {1, 2, 3}), At(0));
  p.Submit(1, A2a({3, 2}, {}), At(0));
  p.Submit(2, A2a({4, 2}, {0, 0, 4}), At(0));
  PlannerOutput out = p.Poll(At(0));
  REQUIRE(out.failures.empty());
  REQUIRE(out.buckets.size() == 1);
  CHECK(out.buckets[0].collective == CollectiveType::kAlltoall);
  const auto& e = out.buckets[0].entries.at(0);
  CHECK(e.splits == std::vector<std::vector<int64_t>>{{1, 2, 3}, {1, 1, 1}, {0, 0, 4}});
  CHECK(e.num_elements == 2);  // one row
}

// The layout digest: the same in every rank's plan, equal for equal layouts, different when one
// rank's splits (or first dimension) change, 0 where there is no layout.
TEST_CASE("a bucket entry's layout digest follows every rank's splits and first dimensions",
          "[planner]") {
  auto layout = [](const std::vector<TensorSpec>& specs) {
    Planner p(Config(static_cast<int>(specs.size())));
    for (size_t r = 0; r < specs.size(); ++r) p.Submit(static_cast<int>(r), specs[r], At(0));
    PlannerOutput out = p.Poll(At(0));
    REQUIRE(out.buckets.size() == 1);
    return out.buckets[0].entries.at(0).layout;
  };
  const uint64_t a = layout({A2a({6, 2}, {1, 2, 3}), A2a({3, 2}, {}), A2a({4, 2}, {0, 0, 4})});
  CHECK(a != 0);
  CHECK(layout({A2a({6, 2}, {1, 2, 3}), A2a({3, 2}, {}), A2a({4, 2}, {0, 0, 4})}) == a);
  CHECK(layout({A2a({6, 2}, {1, 2, 3}), A2a({3, 2}, {}), A2a({4, 2}, {0, 1, 3})}) != a);
  const uint64_t g = layout({Spec("g", CollectiveType::kAllgather, {2, 3}),
                             Spec("g", CollectiveType::kAllgather, {1, 3})});
  CHECK(g != 0);
  CHECK(g != layout({Spec("g", CollectiveType::kAllgather, {1, 3}),
                     Spec("g", CollectiveType::kAllgather, {2, 3})}));
  CHECK(layout({Spec("r", CollectiveType::kAllreduce, {4}),
                Spec("r", CollectiveType::kAllreduce, {4})}) == 0);
}

TEST_CASE("bad alltoall splits fail naming the rank", "[planner]") {
  Planner p(Config(3));
  std::string want;
  SECTION("wrong length") {
    p.Submit(0, A2a({6, 2}, {1, 2, 3}), At(0));
    p.Submit(1, A2a({3, 2}, {1, 2}), At(0));
    p.Submit(2, A2a({3, 2}, {}), At(0));
    want = "tensor 'a': alltoall splits on rank 1 have 2 entries, expected 3";
  }
  SECTION("wrong sum") {
    p.Submit(0, A2a({6, 2}, {1, 2, 3}), At(0));
    p.Submit(1, A2a({3, 2}, {}), At(0));
    p.Submit(2, A2a({8, 2}, {1, 1, 1}), At(0));
    want = "tensor 'a': alltoall splits on rank 2 sum to 3, but the first dimension is 8";
  }
  SECTION("negative") {
    p.Submit(0, A2a({1, 2}, {2, -1, 0}), At(0));
    p.Submit(1, A2a({3, 2}, {}), At(0));
    p.Submit(2, A2a({3, 2}, {}), At(0));
    want = "tensor 'a': alltoall splits on rank 0 contain a negative entry (-1)";
  }
  SECTION("even split does not divide") {
    p.Submit(0, A2a({3, 2}, {}), At(0));
    p.Submit(1, A2a({4, 2}, {}), At(0));
    p.Submit(2, A2a({3, 2}, {}), At(0));
    want =
        "tensor 'a': alltoall with even splits needs the first dimension (4) on rank 1 "
        "to be divisible by 3 ranks";
  }
  PlannerOutput out = p.Poll(At(0));
  CHECK(out.buckets.empty());
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].status.code() == Code::kInvalidArgument);
  CHECK(out.failures[0].status.message() == want);
  CHECK(out.failures[0].submitted == VB{true, true, true});
}

TEST_CASE("per-collective sanity: reducescatter scalar, broadcast root range", "[planner]") {
  Planner p(Config(3));
  SubmitAll(&p, 3, Spec("rs", CollectiveType::kReducescatter, {}), At(0));
  TensorSpec b = Spec("b", CollectiveType::kBroadcast, {2});
  b.root = 3;
  SubmitAll(&p, 3, b, At(1));
  b.name = "c";
  b.root = -1;
  SubmitAll(&p, 3, b, At(2));
  SubmitAll(&p, 3, Spec("n", CollectiveType::kAllreduce, {2, -1}), At(3));
  PlannerOutput out = p.Poll(At(3));
  CHECK(out.buckets.empty());
  REQUIRE(out.failures.size() == 4);
  for (const auto& f : out.failures) CHECK(f.status.code() == Code::kInvalidArgument);
  CHECK(out.failures[0].status.message() ==
        "tensor 'rs': reducescatter needs at least one dimension, but rank 0 submitted a scalar");
  CHECK(out.failures[1].status.message() == "tensor 'b': broadcast root 3 is out of range [0, 3)");
  CHECK(out.failures[2].status.message() == "tensor 'c': broadcast root -1 is out of range [0, 3)");
  CHECK(out.failures[3].status.message() ==
        "tensor 'n': shape [2, -1] on rank 0 has a negative dimension");
}

TEST_CASE("a duplicate submission fails for that rank alone", "[planner]") {
  Planner p(Config(2));
  p.Submit(0, Allreduce("w", 4), At(0));
  p.Submit(0, Allreduce("w", 4), At(1));
  PlannerOutput out = p.Poll(At(1));
  CHECK(out.buckets.empty());
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].name == "w");
  CHECK(out.failures[0].submitted == VB{true, false});
  CHECK(out.failures[0].status.code() == Code::kAlreadyExists);
  CHECK(out.failures[0].status.message() ==
        "tensor 'w' was submitted twice by rank 0 while the first submission is still in flight");
  CHECK(p.PendingCount() == 1);
  // The original entry is intact.
  p.Submit(1, Allreduce("w", 4), At(2));
  out = p.Poll(At(2));
  CHECK(out.failures.empty());
  REQUIRE(BucketNames(out) == std::vector<VS>{{"w"}});
  CHECK(out.buckets[0].entries[0].submitted == VB{true, true});
}

TEST_CASE("a duplicate of a complete name still waiting for fusion is refused", "[planner]") {
  Planner p(Config(2));
  SubmitAll(&p, 2, Allreduce("a", 4), At(0));
  p.Submit(0, Allreduce("b", 4), At(0));  // partial: holds "a" back
  p.Submit(1, Allreduce("a", 4), At(1));
  PlannerOutput out = p.Poll(At(1));
  CHECK(out.buckets.empty());
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].submitted == VB{false, true});
  CHECK(out.failures[0].status.code() == Code::kAlreadyExists);
  p.Submit(1, Allreduce("b", 4), At(2));
  out = p.Poll(At(2));
  CHECK(BucketNames(out) == std::vector<VS>{{"a", "b"}});
}

TEST_CASE("join: allreduce runs with zeros, others fail, join_done names the last rank",
          "[planner]") {
  Planner p(Config(3));
  p.Join(2, At(0));
  PlannerOutput out = p.Poll(At(0));
  CHECK_FALSE(out.join_done);
  CHECK(out.last_joined_rank == -1);
  p.Submit(0, Allreduce("g", 4), At(1), 70);  // each rank's own id for the name
  p.Submit(1, Allreduce("g", 4), At(1), 71);
  p.Submit(0, Spec("b", CollectiveType::kBroadcast, {4}), At(1));
  p.Submit(1, Spec("b", CollectiveType::kBroadcast, {4}), At(1));
  out = p.Poll(At(1));
  REQUIRE(BucketNames(out) == std::vector<VS>{{"g"}});
  CHECK(out.buckets[0].joined_ranks == 1);
  CHECK(out.buckets[0].entries[0].submitted == VB{true, true, false});
  CHECK(out.buckets[0].entries[0].tags == std::vector<int32_t>{70, 71, -1});
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].name == "b");
  CHECK(out.failures[0].submitted == VB{true, true, false});
  CHECK(out.failures[0].status.code() == Code::kInvalidArgument);
  CHECK(out.failures[0].status.message() ==
        "tensor 'b': broadcast cannot run while rank 2 has joined: only allreduce supports join");

  p.Join(0, At(2));
  out = p.Poll(At(2));
  CHECK_FALSE(out.join_done);
  p.Join(1, At(3));
  out = p.Poll(At(3));
  CHECK(out.join_done);
  CHECK(out.last_joined_rank == 1);
  out = p.Poll(At(3));
  CHECK_FALSE(out.join_done);

  // The joined set was reset: every rank must submit again.
  p.Submit(0, Allreduce("g", 4), At(4));
  p.Submit(1, Allreduce("g", 4), At(4));
  CHECK(p.Poll(At(4)).buckets.empty());
  p.Submit(2, Allreduce("g", 4), At(5));
  out = p.Poll(At(5));
  REQUIRE(out.buckets.size() == 1);
  CHECK(out.buckets[0].joined_ranks == 0);
  CHECK(out.buckets[0].entries[0].submitted == VB{true, true, true});
}

TEST_CASE("join completes names already pending on the other ranks", "[planner]") {
  Planner p(Config(3));
  p.Submit(0, Allreduce("p", 4), At(0));
  p.Submit(0, Spec("ag", CollectiveType::kAllgather, {1}), At(0));
  p.Join(1, At(1));
  CHECK(p.Poll(At(1)).buckets.empty());
  p.Join(2, At(2));
  PlannerOutput out = p.Poll(At(2));
  REQUIRE(BucketNames(out) == std::vector<VS>{{"p"}});
  CHECK(out.buckets[0].joined_ranks == 2);
  CHECK(out.buckets[0].entries[0].submitted == VB{true, false, false});
  REQUIRE(out.failures.size() == 1);
  CHECK(out.failures[0].status.message() ==
        "tensor 'ag': allgather cannot run while ranks 1,2 have joined: only allreduce supports "
        "join");
  CHECK_FALSE(out.join_done);
  p.Join(0, At(3));
  out = p.Poll(At(3));
  CHECK(out.join_done);
  CHECK(out.last_joined_rank == 0);
  CHECK(p.PendingCount() == 0);
}

TEST_CASE("a name pending when the last rank joins completes before the reset", "[planner]") {
  Planner p(Config(2));
  p.Submit(0, Allreduce("q", 4), At(0));
  p.Join(0, At(1));
  p.Join(1, At(2));
  PlannerOutput out = p.Poll(At(2));
  REQUIRE(BucketNames(out) == std::vector<VS>{{"q"}});
  CHECK(out.buckets[0].joined_ranks == 2);
  CHECK(out.buckets[0].entries[0].submitted == VB{true, false});
  CHECK(out.join_done);
  CHECK(out.last_joined_rank == 1);
}

TEST_CASE("tensors completed with different joined counts are not fused", "[planner]") {
  Planner p(Config(2));
  SubmitAll(&p, 2, Allreduce("a", 4), At(0));
  p.Submit(0, Allreduce("p", 4), At(0));  // holds "a" back
  CHECK(p.Poll(At(0)).buckets.empty());
  p.Join(1, At(1));
  PlannerOutput out = p.Poll(At(1));
  REQUIRE(BucketNames(out) == std::vector<VS>{{"a"}, {"p"}});
  CHECK(out.buckets[0].joined_ranks == 0);
  CHECK(out.buckets[0].entries[0].submitted == VB{true, true});
  CHECK(out.buckets[1].joined_ranks == 1);
  CHECK(out.buckets[1].entries[0].submitted == VB{true, false});
  CHECK_FALSE(out.join_done);
}

TEST_CASE("stalled names report ready and missing ranks", "[planner]") {
  Planner p(Config(4));
  p.Submit(2, Allreduce("s", 4), At(0));
  p.Submit(0, Allreduce("s", 4), At(10));
  p.Submit(1, Allreduce("t", 4), At(50));
  SubmitAll(&p, 4, Spec("done", CollectiveType::kAllgather, {1}), At(0));
  auto r = p.Stalled(At(100), std::chrono::milliseconds(60));
  REQUIRE(r.size() == 1);
  CHECK(r[0].name == "s");
  CHECK(r[0].ready_ranks == std::vector<int>{0, 2});
  CHECK(r[0].missing_ranks == std::vector<int>{1, 3});
  CHECK(r[0].age == std::chrono::milliseconds(100));
  r = p.Stalled(At(100), std::chrono::milliseconds(50));
  REQUIRE(r.size() == 2);
  CHECK(r[0].name == "s");
  CHECK(r[1].name == "t");
  CHECK(r[1].ready_ranks == std::vector<int>{1});
  CHECK(r[1].missing_ranks == std::vector<int>{0, 2, 3});
  CHECK(r[1].age == std::chrono::milliseconds(50));
  CHECK(p.Stalled(At(100), std::chrono::milliseconds(101)).empty());
  // A joined rank is not missing.
  p.Join(3, At(100));
  r = p.Stalled(At(100), std::chrono::milliseconds(60));
  REQUIRE(r.size() == 1);
  CHECK(r[0].missing_ranks == std::vector<int>{1});
}

TEST_CASE("a name can be submitted again once emitted or failed", "[planner]") {
  Planner p(Config(2));
  for (int step = 0; step < 3; ++step) {
    SubmitAll(&p, 2, Allreduce("w", 4), At(step));
    PlannerOutput out = p.Poll(At(step));
    REQUIRE(BucketNames(out) == std::vector<VS>{{"w"}});
    CHECK(out.buckets[0].seq == static_cast<uint64_t>(step));
    CHECK(p.PendingCount() == 0);
  }
  p.Submit(0, Allreduce("w", 4), At(5));
  p.Submit(1, Allreduce("w", 5), At(5));
  PlannerOutput out = p.Poll(At(5));
  REQUIRE(out.failures.size() == 1);
  SubmitAll(&p, 2, Allreduce("w", 4), At(6));
  out = p.Poll(At(6));
  REQUIRE(BucketNames(out) == std::vector<VS>{{"w"}});
  CHECK(out.buckets[0].seq == 3);
  for (int step = 7; step < 9; ++step) {
    SubmitAll(&p, 2, Spec("g", CollectiveType::kAllgather, {1}), At(step));
    out = p.Poll(At(step));
    CHECK(out.failures.empty());
    REQUIRE(BucketNames(out) == std::vector<VS>{{"g"}});
    CHECK(p.PendingCount() == 0);
  }
}

}  // namespace
}  // namespace hora
