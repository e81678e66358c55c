#include "runtime/timeline.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"

namespace hora {
namespace {

constexpr int kStepsTrack = 0;
constexpr int kFirstSetTrack = 1;           // + process set id: the set's buckets
constexpr int kDiagnosisTrack = 999999;     // below the sets' tracks, above the tensors'
constexpr int kFirstTensorTrack = 1000000;  // tensors, in order of first sight
// The writer wakes for a batch of this many records, or this long after the first record
// of a batch, whichever comes first: a record costs its producer no wake-up of another thread.
constexpr size_t kBatchRecords = 1024;
// 50 ms: a job's last events are in the file soon after its last wait returns (Horovod's
// timeline test reads it 100 ms later), at 20 wake-ups a second at most.
constexpr std::chrono::milliseconds kBatchWait(50);

void AppendEscaped(std::string* out, const std::string& s) {
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  AppendEscaped(&out, s);
  return out + "\"";
}

std::string Kv(const char* key, int64_t v) {
  return std::string("\"") + key + "\":" + std::to_string(v);
}
std::string Kv(const char* key, const std::string& v) {
  return std::string("\"") + key + "\":" + Quoted(v);
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Horovod's name of the data-plane call: the backend's name up to its first character that is
// not a letter or digit ("steady:shm" -> "STEADY"), "_", the operation.
std::string DataPlaneName(const std::string& backend, const std::string& op) {
  const auto end = std::find_if(backend.begin(), backend.end(), [](char c) {
    return !std::isalnum(static_cast<unsigned char>(c));
  });
  const std::string name(backend.begin(), end);
  return Upper(name.empty() ? "data" : name) + "_" + op;
}

}  // namespace

std::string TimelineRankPath(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::string tag = ".rank" + std::to_string(rank);
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + tag + ext;
  }
  return path + tag;
}

Timeline::~Timeline() {
  Status s = Stop();  // a destructor cannot return it: say that the file is incomplete
  if (!s.ok()) HORA_LOG_WARN("{}", s.message());
}

std::string Timeline::path() const {
  MutexLock lock(&mu_);
  return path_;
}

Status Timeline::Start(const std::string& path, int rank, const std::string& label,
                       int64_t clock_offset_us, bool mark_cycles) {
  MutexLock serial(&start_mu_);
  {
    MutexLock lock(&mu_);
    if (open_) {
      return Status(Code::kFailedPrecondition,
                    "the timeline is already being written to '" + path_ + "'; stop it first");
    }
  }
  if (path.empty()) return InvalidArgument("the timeline needs a file name");
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return InvalidArgument("cannot write the timeline to '" + path + "': " + std::strerror(errno));
  }
  file_ = f;
  rank_ = rank;
  offset_us_ = clock_offset_us;
  mark_cycles_ = mark_cycles;
  first_event_ = true;
  out_ = "[\n";
  submitted_.clear();
  planned_.clear();
  tracks_.clear();
  set_tracks_.clear();
  diagnosis_track_ = false;
  step_anchor_.clear();
  step_start_us_ = -1;
  steps_ = 0;
  Metadata("process_name", 0, Kv("name", label));
  Metadata("process_sort_index", 0, Kv("sort_index", rank));
  Metadata("process_labels", 0,
           Kv("labels", "clock offset to rank 0: " + std::to_string(clock_offset_us) + " us"));
  Metadata("thread_name", kStepsTrack, Kv("name", "steps"));
  Metadata("thread_sort_index", kStepsTrack, Kv("sort_index", kStepsTrack));
  {
    MutexLock lock(&mu_);
    path_ = path;
    open_ = true;
    stop_ = false;
    pending_ = Pending();
    pending_records_ = 0;
  }
  writer_ = std::thread([this] {
    SetThreadName("hora-timeline");
    WriterLoop();
  });
  on_.store(true, std::memory_order_relaxed);
  return Status::Ok();
}

Status Timeline::Stop() {
  MutexLock serial(&start_mu_);
  on_.store(false, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    if (!open_) return Status::Ok();
    open_ = false;
    stop_ = true;
  }
  cv_.NotifyAll();
  writer_.join();
  out_ += "\n]\n";
  const bool wrote = std::fwrite(out_.data(), 1, out_.size(), file_) == out_.size();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  out_.clear();
  std::string path;
  {
    MutexLock lock(&mu_);
    path = path_;
  }
  if (!wrote || !closed) return Internal("writing the timeline '" + path + "' failed");
  return Status::Ok();
}

void Timeline::Submitted(int64_t handle, const TensorSpec& spec, int64_t at_us) {
  MutexLock lock(&mu_);
  if (!open_) return;
  pending_.submissions.push_back({handle, at_us, spec.process_set, spec.collective, spec.name});
  if (++pending_records_ == 1 || pending_records_ == kBatchRecords) cv_.NotifyOne();
}

