// The timeline: where this rank's time goes, as Chrome trace events (chrome://tracing and
// Perfetto open the file; tools/timeline merges the ranks' files and writes a straggler report).
//
// Every rank writes its own file: rank 0 the path it was given (where Horovod's one timeline
// is), rank r > 0 the path with ".rank<r>" (TimelineRankPath). Events carry Horovod's names, so
// that its users' tools read them. Per tensor (one track per tensor name) the phases follow each
// other on the same track:
//   NEGOTIATE_<OP>  submission until this rank got the plan, i.e. until every rank had
//               submitted it (<OP>: ALLREDUCE, ALLGATHER, BROADCAST, ...); args: the rank that
//               came last (global), how long after the first rank it came (lag_us) and how
//               long this rank waited for it (wait_us), both as the coordinator saw the
//               arrivals.
//   <OP>        plan received until the handles complete (the framework's wait returns); args:
//               backend, bucket bytes, process set, bucket seq. Nested in it:
//     QUEUE                     plan received until the set's executor started the bucket;
//     MEMCPY_IN_FUSION_BUFFER   taking the requests and packing the fusion buffer (prescale);
//     <BACKEND>_<OP>            the data-plane call (GLOO_ALLREDUCE, SHM_ALLREDUCE, ...; none
//                               when the coordinator reduced the bucket inline);
//     MEMCPY_OUT_FUSION_BUFFER  copying out of the fusion buffer (postscale).
// A track "diagnosis" (rank 0's file) holds an instant, global in scope, for each diagnosis
// round (coordinator/service_diagnose.cc): args "summary" (the message rank 0 logged) and
// "report" (the whole text, as written to HORA_DIAGNOSE_FILE).
// Per process set a track "set N buckets" holds one span per bucket (its tensors, bytes,
// backend) with the copies and the data-plane call nested. A track "steps" marks the job's
// steps: a step starts each time the first tensor name this timeline saw (in the global set)
// is submitted again. With mark_cycles (HORA_TIMELINE_MARK_CYCLES) it also holds an instant
// CYCLE_START for each plan this rank received (the coordinator's cycle that planned it) and
// each bucket it ran on the steady path (a round of agreement without the coordinator).
//
// Timestamps are microseconds on the coordinator's steady clock: each rank adds its offset
// (measured when the timeline starts, see CoordinatorClient::ClockOffsetUs), so the ranks' events
// line up. pid = global rank.
//
// Cost: when off, every hook is one relaxed atomic load and a branch at the call site
// (`if (timeline.on())`). When on, a hook takes a lock and appends a small record; the writer
// thread turns them into JSON and writes them, so formatting and I/O never run on the
// framework's or the executors' threads. The writer wakes once per batch (1024 records, or
// 50 ms after a batch's first record), so the file lags the job by up to that much.
//
// Thread safety: every method may be called from any thread. Start and Stop are serialized
// with each other. Records that arrive while the timeline is off are dropped.
#ifndef HORA_RUNTIME_TIMELINE_H_
#define HORA_RUNTIME_TIMELINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

// The timeline's clock: the steady clock in microseconds.
inline int64_t TimelineNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The file rank `rank` writes for HORA_TIMELINE=path: rank 0 the path itself; others "t.json"
// -> "t.rank3.json", other names with ".rank3" appended.
std::string TimelineRankPath(const std::string& path, int rank);

// One bucket as it ran on this rank, recorded as its handles are about to complete.
struct TimelineBucket {
  struct Tensor {
    int64_t handle = 0;  // joins the tensor's submission
    int64_t bytes = 0;
    int32_t last_rank = -1;  // from the plan (global rank)
    int64_t lag_us = 0;
    int64_t wait_us = 0;
  };
  int32_t process_set = 0;
  uint64_t seq = 0;     // the coordinator's bucket seq; the steady path's own count when steady
  bool steady = false;  // ran on the steady path (no plan: its seqs are a count of their own)
  CollectiveType collective = CollectiveType::kAllreduce;
  std::string backend;  // the communicator's name; "coordinator" when inline
  bool inline_reduced = false;
  int64_t bytes = 0;
  std::vector<Tensor> tensors;
  // Steady-clock microseconds (TimelineNowUs); 0 = did not happen.
  int64_t start_us = 0;            // the executor took the bucket
  int64_t collective_us = 0;       // the data-plane call began (packing done)
  int64_t collective_done_us = 0;  // the communicator's work was done
  int64_t unpacked_us = 0;
  int64_t completed_us = 0;  // the handles are completed
  std::string error;         // non-empty: the bucket failed
};

