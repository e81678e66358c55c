// The worker's session stream.
//
// Writes (Ready, JoinOp, Failure, Heartbeat) go straight onto the stream under write_mu_: no
// writer thread, no hand-off, for latency. The reader thread reads the coordinator's messages
// and runs the callbacks. The heartbeat thread sends a heartbeat every heartbeat_interval
// (skipping it when another write holds the stream) and watches the time since the last
// message from the coordinator: past heartbeat_timeout it cancels the call, which unblocks
// any write and the reader, and the reader reports the loss through on_abort. on_abort runs
// only on the reader thread, at most once, and never after Close().
#include <algorithm>
#include <deque>
#include <sstream>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"
#include "coordinator/auth.h"
#include "coordinator/client_impl.h"
#include "coordinator/convert.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

std::string GrpcStatusText(const grpc::Status& st) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int code = static_cast<int>(st.error_code());
  std::string s = code >= 0 && code <= 16 ? kNames[code] : std::to_string(code);
  if (st.ok()) return "the stream ended";
  if (!st.error_message().empty()) s += ": " + st.error_message();
  return s;
}

std::string SecondsText(std::chrono::nanoseconds d) {
  std::ostringstream ss;
  ss.setf(std::ios::fixed);
  ss.precision(1);
  ss << std::chrono::duration<double>(d).count() << " s";
  return ss.str();
}

}  // namespace

std::string ClientImpl::LostCoordinator(const std::string& why) const {
  std::string who = "rank 0";
  if (!topology_.ranks.empty()) {  // set by Join, before any session
    who += " (host " + topology_.ranks[0].hostname + ", pid " +
           std::to_string(topology_.ranks[0].pid) + ")";
  }
  return "lost the coordinator, " + who + " at " + Where() + ": " + why;
}

Status ClientImpl::StartSession(SessionCallbacks callbacks) {
  MutexLock close_lock(&close_mu_);
  if (closed_) return FailedPrecondition("StartSession after Close");
  if (stream_ || local_) return FailedPrecondition("the session was already started");
  callbacks_ = std::move(callbacks);
  if (config_.local_host != nullptr) {
    local_ = true;
    return config_.local_host->OpenLocalSession(
        config_.rank, [this](CoordinatorMessage& m) { Dispatch(m, Status::Ok()); });
  }
  session_ctx_ = std::make_unique<grpc::ClientContext>();
  AddToken(session_ctx_.get());
  last_recv_.store(Clock::now().time_since_epoch().count());
  stream_ = stub_->Session(session_ctx_.get());
  WorkerMessage hello;
  hello.kind = WorkerMessage::Kind::kHello;
  hello.rank = config_.rank;
  if (!Write(std::move(hello))) {
    MutexLock lock(&write_mu_);  // no other thread yet; taken for the analysis
    grpc::Status st = stream_->Finish();
    writes_done_ = true;
    return FromGrpcStatus(st, "session with the coordinator at " + Where());
  }
  reader_ = std::thread([this] {
    SetThreadName("hora-reader");
    ReaderLoop();
  });
  heartbeat_ = std::thread([this] {
    SetThreadName("hora-heartbeat");
    HeartbeatLoop();
  });
  return AwaitSessionOpen();
}

Status ClientImpl::AwaitSessionOpen() {
  MutexLock lock(&mu_);
  // The coordinator answers Hello with a heartbeat (or an Abort, or by ending the call).
  if (!cv_.WaitFor(&mu_, config_.heartbeat_timeout, [this] {
        mu_.AssertHeld();
        return acked_ || reader_done_;
      })) {
    session_ctx_->TryCancel();
  }
  if (acked_) return Status::Ok();
  cv_.Wait(&mu_, [this] {
    mu_.AssertHeld();
    return reader_done_;
  });
  stop_heartbeat_ = true;
  cv_.NotifyAll();
  const Status watchdog = watchdog_status_;
  const grpc::Status st = final_status_;
  lock.Unlock();
  reader_.join();
  heartbeat_.join();
  if (!watchdog.ok()) return watchdog;
  if (st.ok() || st.error_code() == grpc::StatusCode::CANCELLED) {
    return Unavailable("the coordinator at " + Where() + " did not answer the session's Hello");
  }
  return FromGrpcStatus(st, "session with the coordinator at " + Where());
}

