// The vocabulary every layer shares: element types, reduction ops, collective kinds and the
// signature of one tensor as the coordinator negotiates it.
//
// The numeric values are stable: they are the values of the matching enums in bindings/c/hora.h
// and on the wire (proto/coordinator.proto).
#ifndef HORA_COMMON_TYPES_H_
#define HORA_COMMON_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hora {

enum class DataType : int32_t {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBfloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kInt16 = 9,  // appended: the values above keep their numbers
  kUint16 = 10,
};
constexpr int kNumDataTypes = 11;

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
constexpr int kNumReduceOps = 5;

enum class CollectiveType : int32_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kAllgather = 2,
  kReducescatter = 3,
  kAlltoall = 4,
  kBarrier = 5,
  kSend = 6,  // point-to-point: TensorSpec::peer is the receiver
  kRecv = 7,  // point-to-point: TensorSpec::peer is the sender
};
constexpr int kNumCollectiveTypes = 8;

// The process set of every rank (Horovod's global process set).
constexpr int32_t kGlobalProcessSet = 0;

enum class Device : int32_t { kCpu = 0, kCuda = 1 };

bool IsValidDataType(int32_t v);
bool IsValidReduceOp(int32_t v);
bool IsValidCollective(int32_t v);
size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
const char* CollectiveName(CollectiveType c);

// Everything about one tensor that all ranks must agree on before it runs. The planner checks
// these field by field across ranks (coordinator/planner.h).
struct TensorSpec {
  std::string name;
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> shape;
  Device device = Device::kCpu;
  int32_t device_index = 0;
  int32_t root = 0;       // broadcast only
  double prescale = 1.0;  // allreduce / reducescatter only
  double postscale = 1.0;
  // alltoall only: rows of the first dimension this rank sends to each rank (empty = even).
  std::vector<int64_t> splits;
  // The process set the operation runs in; ranks (root, peer, splits) are ranks in that set.
  int32_t process_set = kGlobalProcessSet;
  int32_t peer = -1;  // send / recv only: the other side
  // Non-empty: the submitting rank could not make this operation and says why; the name
  // then fails on every rank of the set with this message (so the ranks stay in step).
  std::string refused;

  int64_t NumElements() const;
  // Elements per index of the first dimension (product of shape[1:]); 1 for scalars.
  int64_t RowElements() const;
  size_t ByteSize() const { return static_cast<size_t>(NumElements()) * DataTypeSize(dtype); }
};

// A tensor's identity during negotiation: names are unique per process set.
struct TensorKey {
  int32_t process_set = kGlobalProcessSet;
  std::string name;
  bool operator==(const TensorKey& o) const {
    return process_set == o.process_set && name == o.name;
  }
};
struct TensorKeyHash {
  size_t operator()(const TensorKey& k) const {
    return std::hash<std::string>()(k.name) * 31u + static_cast<size_t>(k.process_set);
  }
};
inline TensorKey TensorKeyOf(const TensorSpec& s) { return TensorKey{s.process_set, s.name}; }
// "'w'" for the global set, "'w' (process set 2)" otherwise: for messages.
std::string DescribeTensor(const TensorKey& key);

bool IsPointToPoint(CollectiveType c);

// Whether a name is made anew for each call and never submitted again: a transfer's
// ("hora.p2p.<from>><to>.t<tag>.<n>", Engine::EnqueueTransfer) and an unnamed call's (a
// ".noname.<n>" component: hora/core.py op_name, hora/torch/distributed.py). Once such a name
// is planned, the rank and the coordinator forget its id and spec, so a job that makes
// millions of them keeps none; the steady path does not learn it. A name that matches but does
// repeat only pays its full spec again at its next submission.
bool IsOneShotName(const std::string& name);

bool operator==(const TensorSpec& a, const TensorSpec& b);
// Every field equal but the name (the planner compares specs kept under one name).
bool EqualButName(const TensorSpec& a, const TensorSpec& b);
inline bool operator!=(const TensorSpec& a, const TensorSpec& b) { return !(a == b); }

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace hora

#endif  // HORA_COMMON_TYPES_H_
