#include "coordinator/convert.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hora {
namespace {

// The largest dimension or element count accepted from the wire (2^48: far beyond any real
// tensor, small enough that products of a few of them are checked before they overflow).
constexpr int64_t kMaxDim = int64_t{1} << 48;

Status CheckDims(const google::protobuf::RepeatedField<int64_t>& dims, const char* field,
                 std::vector<int64_t>* out) {
  out->clear();
  out->reserve(dims.size());
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(std::string(field) + " has an invalid value " + std::to_string(d));
    }
    out->push_back(d);
  }
  return Status::Ok();
}

template <typename Vec>
void CopyInts(const Vec& in, google::protobuf::RepeatedField<int64_t>* out) {
  out->Clear();
  out->Reserve(static_cast<int>(in.size()));
  for (int64_t v : in) out->Add(v);
}

Status CheckEnums(int32_t collective, int32_t dtype, int32_t op, const std::string& what) {
  if (!IsValidCollective(collective)) {
    return InvalidArgument(what + ": invalid collective " + std::to_string(collective));
  }
  if (!IsValidDataType(dtype)) {
    return InvalidArgument(what + ": invalid dtype " + std::to_string(dtype));
  }
  if (!IsValidReduceOp(op)) {
    return InvalidArgument(what + ": invalid reduce op " + std::to_string(op));
  }
  return Status::Ok();
}

}  // namespace

void ToProto(const TensorSpec& spec, proto::TensorSignature* out) {
  out->set_name(spec.name);
  out->set_collective(static_cast<int32_t>(spec.collective));
  out->set_dtype(static_cast<int32_t>(spec.dtype));
  out->set_op(static_cast<int32_t>(spec.op));
  CopyInts(spec.shape, out->mutable_shape());
  out->set_device(static_cast<int32_t>(spec.device));
  out->set_device_index(spec.device_index);
  out->set_root(spec.root);
  out->set_prescale(spec.prescale);
  out->set_postscale(spec.postscale);
  CopyInts(spec.splits, out->mutable_splits());
  out->set_process_set(spec.process_set);
  out->set_peer(spec.peer);
  out->set_refused(spec.refused);
}

Status FromProto(const proto::TensorSignature& in, TensorSpec* out) {
  if (in.shape_size() > 64) {
    return InvalidArgument("tensor '" + in.name() + "': shape has " +
                           std::to_string(in.shape_size()) + " dims");
  }
  out->name = in.name();
  out->collective = static_cast<CollectiveType>(in.collective());
  out->dtype = static_cast<DataType>(in.dtype());
  out->op = static_cast<ReduceOp>(in.op());
  out->shape.assign(in.shape().begin(), in.shape().end());
  out->device = static_cast<Device>(in.device());
  out->device_index = in.device_index();
  out->root = in.root();
  out->prescale = in.prescale();
  out->postscale = in.postscale();
  out->splits.assign(in.splits().begin(), in.splits().end());
  out->process_set = in.process_set();
  out->peer = in.peer();
  out->refused = in.refused();
  return CheckTensorSpec(*out);
}

void ToProto(const ReadyNotice& notice, proto::ReadyTensor* out) {
  out->set_id(notice.id);
  if (notice.spec) {
    ToProto(*notice.spec, out->mutable_signature());
  } else {
    out->clear_signature();
  }
  out->set_has_payload(notice.payload.has_value());
  if (notice.payload) out->set_payload(*notice.payload);
}

Status FromProto(const proto::ReadyTensor& in, ReadyNotice* out) {
  out->id = in.id();
  out->spec.reset();
  if (in.has_signature()) {
    TensorSpec spec;
    HORA_RETURN_IF_ERROR(FromProto(in.signature(), &spec));
    out->spec = std::move(spec);
  }
  out->payload.reset();
  if (in.has_payload()) out->payload = in.payload();
  return Status::Ok();
}

