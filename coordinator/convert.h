// Conversions between the generated protobuf types of proto/coordinator.proto and the plain
// structs of coordinator/messages.h and common/types.h, plus the mapping between gRPC and Hora
// status codes. Only coordinator/ includes this header.
//
// Everything that comes from the wire is validated: an enum value out of range, a negative
// dimension or an unknown status code is an InvalidArgument naming the field, never a crash.
// Conversions towards the wire cannot fail.
#ifndef HORA_COORDINATOR_CONVERT_H_
#define HORA_COORDINATOR_CONVERT_H_

#include <grpcpp/support/status.h>

#include <functional>
#include <string>

#include "common/status.h"
#include "common/types.h"
#include "coordinator/messages.h"
#include "proto/coordinator.pb.h"

namespace hora {

// TensorSpec <-> TensorSignature.
void ToProto(const TensorSpec& spec, proto::TensorSignature* out);
Status FromProto(const proto::TensorSignature& in, TensorSpec* out);

// ReadyNotice <-> ReadyTensor.
void ToProto(const ReadyNotice& notice, proto::ReadyTensor* out);
Status FromProto(const proto::ReadyTensor& in, ReadyNotice* out);

// BucketPlan <-> Bucket.
void ToProto(const BucketPlan& plan, proto::Bucket* out);
Status FromProto(const proto::Bucket& in, BucketPlan* out);

// TensorErrorNotice <-> TensorError.
void ToProto(const TensorErrorNotice& notice, proto::TensorError* out);
Status FromProto(const proto::TensorError& in, TensorErrorNotice* out);

// PlanMessage <-> CoordinatorMessage.Plan.
void ToProto(const PlanMessage& plan, proto::CoordinatorMessage::Plan* out);
Status FromProto(const proto::CoordinatorMessage::Plan& in, PlanMessage* out);

// RankInfo <-> RankInfo; Topology <-> JoinResponse. A topology from the wire must list ranks
// 0..n-1 in order, each with consistent local/cross fields.
void ToProto(const RankInfo& info, proto::RankInfo* out);
void ToProto(const Topology& topology, proto::JoinResponse* out);
Status FromProto(const proto::JoinResponse& in, Topology* out);

// ProcessSetOp <-> ProcessSetOp; ProcessSetResult <-> CoordinatorMessage.ProcessSetResult.
void ToProto(const ProcessSetOp& op, proto::ProcessSetOp* out);
Status FromProto(const proto::ProcessSetOp& in, ProcessSetOp* out);
void ToProto(const ProcessSetResult& result, proto::CoordinatorMessage::ProcessSetResult* out);
Status FromProto(const proto::CoordinatorMessage::ProcessSetResult& in, ProcessSetResult* out);

// DiagnosisRequest <-> CoordinatorMessage.Diagnose; DiagnosisReport <-> DiagnosisReport
// (convert_diagnosis.cc). Strings from the wire are bounded (a report's detail to 1 MiB).
void ToProto(const DiagnosisRequest& request, proto::CoordinatorMessage::Diagnose* out);
Status FromProto(const proto::CoordinatorMessage::Diagnose& in, DiagnosisRequest* out);
void ToProto(const DiagnosisReport& report, proto::DiagnosisReport* out);
Status FromProto(const proto::DiagnosisReport& in, DiagnosisReport* out);

// The session's messages (convert_session.cc). The core works on the plain structs; the gRPC
// adapters convert at the edge, where a message for the wire may need several: a plan goes
// out in as many messages as keep each under `limit` bytes, split between buckets, in order
// (one Poll under load can emit thousands of buckets, small allreduces carrying their results,
// and one message past gRPC's limit would fail the write and end the session); a Ready is split
// between notices. `next` gives each empty message to fill, in order (on the caller's arena,
// if it likes): a message is complete when `next` is called again, or when this returns. For
// a plan, `next` is told the size in bytes of the message it completes (about: the buckets'
// and errors' sizes; 0 on the first call), and the result is the last one's.
size_t ToProtoMessages(const CoordinatorMessage& in, size_t limit,
                       const std::function<proto::CoordinatorMessage*(size_t previous)>& next);
void ToProtoMessages(const WorkerMessage& in, size_t limit,
                     const std::function<proto::WorkerMessage*()>& next);
// What did not convert is in the result: a plan or a process set result the worker cannot
// read is an error (the worker aborts); a worker's bad signature is one refused notice, a
// bad process set op or diagnosis report the message's `malformed`.
Status FromProto(const proto::CoordinatorMessage& in, CoordinatorMessage* out);
void FromProto(const proto::WorkerMessage& in, WorkerMessage* out);

// A Hora status code from the wire (Abort, TensorError); unknown values are an error.
Status CodeFromWire(int32_t value, Code* out);

// gRPC status -> Hora status. `context` prefixes the message ("coordinator at host:1234").
Status FromGrpcStatus(const grpc::Status& status, const std::string& context);
// Hora status -> gRPC status (for the service's replies).
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace hora

#endif  // HORA_COORDINATOR_CONVERT_H_
