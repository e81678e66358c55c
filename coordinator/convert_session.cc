// The session's messages <-> their plain structs (convert.h).
#include "coordinator/convert.h"

namespace hora {

namespace {

// A plan in as many messages as keep each under `limit` (ToProtoMessages).
size_t PlanMessages(const PlanMessage& in, size_t limit,
                    const std::function<proto::CoordinatorMessage*(size_t previous)>& next) {
  proto::CoordinatorMessage::Plan* plan = nullptr;
  size_t bytes = 0;
  auto open = [&] {  // a new message once the last one reached the limit
    if (plan != nullptr && bytes < limit) return;
    plan = next(bytes)->mutable_plan();
    bytes = 0;
  };
  for (const BucketPlan& b : in.buckets) {
    open();
    proto::Bucket* pb = plan->add_buckets();
    ToProto(b, pb);
    bytes += pb->ByteSizeLong() + 8;
  }
  for (const TensorErrorNotice& e : in.errors) {
    open();
    proto::TensorError* pe = plan->add_errors();
    ToProto(e, pe);
    bytes += pe->ByteSizeLong() + 8;
  }
  return bytes;
}

// A Ready in as many messages as keep each under `limit`; a notice's share is its own size
// plus its field's tag and length.
void ReadyMessages(const std::vector<ReadyNotice>& notices, size_t limit,
                   const std::function<proto::WorkerMessage*()>& next) {
  proto::WorkerMessage::Ready* ready = nullptr;
  size_t bytes = 0;
  for (const ReadyNotice& n : notices) {
    proto::ReadyTensor one;
    ToProto(n, &one);
    const size_t size = one.ByteSizeLong() + 16;
    if (ready == nullptr || (bytes > 0 && bytes + size > limit)) {
      ready = next()->mutable_ready();
      bytes = 0;
    }
    *ready->add_tensors() = std::move(one);
    bytes += size;
  }
}

}  // namespace

size_t ToProtoMessages(const CoordinatorMessage& in, size_t limit,
                       const std::function<proto::CoordinatorMessage*(size_t previous)>& next) {
  proto::CoordinatorMessage* out = nullptr;
  switch (in.kind) {
    case CoordinatorMessage::Kind::kPlan:
      return PlanMessages(in.plan, limit, next);
    case CoordinatorMessage::Kind::kHeartbeat:
      (out = next(0))->mutable_heartbeat();
      break;
    case CoordinatorMessage::Kind::kAbort:
      out = next(0);
      out->mutable_abort()->set_code(static_cast<int32_t>(in.abort.code()));
      out->mutable_abort()->set_message(in.abort.message());
      break;
    case CoordinatorMessage::Kind::kJoinDone:
      out = next(0);
      out->mutable_join_done()->set_last_joined_rank(in.last_joined_rank);
      out->mutable_join_done()->set_process_set(in.process_set);
      break;
    case CoordinatorMessage::Kind::kProcessSetResult:
      ToProto(in.set_result, (out = next(0))->mutable_process_set_result());
      break;
    case CoordinatorMessage::Kind::kTuning: {
      proto::CoordinatorMessage::Tuning* t = (out = next(0))->mutable_tuning();
      t->set_fusion_threshold_bytes(in.tuning.fusion_threshold_bytes);
      t->set_cycle_time_us(in.tuning.cycle_time_us);
      t->set_trial(in.tuning.trial);
      t->set_done(in.tuning.done);
      break;
    }
    case CoordinatorMessage::Kind::kDiagnose:
      ToProto(in.diagnose, (out = next(0))->mutable_diagnose());
      break;
  }
  return out == nullptr ? 0 : out->ByteSizeLong();
}

Status FromProto(const proto::CoordinatorMessage& in, CoordinatorMessage* out) {
  using Kind = CoordinatorMessage::Kind;
  switch (in.kind_case()) {
    case proto::CoordinatorMessage::kPlan:
      out->kind = Kind::kPlan;
      return FromProto(in.plan(), &out->plan);
    case proto::CoordinatorMessage::kAbort: {
      out->kind = Kind::kAbort;
      Code code;
      if (!CodeFromWire(in.abort().code(), &code).ok() || code == Code::kOk) code = Code::kAborted;
      out->abort = Status(code, in.abort().message());
      return Status::Ok();
    }
    case proto::CoordinatorMessage::kJoinDone:
      out->kind = Kind::kJoinDone;
      out->process_set = in.join_done().process_set();
      out->last_joined_rank = in.join_done().last_joined_rank();
      return Status::Ok();
    case proto::CoordinatorMessage::kProcessSetResult:
      out->kind = Kind::kProcessSetResult;
      return FromProto(in.process_set_result(), &out->set_result);
    case proto::CoordinatorMessage::kTuning: {
      out->kind = Kind::kTuning;
      const proto::CoordinatorMessage::Tuning& t = in.tuning();
      out->tuning =
          TuningNotice{t.fusion_threshold_bytes(), t.cycle_time_us(), t.trial(), t.done()};
      return Status::Ok();
    }
    case proto::CoordinatorMessage::kDiagnose:
      out->kind = Kind::kDiagnose;
      return FromProto(in.diagnose(), &out->diagnose);
    default:  // a heartbeat, or a kind this version does not know
      out->kind = Kind::kHeartbeat;
      return Status::Ok();
  }
}

void ToProtoMessages(const WorkerMessage& in, size_t limit,
                     const std::function<proto::WorkerMessage*()>& next) {
  using Kind = WorkerMessage::Kind;
  switch (in.kind) {
    case Kind::kHello:
      next()->mutable_hello()->set_rank(in.rank);
      return;
    case Kind::kReady:
      ReadyMessages(in.ready, limit, next);
      return;
    case Kind::kHeartbeat:
      next()->mutable_heartbeat();
      return;
    case Kind::kGoodbye:
      next()->mutable_goodbye();
      return;
    case Kind::kFailure:
      next()->mutable_failure()->set_message(in.text);
      return;
    case Kind::kJoinOp:
      next()->mutable_join_op()->set_process_set(in.process_set);
      return;
    case Kind::kProcessSetOp:
      ToProto(in.set_op, next()->mutable_process_set_op());
      return;
    case Kind::kDiagnoseAsk:
      next()->mutable_diagnose_ask()->set_why(in.text);
      return;
    case Kind::kDiagnosis:
      ToProto(in.diagnosis, next()->mutable_diagnosis());
      return;
    case Kind::kTimings:
      next()->mutable_timings()->set_on(in.timings);
      return;
    case Kind::kUnknown:  // nothing a worker sends
      return;
  }
}

void FromProto(const proto::WorkerMessage& in, WorkerMessage* out) {
  using Kind = WorkerMessage::Kind;
  switch (in.kind_case()) {
    case proto::WorkerMessage::kHello:
      out->kind = Kind::kHello;
      out->rank = in.hello().rank();
      return;
    case proto::WorkerMessage::kReady:
      out->kind = Kind::kReady;
      out->ready.clear();
      out->refused.clear();
      out->ready.reserve(in.ready().tensors_size());
      for (const proto::ReadyTensor& t : in.ready().tensors()) {
        ReadyNotice notice;
        Status s = FromProto(t, &notice);
        if (s.ok()) {
          out->ready.push_back(std::move(notice));
        } else {
          out->refused.push_back(TensorErrorNotice{static_cast<int32_t>(t.id()), std::move(s)});
        }
      }
      return;
    case proto::WorkerMessage::kHeartbeat:
      out->kind = Kind::kHeartbeat;
      return;
    case proto::WorkerMessage::kGoodbye:
      out->kind = Kind::kGoodbye;
      return;
    case proto::WorkerMessage::kFailure:
      out->kind = Kind::kFailure;
      out->text = in.failure().message();
      return;
    case proto::WorkerMessage::kJoinOp:
      out->kind = Kind::kJoinOp;
      out->process_set = in.join_op().process_set();
      return;
    case proto::WorkerMessage::kProcessSetOp:
      out->kind = Kind::kProcessSetOp;
      out->malformed = FromProto(in.process_set_op(), &out->set_op);
      out->set_op.seq = in.process_set_op().seq();  // the answer names it even when malformed
      return;
    case proto::WorkerMessage::kDiagnoseAsk:
      out->kind = Kind::kDiagnoseAsk;
      out->text = in.diagnose_ask().why();
      return;
    case proto::WorkerMessage::kTimings:
      out->kind = Kind::kTimings;
      out->timings = in.timings().on();
      return;
    case proto::WorkerMessage::kDiagnosis:
      out->kind = Kind::kDiagnosis;
      out->malformed = FromProto(in.diagnosis(), &out->diagnosis);
      return;
    default:
      out->kind = Kind::kUnknown;
      out->unknown_kind = static_cast<int>(in.kind_case());
      return;
  }
}

}  // namespace hora
