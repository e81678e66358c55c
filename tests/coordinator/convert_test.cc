#include "coordinator/convert.h"

#include <catch2/catch.hpp>

namespace hora {
namespace {

TensorSpec SampleSpec() {
  TensorSpec s;
  s.name = "layer1.weight";
  s.collective = CollectiveType::kAlltoall;
  s.dtype = DataType::kBfloat16;
  s.op = ReduceOp::kMax;
  s.shape = {6, 3};
  s.device = Device::kCuda;
  s.device_index = 2;
  s.root = 1;
  s.prescale = 0.5;
  s.postscale = 2.0;
  s.splits = {1, 2, 3};
  return s;
}

TEST_CASE("TensorSpec round-trips through TensorSignature", "[convert]") {
  const TensorSpec in = SampleSpec();
  proto::TensorSignature p;
  ToProto(in, &p);
  TensorSpec out;
  REQUIRE(FromProto(p, &out).ok());
  CHECK(out.name == in.name);
  CHECK(out.collective == in.collective);
  CHECK(out.dtype == in.dtype);
  CHECK(out.op == in.op);
  CHECK(out.shape == in.shape);
  CHECK(out.device == in.device);
  CHECK(out.device_index == 2);
  CHECK(out.root == 1);
  CHECK(out.prescale == 0.5);
  CHECK(out.postscale == 2.0);
  CHECK(out.splits == in.splits);
}

TEST_CASE("Out-of-range values from the wire are InvalidArgument", "[convert]") {
  proto::TensorSignature p;
  ToProto(SampleSpec(), &p);
  TensorSpec out;
  SECTION("dtype") {
    p.set_dtype(kNumDataTypes);
    Status s = FromProto(p, &out);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("dtype") != std::string::npos);
  }
  SECTION("collective") {
    p.set_collective(-1);
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
  SECTION("op") {
    p.set_op(99);
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
  SECTION("device") {
    p.set_device(7);
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
  SECTION("negative dimension") {
    p.set_shape(0, -3);
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
  SECTION("overflowing element count") {
    p.clear_shape();
    for (int i = 0; i < 4; ++i) p.add_shape(int64_t{1} << 40);
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
  SECTION("empty name") {
    p.set_name("");
    CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  }
}

TEST_CASE("PlanMessage round-trips and validates codes", "[convert]") {
  PlanMessage in;
  BucketPlan b;
  b.seq = 7;
  b.collective = CollectiveType::kAllgather;
  b.dtype = DataType::kInt64;
  b.joined_ranks = 1;
  b.process_set = 4;
  b.participants = {0, 2};
  b.device = Device::kCuda;
  b.entries.push_back({3, 10, {1, 2}, {}});
  b.entries.push_back({-1, 4, {}, {2, 2}});
  b.entries[1].layout = 0xfedcba9876543211ull;
  in.buckets.push_back(b);
  in.errors.push_back({5, Status(Code::kMismatch, "shape differs")});
  proto::CoordinatorMessage::Plan p;
  ToProto(in, &p);
  PlanMessage out;
  REQUIRE(FromProto(p, &out).ok());
  REQUIRE(out.buckets.size() == 1);
  CHECK(out.buckets[0].seq == 7);
  CHECK(out.buckets[0].collective == CollectiveType::kAllgather);
  CHECK(out.buckets[0].joined_ranks == 1);
  CHECK(out.buckets[0].process_set == 4);
  CHECK(out.buckets[0].participants == std::vector<int32_t>{0, 2});
  CHECK(out.buckets[0].device == Device::kCuda);
  REQUIRE(out.buckets[0].entries.size() == 2);
  CHECK(out.buckets[0].entries[0].id == 3);
  CHECK(out.buckets[0].entries[0].first_dims == std::vector<int64_t>{1, 2});
  CHECK(out.buckets[0].entries[1].id == -1);
  CHECK(out.buckets[0].entries[1].recv_splits == std::vector<int64_t>{2, 2});
  CHECK(out.buckets[0].entries[1].layout == 0xfedcba9876543211ull);
  CHECK(out.buckets[0].entries[0].layout == 0);
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].status.code() == Code::kMismatch);

  p.mutable_buckets(0)->set_device(7);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  p.mutable_buckets(0)->set_device(0);
  p.mutable_buckets(0)->set_process_set(-1);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  p.mutable_buckets(0)->set_process_set(0);
  p.mutable_errors(0)->set_code(1000);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  p.mutable_errors(0)->set_code(0);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  p.mutable_errors(0)->set_code(static_cast<int>(Code::kMismatch));
  p.mutable_buckets(0)->set_dtype(55);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
}

TEST_CASE("Topology round-trips and rejects inconsistent entries", "[convert]") {
  Topology t;
  t.ranks.push_back({0, "a", 10, 0, 2, 0, 2});
  t.ranks.push_back({1, "a", 11, 1, 2, 0, 2});
  t.ranks.push_back({2, "b", 12, 0, 1, 1, 2});
  proto::JoinResponse p;
  ToProto(t, &p);
  Topology out;
  REQUIRE(FromProto(p, &out).ok());
  REQUIRE(out.ranks.size() == 3);
  CHECK(out.ranks[2].hostname == "b");
  CHECK(out.ranks[2].cross_rank == 1);
  p.mutable_ranks(1)->set_rank(5);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
  p.mutable_ranks(1)->set_rank(1);
  p.mutable_ranks(1)->set_local_rank(2);
  CHECK(FromProto(p, &out).code() == Code::kInvalidArgument);
}

TEST_CASE("gRPC status codes map to Hora codes", "[convert]") {
  CHECK(FromGrpcStatus(grpc::Status::OK, "x").ok());
  Status s = FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no"), "ctx");
  CHECK(s.code() == Code::kUnauthenticated);
  CHECK(s.message() == "ctx: no");
  CHECK(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, ""), "").code() ==
        Code::kUnavailable);
  CHECK(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, ""), "").code() ==
        Code::kDeadlineExceeded);
  CHECK(ToGrpcStatus(InvalidArgument("x")).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("ProcessSetOp and ProcessSetResult round-trip", "[convert]") {
  ProcessSetOp op;
  op.seq = 9;
  op.ranks = {0, 3};
  op.cpu_operations = "loopback";
  op.refused = "why";
  proto::ProcessSetOp p;
  ToProto(op, &p);
  ProcessSetOp back;
  REQUIRE(FromProto(p, &back).ok());
  CHECK(back.seq == 9);
  CHECK(back.ranks == std::vector<int32_t>{0, 3});
  CHECK(back.cpu_operations == "loopback");
  CHECK(back.refused == "why");
  ProcessSetResult r;
  r.seq = 9;
  r.status = Status(Code::kAlreadyExists, "dup");
  r.process_set = 2;
  proto::CoordinatorMessage::ProcessSetResult pr;
  ToProto(r, &pr);
  ProcessSetResult rb;
  REQUIRE(FromProto(pr, &rb).ok());
  CHECK(rb.status.code() == Code::kAlreadyExists);
  CHECK(rb.status.message() == "dup");
  CHECK(rb.process_set == 2);
  pr.set_code(999);
  CHECK_FALSE(FromProto(pr, &rb).ok());
}

}  // namespace
}  // namespace hora