void ToProto(const BucketPlan& plan, proto::Bucket* out) {
  out->set_seq(plan.seq);
  out->set_collective(static_cast<int32_t>(plan.collective));
  out->set_dtype(static_cast<int32_t>(plan.dtype));
  out->set_op(static_cast<int32_t>(plan.op));
  out->set_root(plan.root);
  out->set_prescale(plan.prescale);
  out->set_postscale(plan.postscale);
  out->set_joined_ranks(plan.joined_ranks);
  out->set_inline_reduced(plan.inline_reduced);
  out->set_process_set(plan.process_set);
  out->set_device(static_cast<int32_t>(plan.device));
  out->clear_participants();
  for (int32_t p : plan.participants) out->add_participants(p);
  out->clear_entries();
  out->mutable_entries()->Reserve(static_cast<int>(plan.entries.size()));
  for (const BucketPlan::Entry& e : plan.entries) {
    proto::BucketEntry* pe = out->add_entries();
    pe->set_id(e.id);
    pe->set_num_elements(e.num_elements);
    CopyInts(e.first_dims, pe->mutable_first_dims());
    CopyInts(e.recv_splits, pe->mutable_recv_splits());
    if (plan.inline_reduced) pe->set_inline_result(e.inline_result);
    pe->set_last_rank(e.last_rank);
    pe->set_lag_us(e.lag_us);
    pe->set_wait_us(e.wait_us);
    pe->set_layout(e.layout);
  }
}

Status FromProto(const proto::Bucket& in, BucketPlan* out) {
  const std::string what = "bucket " + std::to_string(in.seq());
  HORA_RETURN_IF_ERROR(CheckEnums(in.collective(), in.dtype(), in.op(), what));
  out->seq = in.seq();
  out->collective = static_cast<CollectiveType>(in.collective());
  out->dtype = static_cast<DataType>(in.dtype());
  out->op = static_cast<ReduceOp>(in.op());
  out->root = in.root();
  out->prescale = in.prescale();
  out->postscale = in.postscale();
  out->joined_ranks = in.joined_ranks();
  out->inline_reduced = in.inline_reduced();
  if (in.process_set() < 0) {
    return InvalidArgument(what + ": invalid process set " + std::to_string(in.process_set()));
  }
  out->process_set = in.process_set();
  if (in.device() != static_cast<int32_t>(Device::kCpu) &&
      in.device() != static_cast<int32_t>(Device::kCuda)) {
    return InvalidArgument(what + ": invalid device " + std::to_string(in.device()));
  }
  out->device = static_cast<Device>(in.device());
  out->participants.assign(in.participants().begin(), in.participants().end());
  for (int32_t p : out->participants) {
    if (p < 0) return InvalidArgument(what + ": invalid participant " + std::to_string(p));
  }
  out->entries.clear();
  out->entries.reserve(in.entries_size());
  for (const proto::BucketEntry& pe : in.entries()) {
    BucketPlan::Entry e;
    e.id = pe.id();
    if (e.id < -1) return InvalidArgument(what + ": invalid tensor id " + std::to_string(e.id));
    if (pe.num_elements() < 0 || pe.num_elements() > kMaxDim) {
      return InvalidArgument(what + ": invalid element count " + std::to_string(pe.num_elements()));
    }
    e.num_elements = pe.num_elements();
    if (pe.last_rank() < -1 || pe.lag_us() < 0 || pe.wait_us() < 0) {
      return InvalidArgument(what + ": invalid arrival (last rank " +
                             std::to_string(pe.last_rank()) + ")");
    }
    e.last_rank = pe.last_rank();
    e.lag_us = pe.lag_us();
    e.wait_us = pe.wait_us();
    e.layout = pe.layout();
    HORA_RETURN_IF_ERROR(
        CheckDims(pe.first_dims(), (what + ": first_dims").c_str(), &e.first_dims));
    HORA_RETURN_IF_ERROR(
        CheckDims(pe.recv_splits(), (what + ": recv_splits").c_str(), &e.recv_splits));
    if (out->inline_reduced) {
      const size_t want = static_cast<size_t>(e.num_elements) * DataTypeSize(out->dtype);
      if (pe.inline_result().size() != want) {
        return InvalidArgument(what + ": inline result of " +
                               std::to_string(pe.inline_result().size()) + " bytes, expected " +
                               std::to_string(want));
      }
      e.inline_result = pe.inline_result();
    }
    out->entries.push_back(std::move(e));
  }
  return Status::Ok();
}

