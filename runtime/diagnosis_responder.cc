#include "runtime/diagnosis_responder.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/thread_name.h"
#include "runtime/timeline.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr size_t kRingTail = 16;  // records of the ring in the detail

std::string Seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

std::string Describe(const FlightRecord& r) {
  std::string s = std::string(CollectiveName(r.kind)) + " '" + r.name + "'";
  if (r.process_set != kGlobalProcessSet)
    s += " (process set " + std::to_string(r.process_set) + ")";
  return s + " " + std::to_string(r.bytes) + " B";
}

std::string ReadSmall(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// Every thread of this process: its id, name, state (R running, S sleeping, D in the kernel
// uninterruptibly, T stopped) and the kernel function it sleeps in.
std::string Threads() {
  std::string out = "threads of this process (tid name state wchan):\n";
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out + "  (no /proc/self/task)\n";
  std::vector<std::string> lines;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    const std::string stat = ReadSmall(base + "/stat");
    const size_t paren = stat.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    lines.push_back("  " + std::string(e->d_name) + " " + ReadSmall(base + "/comm") + " " + state +
                    " " + ReadSmall(base + "/wchan"));
  }
  closedir(dir);
  std::sort(lines.begin(), lines.end());
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace

DiagnosisResponder::DiagnosisResponder(const FlightRecorder* recorder, Send send)
    : recorder_(recorder), send_(std::move(send)) {
  thread_ = std::thread([this] {
    SetThreadName("hora-diagnose");
    Loop();
  });
}

DiagnosisResponder::~DiagnosisResponder() { Stop(); }

void DiagnosisResponder::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  python_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void DiagnosisResponder::Request(DiagnosisRequest request) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    requests_.push_back(std::move(request));
  }
  cv_.NotifyAll();
}

int64_t DiagnosisResponder::WaitForPython(milliseconds timeout) {
  MutexLock lock(&mu_);
  python_registered_ = true;
  python_cv_.WaitFor(&mu_, timeout, [this] {
    mu_.AssertHeld();
    return stop_ || python_wanted_ > python_taken_;
  });
  if (stop_) return -1;
  if (python_wanted_ <= python_taken_) return 0;
  python_taken_ = python_wanted_;
  return python_taken_;
}

void DiagnosisResponder::AnswerPython(int64_t id, std::string where, std::string stacks) {
  {
    MutexLock lock(&mu_);
    if (id != python_wanted_) return;  // late: that request was answered without Python
    python_answered_ = id;
    python_where_ = std::move(where);
    python_stacks_ = std::move(stacks);
  }
  cv_.NotifyAll();
}

void DiagnosisResponder::Loop() {
  MutexLock lock(&mu_);
  while (true) {
    cv_.Wait(&mu_, [this] {
      mu_.AssertHeld();
      return stop_ || !requests_.empty();
    });
    if (stop_) return;
    DiagnosisRequest request = std::move(requests_.front());
    requests_.pop_front();
    lock.Unlock();
    DiagnosisReport report = Build(request);
    send_(report);
    lock.Lock();
  }
}

DiagnosisReport DiagnosisResponder::Build(const DiagnosisRequest& request) {
  DiagnosisReport report;
  report.id = request.id;
  std::string stacks;
  {
    MutexLock lock(&mu_);
    if (python_registered_) {
      const auto wait = std::max(milliseconds(100), request.deadline / 2);
      python_wanted_ = static_cast<int64_t>(request.id);
      python_cv_.NotifyAll();
      const bool answered = cv_.WaitFor(&mu_, wait, [this] {
        mu_.AssertHeld();
        return stop_ || python_answered_ == python_wanted_;
      });
      if (answered && python_answered_ == python_wanted_) {
        report.python = DiagnosisReport::Python::kAnswered;
        report.where = std::move(python_where_);
        stacks = std::move(python_stacks_);
      } else {
        report.python = DiagnosisReport::Python::kSilent;
        report.python_wait = wait;
      }
    }
  }
  FromRecords(recorder_->Snapshot(), TimelineNowUs(), kRingTail, &report);
  if (!stacks.empty()) report.detail = "Python threads:\n" + stacks + "\n" + report.detail;
  report.detail += Threads();
  return report;
}

void DiagnosisResponder::FromRecords(const std::vector<FlightRecord>& records, int64_t now_us,
                                     size_t tail, DiagnosisReport* report) {
  const FlightRecord* last = nullptr;
  for (const FlightRecord& r : records) {
    if (r.state == FlightState::kPending || r.state == FlightState::kRunning) {
      report->pending.push_back(Describe(r) + ", " + FlightStateName(r.state) + " for " +
                                Seconds(now_us - r.enqueue_us));
    } else if (r.state == FlightState::kDone && (last == nullptr || r.end_us > last->end_us)) {
      last = &r;
    }
  }
  if (last != nullptr)
    report->last_completed = Describe(*last) + ", " + Seconds(now_us - last->end_us) + " ago";
  std::ostringstream d;
  d << "flight recorder (newest " << std::min(tail, records.size()) << " of " << records.size()
    << "; times before now):\n";
  const size_t first = records.size() > tail ? records.size() - tail : 0;
  for (size_t i = first; i < records.size(); ++i) {
    const FlightRecord& r = records[i];
    d << "  #" << r.handle << " " << Describe(r) << " " << FlightStateName(r.state) << " enqueued -"
      << Seconds(now_us - r.enqueue_us);
    if (r.start_us != 0) d << " started -" << Seconds(now_us - r.start_us);
    if (r.end_us != 0) d << " ended -" << Seconds(now_us - r.end_us);
    d << "\n";
  }
  report->detail += d.str();
}

}  // namespace hora