void Timeline::Planned(const std::vector<std::pair<int32_t, uint64_t>>& buckets, int64_t at_us) {
  MutexLock lock(&mu_);
  if (!open_) return;
  for (const auto& key : buckets) pending_.planned.push_back({key, at_us});
  pending_.plans.push_back(at_us);
  if (++pending_records_ == 1 || pending_records_ == kBatchRecords) cv_.NotifyOne();
}

void Timeline::BucketDone(TimelineBucket bucket) {
  MutexLock lock(&mu_);
  if (!open_) return;
  pending_.buckets.push_back(std::move(bucket));
  if (++pending_records_ == 1 || pending_records_ == kBatchRecords) cv_.NotifyOne();
}

void Timeline::Diagnosis(int64_t at_us, std::string summary, std::string report) {
  MutexLock lock(&mu_);
  if (!open_) return;
  pending_.diagnoses.push_back({at_us, std::move(summary), std::move(report)});
  if (++pending_records_ == 1 || pending_records_ == kBatchRecords) cv_.NotifyOne();
}

void Timeline::WriterLoop() {
  for (;;) {
    Pending batch;
    bool last = false;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&] {
        mu_.AssertHeld();
        return stop_ || pending_records_ > 0;
      });
      cv_.WaitFor(&mu_, kBatchWait, [&] {
        mu_.AssertHeld();
        return stop_ || pending_records_ >= kBatchRecords;
      });
      std::swap(batch, pending_);
      pending_records_ = 0;
      last = stop_;
    }
    Write(&batch);
    if (last) return;  // Stop writes the rest of out_ and closes the file
    std::fwrite(out_.data(), 1, out_.size(), file_);
    std::fflush(file_);
    out_.clear();
  }
}

// Submissions before plans before buckets: a bucket done in this batch may have been
// submitted and planned in it too.
void Timeline::Write(Pending* batch) {
  for (Submission& s : batch->submissions) {
    WriteStep(s);
    submitted_[s.handle] = Tensor{TrackOf(s.process_set, s.name), s.at_us, std::move(s.name)};
  }
  for (const auto& [key, at] : batch->planned) planned_[key] = at;
  if (mark_cycles_) {
    for (int64_t at : batch->plans) Instant("CYCLE_START", kStepsTrack, at, "p");
  }
  for (const TimelineBucket& b : batch->buckets) WriteBucket(b);
  for (const DiagnosisNote& d : batch->diagnoses) {
    if (!diagnosis_track_) {
      diagnosis_track_ = true;
      Metadata("thread_name", kDiagnosisTrack, Kv("name", "diagnosis"));
      Metadata("thread_sort_index", kDiagnosisTrack, Kv("sort_index", kDiagnosisTrack));
    }
    Instant("diagnosis", kDiagnosisTrack, d.at_us, "g",
            Kv("summary", d.summary) + "," + Kv("report", d.report));
  }
}

void Timeline::WriteStep(const Submission& s) {
  if (s.process_set != kGlobalProcessSet) return;
  if (step_anchor_.empty()) step_anchor_ = s.name;
  if (s.name != step_anchor_) return;
  if (step_start_us_ >= 0) {
    Event("step", kStepsTrack, step_start_us_, s.at_us, Kv("step", steps_));
    ++steps_;
  }
  step_start_us_ = s.at_us;
}

int Timeline::TrackOf(int32_t process_set, const std::string& name) {
  auto [it, inserted] = tracks_.try_emplace({process_set, name}, 0);
  if (inserted) {
    it->second = kFirstTensorTrack + static_cast<int>(tracks_.size()) - 1;
    const std::string track = process_set == kGlobalProcessSet
                                  ? name
                                  : "set " + std::to_string(process_set) + ": " + name;
    Metadata("thread_name", it->second, Kv("name", track));
    Metadata("thread_sort_index", it->second, Kv("sort_index", it->second));
  }
  return it->second;
}

