#include "collectives/mpi/mpi_reduce.h"

#include <mutex>
#include <string>

#include "common/logging.h"
#include "common/reduce.h"

namespace hora {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
constexpr int kNumOps = 4;

int OpIndex(ReduceOp op) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOps[i] == op) return i;
  }
  return -1;
}

// MPI's user function: inout[i] = in[i] op inout[i]. MPI passes no context, so each
// (dtype, op) pair is its own instantiation.
template <DataType kType, ReduceOp kOp>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  ReduceInto(inout, in, static_cast<size_t>(*len), kType, kOp);
}

using UserFunction = void (*)(void*, void*, int*, MPI_Datatype*);

template <DataType kType>
constexpr UserFunction kHalfFunctions[kNumOps] = {
    HalfReduce<kType, ReduceOp::kSum>, HalfReduce<kType, ReduceOp::kMin>,
    HalfReduce<kType, ReduceOp::kMax>, HalfReduce<kType, ReduceOp::kProduct>};

struct UserOps {
  MPI_Op float16[kNumOps];
  MPI_Op bfloat16[kNumOps];
};

const UserOps& CreatedUserOps() {
  static const UserOps* ops = [] {
    auto* u = new UserOps;
    for (int i = 0; i < kNumOps; ++i) {
      HORA_CHECK(MPI_Op_create(kHalfFunctions<DataType::kFloat16>[i], 1, &u -> float16[i]) ==
                 MPI_SUCCESS);
      HORA_CHECK(MPI_Op_create(kHalfFunctions<DataType::kBfloat16>[i], 1, &u -> bfloat16[i]) ==
                 MPI_SUCCESS);
    }
    return u;
  }();
  return *ops;
}

MPI_Op PredefinedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return MPI_SUM;
  }
}

}  // namespace

StatusOr<MpiReduction> MpiReductionFor(DataType dtype, ReduceOp op) {
  if (!IsValidDataType(static_cast<int32_t>(dtype))) {
    return InvalidArgument("mpi: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  const int index = OpIndex(op);
  if (index < 0) {
    return InvalidArgument(std::string("mpi: reduction op ") + ReduceOpName(op) +
                           " is not a backend op (average is a sum with a postscale)");
  }
  MpiReduction r;
  r.op = PredefinedOp(op);
  switch (dtype) {
    case DataType::kUint8:
      r.type = MPI_UINT8_T;
      break;
    case DataType::kInt8:
      r.type = MPI_INT8_T;
      break;
    case DataType::kInt16:
      r.type = MPI_INT16_T;
      break;
    case DataType::kUint16:
      r.type = MPI_UINT16_T;
      break;
    case DataType::kInt32:
      r.type = MPI_INT32_T;
      break;
    case DataType::kInt64:
      r.type = MPI_INT64_T;
      break;
    case DataType::kFloat32:
      r.type = MPI_FLOAT;
      break;
    case DataType::kFloat64:
      r.type = MPI_DOUBLE;
      break;
    case DataType::kBool:
      r.type = MPI_UINT8_T;
      r.op = (op == ReduceOp::kSum || op == ReduceOp::kMax) ? MPI_LOR : MPI_LAND;
      break;
    case DataType::kFloat16:
      r.type = MPI_UINT16_T;
      r.op = CreatedUserOps().float16[index];
      break;
    case DataType::kBfloat16:
      r.type = MPI_UINT16_T;
      r.op = CreatedUserOps().bfloat16[index];
      break;
  }
  return r;
}

}  // namespace hora
