// This rank's side of the diagnosis (coordinator/service_diagnose.cc describes the round):
// answers each Diagnose request with a DiagnosisReport built from the flight recorder, the
// state of this process's threads (/proc/self/task) and, where a Python hook is registered,
// the stacks of the Python threads.
//
// The Python hook is a thread of the Python package (hora/_diagnose.py) that waits in
// WaitForPython (through hora_diagnosis_wait) and answers through AnswerPython. A request is
// answered without it when it does not answer within half the request's deadline: then
// Python cannot run (a C call that holds the GIL, a deadlock) and the report says so, with
// the last operation this rank completed.
//
// Threads: Request is called on the coordinator client's reader thread and never blocks; one
// thread of this object builds and sends the reports; any number of Python threads may wait.
// Stop (also the destructor) wakes every waiter and joins the thread, bounded by the request
// being answered (at most half its deadline).
#ifndef HORA_RUNTIME_DIAGNOSIS_RESPONDER_H_
#define HORA_RUNTIME_DIAGNOSIS_RESPONDER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "coordinator/messages.h"
#include "runtime/flight_recorder.h"

namespace hora {

class DiagnosisResponder {
 public:
  using Send = std::function<void(const DiagnosisReport&)>;
  // recorder: not owned, outlives this. send: called on this object's thread.
  DiagnosisResponder(const FlightRecorder* recorder, Send send);
  ~DiagnosisResponder();
  DiagnosisResponder(const DiagnosisResponder&) = delete;
  DiagnosisResponder& operator=(const DiagnosisResponder&) = delete;

  void Request(DiagnosisRequest request) EXCLUDES(mu_);

  // The Python hook. WaitForPython blocks until a request wants Python's stacks (returns its
  // id, > 0), `timeout` passes (0) or Stop (-1); the first call registers the hook.
  int64_t WaitForPython(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // where: the main thread's innermost frames outside Hora; stacks: every thread's stack.
  void AnswerPython(int64_t id, std::string where, std::string stacks) EXCLUDES(mu_);

  void Stop() EXCLUDES(mu_);

  // The report's parts from the recorder, at `now_us` (steady microseconds): pending
  // operations, the last completed one, the ring's newest `tail` records. For tests.
  static void FromRecords(const std::vector<FlightRecord>& records, int64_t now_us, size_t tail,
                          DiagnosisReport* report);

 private:
  void Loop() EXCLUDES(mu_);
  DiagnosisReport Build(const DiagnosisRequest& request) EXCLUDES(mu_);

  const FlightRecorder* const recorder_;
  const Send send_;

  Mutex mu_;
  CondVar cv_;         // Loop waits for requests and answers
  CondVar python_cv_;  // the Python hook waits for requests
  bool stop_ GUARDED_BY(mu_) = false;
  std::deque<DiagnosisRequest> requests_ GUARDED_BY(mu_);
  bool python_registered_ GUARDED_BY(mu_) = false;
  int64_t python_wanted_ GUARDED_BY(mu_) = 0;  // the request id Python should answer
  int64_t python_taken_ GUARDED_BY(mu_) = 0;   // the last id handed to a Python waiter
  int64_t python_answered_ GUARDED_BY(mu_) = 0;
  std::string python_where_ GUARDED_BY(mu_);
  std::string python_stacks_ GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_DIAGNOSIS_RESPONDER_H_