void Timeline::WriteBucket(const TimelineBucket& b) {
  const int set_tid = kFirstSetTrack + b.process_set;
  if (set_tracks_.emplace(b.process_set, true).second) {
    Metadata("thread_name", set_tid,
             Kv("name", "set " + std::to_string(b.process_set) + " buckets"));
    Metadata("thread_sort_index", set_tid, Kv("sort_index", set_tid));
  }
  const std::string collective =
      std::string(CollectiveName(b.collective)) + (b.inline_reduced ? " (inline)" : "");
  const std::string op = Upper(CollectiveName(b.collective));
  const std::string negotiate = "NEGOTIATE_" + op;
  const std::string data_plane = DataPlaneName(b.backend, op);
  // A steady bucket's seq counts the set's steady instances, apart from the coordinator's:
  // "steady" tells the report the two apart.
  const std::string bucket = Kv("process_set", b.process_set) + "," +
                             Kv("bucket", static_cast<int64_t>(b.seq)) + "," +
                             (b.steady ? Kv("steady", int64_t{1}) + "," : std::string());
  const std::string common = bucket + Kv("backend", b.backend) + "," + Kv("bucket_bytes", b.bytes) +
                             "," + Kv("tensors", static_cast<int64_t>(b.tensors.size())) +
                             (b.error.empty() ? "" : "," + Kv("error", b.error));
  const auto planned = b.steady ? planned_.end() : planned_.find({b.process_set, b.seq});
  const int64_t planned_us = planned == planned_.end() ? 0 : planned->second;
  if (planned != planned_.end()) planned_.erase(planned);
  const int64_t start = b.start_us;
  const int64_t coll = b.collective_us > 0 ? b.collective_us : start;
  const int64_t coll_done = b.collective_done_us > 0 ? b.collective_done_us : coll;
  const int64_t unpacked = b.unpacked_us > 0 ? b.unpacked_us : coll_done;
  const int64_t done = b.completed_us > 0 ? b.completed_us : unpacked;
  if (b.steady && mark_cycles_) Instant("CYCLE_START", kStepsTrack, start, "p");

  // The copies and the data-plane call, nested in a span of the bucket's or the tensor's.
  auto phases = [&](int tid) {
    if (b.inline_reduced) return;
    if (coll > start) Event("MEMCPY_IN_FUSION_BUFFER", tid, start, coll, "");
    Event(data_plane.c_str(), tid, coll, coll_done, "");
    if (unpacked > coll_done) Event("MEMCPY_OUT_FUSION_BUFFER", tid, coll_done, unpacked, "");
  };

  // The bucket's own track: its span with the phases nested.
  std::string names = "[";
  for (size_t i = 0; i < b.tensors.size(); ++i) {
    auto it = submitted_.find(b.tensors[i].handle);
    names += (i ? "," : "") + Quoted(it == submitted_.end() ? "?" : it->second.name);
  }
  names += "]";
  Event("bucket", set_tid, start, done,
        common + "," + Kv("collective", collective) + ",\"names\":" + names);
  phases(set_tid);

  for (const TimelineBucket::Tensor& t : b.tensors) {
    auto it = submitted_.find(t.handle);
    if (it == submitted_.end()) continue;  // submitted before the timeline started
    const Tensor& tensor = it->second;
    const int64_t got_plan = planned_us > 0 ? planned_us : start;
    Event(negotiate.c_str(), tensor.tid, tensor.at_us, got_plan,
          Kv("last_rank", t.last_rank) + "," + Kv("lag_us", t.lag_us) + "," +
              Kv("wait_us", t.wait_us) + "," + bucket + Kv("collective", collective) + "," +
              Kv("bytes", t.bytes));
    Event(op.c_str(), tensor.tid, got_plan, done,
          common + "," + Kv("collective", collective) + "," + Kv("bytes", t.bytes));
    if (!b.inline_reduced && start > got_plan) Event("QUEUE", tensor.tid, got_plan, start, "");
    phases(tensor.tid);
    submitted_.erase(it);
  }
}

void Timeline::Event(const char* name, int tid, int64_t begin_us, int64_t end_us,
                     const std::string& args) {
  out_ += first_event_ ? "" : ",\n";
  first_event_ = false;
  out_ += "{\"name\":";
  out_ += Quoted(name);
  out_ += ",\"ph\":\"X\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(tid) +
          ",\"ts\":" + std::to_string(Ts(begin_us)) +
          ",\"dur\":" + std::to_string(end_us > begin_us ? end_us - begin_us : 0);
  if (!args.empty()) out_ += ",\"args\":{" + args + "}";
  out_ += "}";
}

void Timeline::Instant(const char* name, int tid, int64_t at_us, const char* scope,
                       const std::string& args) {
  out_ += first_event_ ? "" : ",\n";
  first_event_ = false;
  out_ += "{\"name\":\"" + std::string(name) + "\",\"ph\":\"i\",\"s\":\"" + scope +
          "\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(tid) +
          ",\"ts\":" + std::to_string(Ts(at_us));
  if (!args.empty()) out_ += ",\"args\":{" + args + "}";
  out_ += "}";
}

void Timeline::Metadata(const char* what, int tid, const std::string& args) {
  out_ += first_event_ ? "" : ",\n";
  first_event_ = false;
  out_ += "{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
          ",\"tid\":" + std::to_string(tid) + ",\"args\":{" + args + "}}";
}

}  // namespace hora