class Timeline {
 public:
  Timeline() = default;
  ~Timeline();  // Stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (this rank's own file, truncated). clock_offset_us: the
  // coordinator's clock minus ours. label names the process in the trace ("rank 1 (host a)").
  // mark_cycles: write CYCLE_START instants (above). FAILED_PRECONDITION when already on;
  // INVALID_ARGUMENT naming the path when it cannot be opened.
  Status Start(const std::string& path, int rank, const std::string& label, int64_t clock_offset_us,
               bool mark_cycles = false);
  // Writes what was recorded, closes the JSON array and the file. OK when already off.
  Status Stop();
  bool on() const { return on_.load(std::memory_order_relaxed); }
  std::string path() const;

  // Hooks (call when on(); they drop the record if the timeline stopped meanwhile).
  // A tensor was submitted on this rank (before it could be announced).
  void Submitted(int64_t handle, const TensorSpec& spec, int64_t at_us);
  // This rank received a plan with these buckets: (set, seq) each.
  void Planned(const std::vector<std::pair<int32_t, uint64_t>>& buckets, int64_t at_us);
  void BucketDone(TimelineBucket bucket);
  // A diagnosis round ended (rank 0): its one-message summary and its whole report.
  void Diagnosis(int64_t at_us, std::string summary, std::string report);

 private:
  struct Submission {
    int64_t handle;
    int64_t at_us;
    int32_t process_set;
    CollectiveType collective;
    std::string name;
  };
  struct DiagnosisNote {
    int64_t at_us;
    std::string summary;
    std::string report;
  };
  struct Pending {
    std::vector<Submission> submissions;
    std::vector<std::pair<std::pair<int32_t, uint64_t>, int64_t>> planned;
    std::vector<int64_t> plans;  // when each plan came (CYCLE_START)
    std::vector<TimelineBucket> buckets;
    std::vector<DiagnosisNote> diagnoses;
  };
  // The writer thread's own state: tracks and the joins between records.
  struct Tensor {
    int tid;
    int64_t at_us;
    std::string name;
  };
  void WriterLoop();
  void Write(Pending* batch);
  void WriteBucket(const TimelineBucket& b);
  void WriteStep(const Submission& s);
  int TrackOf(int32_t process_set, const std::string& name);
  void Event(const char* name, int tid, int64_t begin_us, int64_t end_us, const std::string& args);
  // scope: "t" (the track), "p" (the rank), "g" (the whole trace); args: "" or key-value pairs.
  void Instant(const char* name, int tid, int64_t at_us, const char* scope = "t",
               const std::string& args = "");
  void Metadata(const char* what, int tid, const std::string& args);
  int64_t Ts(int64_t us) const { return us + offset_us_; }

  Mutex start_mu_;  // serializes Start and Stop
  std::atomic<bool> on_{false};

  mutable Mutex mu_ ACQUIRED_AFTER(start_mu_);
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;  // records are accepted
  bool stop_ GUARDED_BY(mu_) = false;  // the writer drains and exits
  Pending pending_ GUARDED_BY(mu_);
  size_t pending_records_ GUARDED_BY(mu_) = 0;
  std::string path_ GUARDED_BY(mu_);

  // Set by Start before the writer starts; then the writer's alone until Stop joins it.
  std::FILE* file_ = nullptr;
  int rank_ = 0;
  int64_t offset_us_ = 0;
  bool mark_cycles_ = false;
  bool first_event_ = true;
  std::string out_;                                          // the batch being formatted
  std::unordered_map<int64_t, Tensor> submitted_;            // by handle, until its bucket is done
  std::map<std::pair<int32_t, uint64_t>, int64_t> planned_;  // (set, seq) -> received
  std::map<std::pair<int32_t, std::string>, int> tracks_;    // (set, name) -> tid
  std::map<int32_t, bool> set_tracks_;                       // sets whose bucket track is named
  bool diagnosis_track_ = false;                             // the diagnosis track is named
  std::string step_anchor_;  // the first name seen in the global set
  int64_t step_start_us_ = -1;
  int64_t steps_ = 0;
  std::thread writer_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_TIMELINE_H_
