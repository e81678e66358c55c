#include "runtime/bucket_layout.h"

#include <string>

namespace hora {
namespace {

size_t RowBytes(const TensorSpec& spec) {
  return static_cast<size_t>(spec.RowElements()) * DataTypeSize(spec.dtype);
}

int64_t FirstDim(const TensorSpec& spec, int64_t scalar) {
  return spec.shape.empty() ? scalar : spec.shape[0];
}

}  // namespace

std::vector<int64_t> WithFirstDim(const TensorSpec& spec, int64_t first) {
  std::vector<int64_t> shape = spec.shape;
  if (shape.empty()) {
    shape.push_back(first);
  } else {
    shape[0] = first;
  }
  return shape;
}

StatusOr<RowLayout> AllgatherLayout(const BucketPlan& plan, const TensorSpec& spec, int size) {
  const auto& dims = plan.entries[0].first_dims;
  if (static_cast<int>(dims.size()) != size) {
    return Internal("allgather plan has " + std::to_string(dims.size()) + " first dimensions");
  }
  const size_t row_bytes = RowBytes(spec);
  RowLayout l;
  l.recv_bytes.resize(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    l.recv_bytes[i] = static_cast<size_t>(dims[i]) * row_bytes;
    l.rows += dims[i];
  }
  l.out_bytes = static_cast<size_t>(l.rows) * row_bytes;
  return l;
}

StatusOr<RowLayout> AlltoallLayout(const BucketPlan& plan, const TensorSpec& spec, int size) {
  const auto& recv = plan.entries[0].recv_splits;
  if (static_cast<int>(recv.size()) != size) {
    return Internal("alltoall plan has " + std::to_string(recv.size()) + " receive splits");
  }
  std::vector<int64_t> send = spec.splits;
  if (send.empty()) send.assign(size, FirstDim(spec, 0) / size);
  const size_t row_bytes = RowBytes(spec);
  RowLayout l;
  l.send_bytes.resize(size);
  l.recv_bytes.resize(size);
  for (int i = 0; i < size; ++i) {
    l.send_bytes[i] = static_cast<size_t>(send[i]) * row_bytes;
    l.recv_bytes[i] = static_cast<size_t>(recv[i]) * row_bytes;
    l.rows += recv[i];
  }
  l.out_bytes = static_cast<size_t>(l.rows) * row_bytes;
  return l;
}

std::vector<size_t> ReducescatterCounts(const TensorSpec& spec, int size) {
  const int64_t d0 = FirstDim(spec, 1);
  const int64_t row = spec.RowElements();
  std::vector<size_t> counts(size);
  for (int i = 0; i < size; ++i) {
    counts[i] = static_cast<size_t>((d0 / size + (i < d0 % size ? 1 : 0)) * row);
  }
  return counts;
}

int64_t ReducescatterRows(const TensorSpec& spec, int size, int rank) {
  const int64_t d0 = FirstDim(spec, 1);
  return d0 / size + (rank < d0 % size ? 1 : 0);
}

}  // namespace hora
