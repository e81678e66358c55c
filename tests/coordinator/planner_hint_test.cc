// Planner: names kept between steps, PlannerHint (Submit without a lookup by name), idle names
// forgotten after a while, hints from another planner or a forgotten name.
#include <catch2/catch.hpp>

#include "coordinator/planner.h"
#include "tests/coordinator/planner_test_util.h"

namespace hora {
namespace {

using testing::Allreduce;
using testing::At;
using testing::BucketNames;
using testing::Config;
using VS = std::vector<std::string>;

// One step: every rank submits every name (with its hint), then one Poll after the cycle.
PlannerOutput Step(Planner* p, const std::vector<TensorSpec>& specs,
                   std::vector<std::vector<PlannerHint>>* hints, int ms) {
  for (size_t r = 0; r < hints->size(); ++r) {
    for (size_t t = 0; t < specs.size(); ++t) {
      p->Submit(static_cast<int>(r), specs[t], At(ms), static_cast<int32_t>(t), &(*hints)[r][t]);
    }
  }
  return p->Poll(At(ms + 10));
}

TEST_CASE("hints find a name's entry again in the next steps, with the same plans", "[planner]") {
  const std::vector<TensorSpec> specs = {Allreduce("a", 4), Allreduce("b", 8), Allreduce("c", 2)};
  Planner hinted(Config(3)), plain(Config(3));
  std::vector<std::vector<PlannerHint>> hints(3, std::vector<PlannerHint>(3));
  std::vector<std::vector<PlannerHint>> first;
  for (int step = 0; step < 4; ++step) {
    PlannerOutput a = Step(&hinted, specs, &hints, 100 * step);
    for (int r = 0; r < 3; ++r) {
      for (const TensorSpec& s : specs) plain.Submit(r, s, At(100 * step));
    }
    PlannerOutput b = plain.Poll(At(100 * step + 10));
    REQUIRE(a.failures.empty());
    REQUIRE(BucketNames(a) == BucketNames(b));
    REQUIRE(BucketNames(a) == std::vector<VS>{{"a", "b", "c"}});
    CHECK(a.buckets[0].seq == b.buckets[0].seq);
    CHECK(a.buckets[0].entries[1].tags == std::vector<int32_t>{1, 1, 1});
    CHECK(hinted.PendingCount() == 0);
    if (step == 0) first = hints;
    for (int r = 0; r < 3; ++r) {
      for (int t = 0; t < 3; ++t) {
        CHECK(hints[r][t].epoch == first[r][t].epoch);  // still valid: not looked up again
        CHECK(hints[r][t].name == first[r][t].name);
        CHECK(hints[r][t].name == hints[0][t].name);  // one entry per name, whoever submits
      }
    }
  }
}

TEST_CASE("a hinted name still fails on a mismatch and works again in the next step", "[planner]") {
  Planner p(Config(2));
  std::vector<std::vector<PlannerHint>> hints(2, std::vector<PlannerHint>(1));
  REQUIRE(Step(&p, {Allreduce("w", 4)}, &hints, 0).buckets.size() == 1);
  p.Submit(0, Allreduce("w", 4), At(100), 0, &hints[0][0]);
  p.Submit(1, Allreduce("w", 5), At(100), 0, &hints[1][0]);  // shape differs on rank 1
  PlannerOutput bad = p.Poll(At(110));
  REQUIRE(bad.failures.size() == 1);
  CHECK(bad.failures[0].name == "w");
  CHECK(p.PendingCount() == 0);
  PlannerOutput again = Step(&p, {Allreduce("w", 4)}, &hints, 200);
  CHECK(again.failures.empty());
  CHECK(BucketNames(again) == std::vector<VS>{{"w"}});
  // A duplicate through the hint is still a duplicate.
  p.Submit(0, Allreduce("w", 4), At(300), 0, &hints[0][0]);
  p.Submit(0, Allreduce("w", 4), At(300), 0, &hints[0][0]);
  PlannerOutput dup = p.Poll(At(300));
  REQUIRE(dup.failures.size() == 1);
  CHECK(dup.failures[0].status.code() == Code::kAlreadyExists);
}

TEST_CASE("idle names are forgotten after a while; their hints are looked up again", "[planner]") {
  Planner p(Config(2));
  std::vector<std::vector<PlannerHint>> hints(2, std::vector<PlannerHint>(1));
  REQUIRE(Step(&p, {Allreduce("kept", 4)}, &hints, 0).buckets.size() == 1);
  const PlannerHint before = hints[0][0];
  // One-shot names, one per step, for 30 s: each is idle after its step.
  for (int s = 1; s <= 30; ++s) {
    std::vector<std::vector<PlannerHint>> once(2, std::vector<PlannerHint>(1));
    REQUIRE(Step(&p, {Allreduce("once." + std::to_string(s), 1)}, &once, 1000 * s).buckets.size() ==
            1);
  }
  CHECK(p.PendingCount() == 0);
  // "kept" was idle for more than 10 s: forgotten, so the epoch moved and the hint is stale.
  PlannerOutput out = Step(&p, {Allreduce("kept", 4)}, &hints, 31000);
  CHECK(out.failures.empty());
  CHECK(BucketNames(out) == std::vector<VS>{{"kept"}});
  CHECK(hints[0][0].epoch != before.epoch);
  CHECK(hints[1][0].name == hints[0][0].name);
}

TEST_CASE("a hint from another planner is not used", "[planner]") {
  Planner a(Config(2)), b(Config(2));
  std::vector<std::vector<PlannerHint>> hints(2, std::vector<PlannerHint>(1));
  REQUIRE(Step(&a, {Allreduce("x", 4)}, &hints, 0).buckets.size() == 1);
  const PlannerHint from_a = hints[0][0];
  PlannerOutput out = Step(&b, {Allreduce("y", 4)}, &hints, 0);  // b looks "y" up
  CHECK(out.failures.empty());
  CHECK(BucketNames(out) == std::vector<VS>{{"y"}});
  CHECK(hints[0][0].epoch != from_a.epoch);
  CHECK(hints[0][0].name != from_a.name);
}

}  // namespace
}  // namespace hora
