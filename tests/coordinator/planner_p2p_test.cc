// The planner's send/recv pairs: readiness of the two ranks only, validation, stalls, join.
#include <catch2/catch.hpp>

#include "coordinator/planner.h"
#include "tests/coordinator/planner_test_util.h"

using namespace hora;
using namespace hora::testing;

namespace {

TensorSpec Transfer(CollectiveType c, int peer, int64_t n = 8, DataType t = DataType::kFloat32) {
  TensorSpec s = Spec("hora.p2p.1>3.t0.0", c, {n}, t);
  s.peer = peer;
  return s;
}

}  // namespace

TEST_CASE("p2p: a send and its recv make one bucket of two participants, rooted at the sender") {
  Planner p(Config(4));
  p.Submit(1, Transfer(CollectiveType::kSend, 3), At(0));
  PlannerOutput out = p.Poll(At(0));
  REQUIRE(out.buckets.empty());  // the receiver has not posted yet; the others play no part
  REQUIRE(p.Stalled(At(100), std::chrono::milliseconds(50)).at(0).missing_ranks ==
          std::vector<int>{3});
  p.Submit(3, Transfer(CollectiveType::kRecv, 1), At(1));
  out = p.Poll(At(1));
  REQUIRE(out.failures.empty());
  REQUIRE(out.buckets.size() == 1);
  const PlannedBucket& b = out.buckets[0];
  REQUIRE(b.collective == CollectiveType::kSend);
  REQUIRE(b.participants == std::vector<int>{1, 3});
  REQUIRE(b.root == 1);
  REQUIRE(b.entries.at(0).num_elements == 8);
  REQUIRE(p.PendingCount() == 0);
}

TEST_CASE("p2p: a size or dtype that differs fails both sides, naming the field") {
  for (bool dtype : {false, true}) {
    Planner p(Config(4));
    p.Submit(1, Transfer(CollectiveType::kSend, 3), At(0));
    p.Submit(3,
             dtype ? Transfer(CollectiveType::kRecv, 1, 8, DataType::kInt32)
                   : Transfer(CollectiveType::kRecv, 1, 9),
             At(0));
    PlannerOutput out = p.Poll(At(0));
    REQUIRE(out.buckets.empty());
    REQUIRE(out.failures.size() == 1);
    const TensorFailure& f = out.failures[0];
    REQUIRE(f.status.code() == Code::kMismatch);
    INFO(f.status.message());
    REQUIRE(f.status.message().find(dtype ? "dtype differs" : "size differs") != std::string::npos);
    REQUIRE(f.status.message().find("from rank 1 to rank 3") != std::string::npos);
    REQUIRE(f.submitted == std::vector<bool>{false, true, false, true});
  }
}

TEST_CASE("p2p: a bad peer or a third rank fails that rank alone") {
  Planner p(Config(4));
  p.Submit(2, Transfer(CollectiveType::kSend, 2), At(0));  // to itself
  p.Submit(0, Transfer(CollectiveType::kSend, 9), At(0));  // out of range
  PlannerOutput out = p.Poll(At(0));
  REQUIRE(out.failures.size() == 2);
  for (const TensorFailure& f : out.failures) {
    REQUIRE(f.status.code() == Code::kInvalidArgument);
    REQUIRE(f.status.message().find("peer") != std::string::npos);
  }
  p.Submit(1, Transfer(CollectiveType::kSend, 3), At(1));
  p.Submit(2, Transfer(CollectiveType::kRecv, 1), At(1));  // same name, not a participant
  out = p.Poll(At(1));
  REQUIRE(out.failures.size() == 1);
  REQUIRE(out.failures[0].submitted == std::vector<bool>{false, false, true, false});
  REQUIRE(out.failures[0].status.message().find("between ranks 1 and 3") != std::string::npos);
  p.Submit(3, Transfer(CollectiveType::kRecv, 1), At(2));  // the real receiver still matches
  REQUIRE(p.Poll(At(2)).buckets.size() == 1);
}

TEST_CASE("p2p: a join does not complete a transfer, and transfers run while ranks joined") {
  Planner p(Config(3));
  p.Join(0, At(0));
  p.Submit(1, Transfer(CollectiveType::kSend, 2), At(1));
  REQUIRE(p.Poll(At(1)).buckets.empty());
  p.Submit(2, Transfer(CollectiveType::kRecv, 1), At(2));
  PlannerOutput out = p.Poll(At(2));
  REQUIRE(out.buckets.size() == 1);
  REQUIRE(out.buckets[0].joined_ranks == 0);
}