void ToProto(const ProcessSetOp& op, proto::ProcessSetOp* out) {
  out->set_seq(op.seq);
  out->set_remove(op.remove);
  out->clear_ranks();
  for (int32_t r : op.ranks) out->add_ranks(r);
  out->set_cpu_operations(op.cpu_operations);
  out->set_process_set(op.process_set);
  out->set_refused(op.refused);
}

Status FromProto(const proto::ProcessSetOp& in, ProcessSetOp* out) {
  if (in.ranks_size() > (1 << 20)) return InvalidArgument("process set op with too many ranks");
  out->seq = in.seq();
  out->remove = in.remove();
  out->ranks.assign(in.ranks().begin(), in.ranks().end());
  out->cpu_operations = in.cpu_operations();
  out->process_set = in.process_set();
  out->refused = in.refused();
  return Status::Ok();
}

void ToProto(const ProcessSetResult& r, proto::CoordinatorMessage::ProcessSetResult* out) {
  out->set_seq(r.seq);
  out->set_code(static_cast<int32_t>(r.status.code()));
  out->set_message(r.status.message());
  out->set_process_set(r.process_set);
  out->clear_ranks();
  for (int32_t rank : r.ranks) out->add_ranks(rank);
}

Status FromProto(const proto::CoordinatorMessage::ProcessSetResult& in, ProcessSetResult* out) {
  Code code;
  HORA_RETURN_IF_ERROR(CodeFromWire(in.code(), &code));
  out->seq = in.seq();
  out->status = code == Code::kOk ? Status::Ok() : Status(code, in.message());
  out->process_set = in.process_set();
  out->ranks.assign(in.ranks().begin(), in.ranks().end());
  return Status::Ok();
}

Status CodeFromWire(int32_t value, Code* out) {
  if (value < static_cast<int32_t>(Code::kOk) || value > static_cast<int32_t>(Code::kInProgress)) {
    return InvalidArgument("invalid status code " + std::to_string(value));
  }
  *out = static_cast<Code>(value);
  return Status::Ok();
}

void ToProto(const TensorErrorNotice& notice, proto::TensorError* out) {
  out->set_id(notice.id);
  out->set_code(static_cast<int32_t>(notice.status.code()));
  out->set_message(notice.status.message());
}

Status FromProto(const proto::TensorError& in, TensorErrorNotice* out) {
  Code code;
  HORA_RETURN_IF_ERROR(CodeFromWire(in.code(), &code));
  if (code == Code::kOk || code == Code::kInProgress) {
    return InvalidArgument("tensor error with non-error code " + std::to_string(in.code()));
  }
  out->id = in.id();
  out->status = Status(code, in.message());
  return Status::Ok();
}

void ToProto(const PlanMessage& plan, proto::CoordinatorMessage::Plan* out) {
  out->clear_buckets();
  out->clear_errors();
  for (const BucketPlan& b : plan.buckets) ToProto(b, out->add_buckets());
  for (const TensorErrorNotice& e : plan.errors) ToProto(e, out->add_errors());
}

Status FromProto(const proto::CoordinatorMessage::Plan& in, PlanMessage* out) {
  out->buckets.resize(in.buckets_size());
  for (int i = 0; i < in.buckets_size(); ++i) {
    HORA_RETURN_IF_ERROR(FromProto(in.buckets(i), &out->buckets[i]));
  }
  out->errors.resize(in.errors_size());
  for (int i = 0; i < in.errors_size(); ++i) {
    HORA_RETURN_IF_ERROR(FromProto(in.errors(i), &out->errors[i]));
  }
  return Status::Ok();
}

}  // namespace hora
