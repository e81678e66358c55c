// The diagnosis text (coordinator/service_diagnosis.h) from tables of reports, and a rank's
// report parts from flight records (runtime/diagnosis_responder.h).
#include <catch2/catch.hpp>

#include "coordinator/service_diagnosis.h"
#include "runtime/diagnosis_responder.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

DiagnosisInput ThreeRanks() {
  DiagnosisInput in;
  in.reason = "stall timeout";
  in.ranks = {"rank 0 (host h1, pid 10)", "rank 1 (host h2, pid 4711)", "rank 2 (host h3, pid 12)"};
  in.lost = {false, false, false};
  in.reports.resize(3);
  in.deadline = milliseconds(3000);
  StallReport st;
  st.name = "'grad.7'";
  st.collective = CollectiveType::kAllreduce;
  st.ready_ranks = {0, 2};
  st.missing_ranks = {1};
  st.age = milliseconds(10000);
  in.stalls = {st};
  for (int r : {0, 2}) {
    DiagnosisReport rep;
    rep.python = DiagnosisReport::Python::kAnswered;
    rep.where = "main (train.py:30)";
    rep.pending = {"allreduce 'grad.7' 4 B, pending for 10.0 s"};
    in.reports[r] = rep;
  }
  return in;
}

TEST_CASE("diagnosis names the missing rank, the tensor, its Python frames and the waiters") {
  DiagnosisInput in = ThreeRanks();
  DiagnosisReport r1;
  r1.python = DiagnosisReport::Python::kAnswered;
  r1.where = "stuck_in_data_loader (train.py:12) <- main (train.py:30)";
  r1.detail = "Python threads:\n...";
  in.reports[1] = r1;
  DiagnosisText t = ComposeDiagnosis(in);
  CHECK(t.summary ==
        "diagnosis (stall timeout):\n  rank 1 (host h2, pid 4711) never submitted allreduce "
        "'grad.7': it is in stuck_in_data_loader (train.py:12) <- main (train.py:30); ranks 0,2 "
        "have waited for it in allreduce 'grad.7' for 10 s");
  CHECK(t.full.find("== rank 1 (host h2, pid 4711) ==\npending: 0\n") != std::string::npos);
  CHECK(t.full.find("Python threads:\n...") != std::string::npos);
}

TEST_CASE("diagnosis names a rank wedged in C, a silent one and a lost one") {
  DiagnosisInput in = ThreeRanks();
  DiagnosisReport r1;
  r1.python = DiagnosisReport::Python::kSilent;
  r1.python_wait = milliseconds(1500);
  r1.last_completed = "allreduce 'warmup' 4 B, 12.0 s ago";
  in.reports[1] = r1;
  std::string s = ComposeDiagnosis(in).summary;
  CHECK(s.find("it is wedged outside Python: its Python threads did not answer within 1.5 s") !=
        std::string::npos);
  CHECK(s.find("its last completed operation was allreduce 'warmup' 4 B, 12.0 s ago") !=
        std::string::npos);

  in.reports[1].reset();
  s = ComposeDiagnosis(in).summary;
  CHECK(s.find("it did not answer the diagnosis within 3 s") != std::string::npos);

  in.lost[1] = true;
  s = ComposeDiagnosis(in).summary;
  CHECK(s.find("rank 1 (host h2, pid 4711) never submitted allreduce 'grad.7': it is lost") !=
        std::string::npos);
}

TEST_CASE("an on-demand diagnosis has a line per rank") {
  DiagnosisInput in = ThreeRanks();
  in.reason = "asked by rank 0";
  in.stalls.clear();
  DiagnosisReport r1;
  r1.python = DiagnosisReport::Python::kNone;
  in.reports[1] = r1;
  const std::string s = ComposeDiagnosis(in).summary;
  CHECK(s ==
        "diagnosis (asked by rank 0):\n"
        "  rank 0 (host h1, pid 10): 1 pending (allreduce 'grad.7' 4 B, pending for 10.0 s); "
        "it is in main (train.py:30)\n"
        "  rank 1 (host h2, pid 4711): nothing pending; it runs no Python (no stack to show); "
        "its last completed operation was none\n"
        "  rank 2 (host h3, pid 12): 1 pending (allreduce 'grad.7' 4 B, pending for 10.0 s); "
        "it is in main (train.py:30)");
}

TEST_CASE("a rank's report lists its pending operations and its last completed one") {
  std::vector<FlightRecord> recs(4);
  const char* names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) {
    recs[i].handle = i + 1;
    recs[i].name = names[i];
    recs[i].bytes = 4;
    recs[i].enqueue_us = 1000000 * (i + 1);
  }
  recs[0].state = FlightState::kDone;
  recs[0].end_us = 1500000;
  recs[1].state = FlightState::kDone;
  recs[1].end_us = 2500000;
  recs[2].state = FlightState::kFailed;
  recs[2].end_us = 3500000;
  recs[3].state = FlightState::kPending;
  DiagnosisReport rep;
  DiagnosisResponder::FromRecords(recs, 10000000, 2, &rep);
  REQUIRE(rep.pending.size() == 1);
  CHECK(rep.pending[0] == "allreduce 'd' 4 B, pending for 6.0 s");
  CHECK(rep.last_completed == "allreduce 'b' 4 B, 7.5 s ago");
  CHECK(rep.detail.find("newest 2 of 4") != std::string::npos);
  CHECK(rep.detail.find("#3 allreduce 'c' 4 B failed") != std::string::npos);
  CHECK(rep.detail.find("#2 ") == std::string::npos);
}

}  // namespace
}  // namespace hora
