// Topology and status conversions (the rest of convert.h is in convert.cc).
#include <string>

#include "coordinator/convert.h"

namespace hora {

void ToProto(const RankInfo& info, proto::RankInfo* out) {
  out->set_rank(info.rank);
  out->set_hostname(info.hostname);
  out->set_pid(info.pid);
  out->set_local_rank(info.local_rank);
  out->set_local_size(info.local_size);
  out->set_cross_rank(info.cross_rank);
  out->set_cross_size(info.cross_size);
}

void ToProto(const Topology& topology, proto::JoinResponse* out) {
  out->clear_ranks();
  for (const RankInfo& r : topology.ranks) ToProto(r, out->add_ranks());
}

Status FromProto(const proto::JoinResponse& in, Topology* out) {
  const int n = in.ranks_size();
  if (n == 0) return InvalidArgument("topology without ranks");
  out->ranks.clear();
  out->ranks.reserve(n);
  for (int i = 0; i < n; ++i) {
    const proto::RankInfo& p = in.ranks(i);
    const std::string what = "topology entry " + std::to_string(i);
    if (p.rank() != i) return InvalidArgument(what + " has rank " + std::to_string(p.rank()));
    if (p.local_size() < 1 || p.local_size() > n || p.local_rank() < 0 ||
        p.local_rank() >= p.local_size()) {
      return InvalidArgument(what + ": invalid local rank/size");
    }
    if (p.cross_size() < 1 || p.cross_size() > n || p.cross_rank() < 0 ||
        p.cross_rank() >= p.cross_size()) {
      return InvalidArgument(what + ": invalid cross rank/size");
    }
    RankInfo r;
    r.rank = p.rank();
    r.hostname = p.hostname();
    r.pid = p.pid();
    r.local_rank = p.local_rank();
    r.local_size = p.local_size();
    r.cross_rank = p.cross_rank();
    r.cross_size = p.cross_size();
    out->ranks.push_back(std::move(r));
  }
  return Status::Ok();
}

Status FromGrpcStatus(const grpc::Status& status, const std::string& context) {
  if (status.ok()) return Status::Ok();
  std::string message = status.error_message();
  if (!context.empty()) message = context + ": " + message;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return InvalidArgument(message);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return InvalidArgument(message);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return FailedPrecondition(message);
    case grpc::StatusCode::ALREADY_EXISTS:
      return Status(Code::kAlreadyExists, message);
    case grpc::StatusCode::NOT_FOUND:
      return Status(Code::kNotFound, message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return DeadlineExceeded(message);
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return Status(Code::kUnauthenticated, message);
    case grpc::StatusCode::UNAVAILABLE:
      return Unavailable(message);
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::CANCELLED:
      return Aborted(message);
    default:
      return Internal(message);
  }
}

grpc::Status ToGrpcStatus(const Status& status) {
  grpc::StatusCode code;
  switch (status.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case Code::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Code::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case Code::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Code::kAborted:
    case Code::kPeerFailure:
      code = grpc::StatusCode::ABORTED;
      break;
    default:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message());
}

}  // namespace hora
