#include "common/types.h"

namespace hora {

bool IsValidDataType(int32_t v) { return v >= 0 && v < kNumDataTypes; }
bool IsValidReduceOp(int32_t v) { return v >= 0 && v < kNumReduceOps; }
bool IsValidCollective(int32_t v) { return v >= 0 && v < kNumCollectiveTypes; }

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBfloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kBool:
      return "bool";
    case DataType::kInt16:
      return "int16";
    case DataType::kUint16:
      return "uint16";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

const char* CollectiveName(CollectiveType c) {
  switch (c) {
    case CollectiveType::kAllreduce:
      return "allreduce";
    case CollectiveType::kBroadcast:
      return "broadcast";
    case CollectiveType::kAllgather:
      return "allgather";
    case CollectiveType::kReducescatter:
      return "reducescatter";
    case CollectiveType::kAlltoall:
      return "alltoall";
    case CollectiveType::kBarrier:
      return "barrier";
    case CollectiveType::kSend:
      return "send";
    case CollectiveType::kRecv:
      return "recv";
  }
  return "unknown";
}

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorSpec::RowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

bool operator==(const TensorSpec& a, const TensorSpec& b) {
  return a.name == b.name && EqualButName(a, b);
}

bool EqualButName(const TensorSpec& a, const TensorSpec& b) {
  return a.collective == b.collective && a.dtype == b.dtype && a.op == b.op && a.shape == b.shape &&
         a.device == b.device && a.device_index == b.device_index && a.root == b.root &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.splits == b.splits &&
         a.process_set == b.process_set && a.peer == b.peer && a.refused == b.refused;
}

bool IsPointToPoint(CollectiveType c) {
  return c == CollectiveType::kSend || c == CollectiveType::kRecv;
}

bool IsOneShotName(const std::string& name) {
  static const std::string kTransfer = "hora.p2p.";
  static const std::string kUnnamed = ".noname.";
  if (name.compare(0, kTransfer.size(), kTransfer) == 0) return true;
  for (size_t at = name.find(kUnnamed); at != std::string::npos; at = name.find(kUnnamed, at + 1)) {
    size_t end = at + kUnnamed.size();
    const size_t digits = end;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > digits && (end == name.size() || name[end] == '.')) return true;
  }
  return false;
}

std::string DescribeTensor(const TensorKey& key) {
  std::string s = "'" + key.name + "'";
  if (key.process_set != kGlobalProcessSet) {
    s += " (process set " + std::to_string(key.process_set) + ")";
  }
  return s;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace hora