int ClientImpl::Write(WorkerMessage message, bool counted) {
  // Counted before it goes: the answer to a message may arrive before Write returns.
  auto count = [&] {
    if (counted) sent_messages_.fetch_add(1, std::memory_order_relaxed);
  };
  if (local_) {
    if (closing_.load()) return 0;
    count();
    config_.local_host->LocalMessage(config_.rank, std::move(message));
    return 1;
  }
  // Small allreduces carry their data: a Ready that would pass the message limit goes out in
  // several.
  const size_t limit = static_cast<size_t>(std::max(config_.max_message_bytes, 2048) - 1024);
  std::deque<proto::WorkerMessage> wire;
  ToProtoMessages(message, limit, [&wire] { return &wire.emplace_back(); });
  MutexLock lock(&write_mu_);
  if (!stream_ || writes_done_) return 0;
  int written = 0;
  for (const proto::WorkerMessage& m : wire) {
    count();
    if (!stream_->Write(m)) break;
    ++written;
  }
  return written;
}

void ClientImpl::Send(WorkerMessage message) { Write(std::move(message), /*counted=*/true); }

ControlCounters ClientImpl::sent() const {
  ControlCounters c;
  c.messages = sent_messages_.load(std::memory_order_relaxed);
  c.notices = sent_notices_.load(std::memory_order_relaxed);
  return c;
}

void ClientImpl::SendReady(std::vector<ReadyNotice> notices) {
  if (notices.empty()) return;
  sent_notices_.fetch_add(static_cast<int64_t>(notices.size()), std::memory_order_relaxed);
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kReady;
  message.ready = std::move(notices);
  Send(std::move(message));
}

void ClientImpl::SendJoin(int32_t process_set) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kJoinOp;
  message.process_set = process_set;
  Send(std::move(message));
}

void ClientImpl::SendProcessSetOp(const ProcessSetOp& op) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kProcessSetOp;
  message.set_op = op;
  Send(std::move(message));
}

void ClientImpl::SendFailure(const std::string& text) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kFailure;
  message.text = text;
  Send(std::move(message));
}

void ClientImpl::SendDiagnosis(const DiagnosisReport& report) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kDiagnosis;
  message.diagnosis = report;
  Write(std::move(message));
}

void ClientImpl::SendDiagnoseAsk(const std::string& why) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kDiagnoseAsk;
  message.text = why;
  Write(std::move(message));
}

void ClientImpl::SendTimings(bool on) {
  WorkerMessage message;
  message.kind = WorkerMessage::Kind::kTimings;
  message.timings = on;
  Write(std::move(message));
}

void ClientImpl::ReaderLoop() {
  proto::CoordinatorMessage wire;
  CoordinatorMessage message;
  while (stream_->Read(&wire)) {
    last_recv_.store(Clock::now().time_since_epoch().count());
    if (!acked_fast_.load(std::memory_order_relaxed)) {
      MutexLock lock(&mu_);
      acked_ = true;
      acked_fast_.store(true);
      cv_.NotifyAll();
    }
    const Status converted = FromProto(wire, &message);
    Dispatch(message, converted);
  }
  grpc::Status st;
  {
    MutexLock lock(&write_mu_);
    writes_done_ = true;
    st = stream_->Finish();
  }
  Status watchdog;
  bool acked;
  {
    MutexLock lock(&mu_);
    reader_done_ = true;
    final_status_ = st;
    watchdog = watchdog_status_;
    acked = acked_;
    cv_.NotifyAll();
  }
  if (closing_.load() || !acked) return;  // before the answer to Hello: StartSession reports
  FireAbort(!watchdog.ok() ? watchdog : PeerFailure(LostCoordinator(GrpcStatusText(st))));
}

void ClientImpl::Dispatch(CoordinatorMessage& message, const Status& converted) {
  using Kind = CoordinatorMessage::Kind;
  if (message.kind == Kind::kDiagnose) {  // even after an abort
    if (converted.ok() && callbacks_.on_diagnose) callbacks_.on_diagnose(message.diagnose);
    return;
  }
  if (abort_fired_.load()) return;  // the job is over; nothing more is delivered
  if (!converted.ok()) {
    FireAbort(Internal(std::string("malformed ") +
                       (message.kind == Kind::kPlan ? "plan" : "process set result") +
                       " from the coordinator at " + Where() + ": " + converted.message()));
    if (session_ctx_) session_ctx_->TryCancel();
    return;
  }
  switch (message.kind) {
    case Kind::kPlan:
      if (callbacks_.on_plan) callbacks_.on_plan(std::move(message.plan));
      return;
    case Kind::kJoinDone:
      if (callbacks_.on_join_done) {
        callbacks_.on_join_done(message.process_set, message.last_joined_rank);
      }
      return;
    case Kind::kProcessSetResult:
      if (callbacks_.on_process_set) callbacks_.on_process_set(std::move(message.set_result));
      return;
    case Kind::kTuning:
      if (callbacks_.on_tuning) callbacks_.on_tuning(message.tuning);
      return;
    case Kind::kAbort:
      FireAbort(message.abort);
      return;
    case Kind::kHeartbeat:
    case Kind::kDiagnose:
      return;
  }
}

void ClientImpl::FireAbort(const Status& status) {
  if (closing_.load() || abort_fired_.exchange(true)) return;
  // The abort's one line on this rank is the engine's ("job failed: ...", on_abort).
  HORA_LOG_DEBUG("rank {}: the job is aborted: {}", config_.rank, status.ToString());
  if (callbacks_.on_abort) callbacks_.on_abort(status);
}

void ClientImpl::HeartbeatLoop() {
  const auto timeout = config_.heartbeat_timeout;
  TimePoint next_beat = Clock::now() + config_.heartbeat_interval;
  MutexLock lock(&mu_);
  while (!stop_heartbeat_ && !reader_done_) {
    const TimePoint last = TimePoint(Clock::duration(last_recv_.load()));
    cv_.WaitUntil(&mu_, std::min(next_beat, last + timeout), [this] {
      mu_.AssertHeld();
      return stop_heartbeat_ || reader_done_;
    });
    if (stop_heartbeat_ || reader_done_) break;
    const TimePoint now = Clock::now();
    const auto silent = now - TimePoint(Clock::duration(last_recv_.load()));
    if (silent >= timeout) {
      watchdog_status_ = PeerFailure(LostCoordinator("no message for " + SecondsText(silent)));
      session_ctx_->TryCancel();  // unblocks the reader and any stuck write
      break;
    }
    if (now < next_beat) continue;
    next_beat = now + config_.heartbeat_interval;
    lock.Unlock();
    if (write_mu_.TryLock()) {  // a write in progress is as good as a heartbeat
      proto::WorkerMessage beat;
      beat.mutable_heartbeat();
      if (stream_ && !writes_done_) stream_->Write(beat);
      write_mu_.Unlock();
    }
    lock.Lock();
  }
}

void ClientImpl::Close() {
  MutexLock close_lock(&close_mu_);
  if (closed_) return;
  closed_ = true;
  CloseSession();
  // The host's other ranks may still be finishing: they say Goodbye as they shut down.
  if (relay_) relay_->Shutdown(config_.heartbeat_timeout);
}

void ClientImpl::CloseSession() {
  if (local_) {
    WorkerMessage bye;
    bye.kind = WorkerMessage::Kind::kGoodbye;
    config_.local_host->LocalMessage(config_.rank, std::move(bye));
    closing_.store(true);
    return;
  }
  closing_.store(true);
  if (!stream_ || !reader_.joinable()) return;  // no session, or it failed to open
  // Goodbye, then half-close; the coordinator ends the call, which ends the reader.
  if (write_mu_.TryLockFor(milliseconds(1000))) {
    if (!writes_done_) {
      proto::WorkerMessage bye;
      bye.mutable_goodbye();
      stream_->Write(bye);
      stream_->WritesDone();
      writes_done_ = true;
    }
    write_mu_.Unlock();
  } else {
    session_ctx_->TryCancel();
  }
  // Close() may run inside a callback, on the reader thread itself: then the reader ends
  // when the callback returns, and the destructor joins it.
  const bool on_reader = std::this_thread::get_id() == reader_.get_id();
  {
    MutexLock lock(&mu_);
    if (!on_reader && !cv_.WaitFor(&mu_, milliseconds(2000), [this] {
          mu_.AssertHeld();
          return reader_done_;
        })) {
      session_ctx_->TryCancel();
    }
    stop_heartbeat_ = true;
    cv_.NotifyAll();
  }
  if (on_reader) session_ctx_->TryCancel();
  heartbeat_.join();
  if (!on_reader) reader_.join();
}

}  // namespace hora
