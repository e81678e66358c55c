// The MPI backend, ranks as real processes under mpirun (np 2 and 3): every collective x
// dtype x op against references computed here from every rank's known input
// (tests/collectives/dtype_values.h), with 0, 1, odd and larger counts; uneven and empty
// per-rank sizes; 64 MiB tensors; point-to-point in order over several tags.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/mpi_cases.h"

namespace hora {
namespace testing {
namespace {

const size_t kCounts[] = {0, 1, 7, 1001, 65537};

std::string Compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                    const std::string& label) {
  if (got.size() != want.size()) return label + ": size differs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return label + ": byte " + std::to_string(i) + " is " + std::to_string(got[i]) +
             ", expected " + std::to_string(want[i]);
    }
  }
  return "";
}

std::string AllreduceCase(DataType t, ReduceOp op) {
  const size_t elem = DataTypeSize(t);
  for (size_t count : kCounts) {
    std::vector<uint8_t> buf(count * elem), want(count * elem);
    FillInput(t, op, WorldRank(), buf.data(), count);
    FillExpected(t, op, WorldSize(), want.data(), count);
    Status s = World().Allreduce(buf.data(), count, t, op);
    const std::string label = Label("allreduce", t, op, count);
    if (!s.ok()) return label + ": " + s.ToString();
    std::string e = Compare(buf, want, label);
    if (!e.empty()) return e;
  }
  return "";
}

// Rank r gets base + r elements (base 0 leaves rank 0 with an empty slice).
std::string ReducescatterCase(DataType t, ReduceOp op) {
  const size_t elem = DataTypeSize(t);
  const int n = WorldSize(), me = WorldRank();
  for (size_t base : {size_t{0}, size_t{1}, size_t{1000}}) {
    std::vector<size_t> counts(n);
    size_t total = 0, offset = 0;
    for (int r = 0; r < n; ++r) {
      counts[r] = base + r;
      if (r < me) offset += counts[r];
      total += counts[r];
    }
    std::vector<uint8_t> in(total * elem), out(counts[me] * elem), want(counts[me] * elem);
    FillInput(t, op, me, in.data(), total);
    FillExpected(t, op, n, want.data(), counts[me], offset);
    Status s = World().Reducescatter(in.data(), out.data(), counts, t, op);
    const std::string label = Label("reducescatter", t, op, total);
    if (!s.ok()) return label + ": " + s.ToString();
    std::string e = Compare(out, want, label);
    if (!e.empty()) return e;
    // In place (communicator.h): the output is this rank's slice of the input.
    s = World().Reducescatter(in.data(), in.data() + offset * elem, counts, t, op);
    if (!s.ok()) return label + " in place: " + s.ToString();
    std::vector<uint8_t> got(in.begin() + offset * elem, in.begin() + (offset + counts[me]) * elem);
    e = Compare(got, want, label + " in place");
    if (!e.empty()) return e;
  }
  return "";
}

// Registers one case per dtype x op for allreduce and reducescatter.
struct TypedCases {
  TypedCases() {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        MpiCases().push_back({std::string("allreduce ") + DataTypeName(t) + " " + ReduceOpName(op),
                              [t, op] { return AllreduceCase(t, op); }});
      }
    }
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        MpiCases().push_back(
            {std::string("reducescatter ") + DataTypeName(t) + " " + ReduceOpName(op),
             [t, op] { return ReducescatterCase(t, op); }});
      }
    }
  }
} typed_cases;

uint8_t Byte(int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i * 7 + 1); }

MPI_CASE("broadcast from every root, 0 B to 1 MiB") {
  for (int root = 0; root < WorldSize(); ++root) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
      std::vector<uint8_t> buf(bytes), want(bytes);
      for (size_t i = 0; i < bytes; ++i) {
        buf[i] = Byte(WorldRank(), i);
        want[i] = Byte(root, i);
      }
      Status s = World().Broadcast(buf.data(), bytes, root);
      const std::string label =
          "broadcast root " + std::to_string(root) + " " + std::to_string(bytes);
      if (!s.ok()) return label + ": " + s.ToString();
      std::string e = Compare(buf, want, label);
      if (!e.empty()) return e;
    }
  }
  return "";
}

MPI_CASE("broadcast: a root out of range is INVALID_ARGUMENT") {
  uint8_t b = 0;
  Status s = World().Broadcast(&b, 1, WorldSize());
  return s.code() == Code::kInvalidArgument ? "" : "got " + s.ToString();
}

MPI_CASE("allgatherv with uneven and empty contributions, separate and in place") {
  const int n = WorldSize(), me = WorldRank();
  for (size_t base : {size_t{0}, size_t{3}, size_t{100000}}) {
    for (bool in_place : {false, true}) {
      std::vector<size_t> bytes(n);
      size_t total = 0, offset = 0;
      for (int r = 0; r < n; ++r) {
        bytes[r] = r == 1 ? 0 : base + r;  // rank 1 contributes nothing
        if (r < me) offset += bytes[r];
        total += bytes[r];
      }
      std::vector<uint8_t> in(bytes[me]), out(total, 0xee), want;
      for (size_t i = 0; i < in.size(); ++i) in[i] = Byte(me, i);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < bytes[r]; ++i) want.push_back(Byte(r, i));
      }
      if (in_place) std::memcpy(out.data() + offset, in.data(), in.size());
      const void* src = in_place ? static_cast<const void*>(out.data() + offset) : in.data();
      Status s = World().Allgatherv(src, out.data(), bytes);
      const std::string label =
          std::string("allgatherv ") + (in_place ? "in place " : "") + std::to_string(total);
      if (!s.ok()) return label + ": " + s.ToString();
      std::string e = Compare(out, want, label);
      if (!e.empty()) return e;
    }
  }
  return "";
}

// Rank s sends (s + d) % 3 * base + d bytes to rank d, so some pairs are empty.
size_t PairBytes(int s, int d, size_t base) { return ((s + d) % 3) * base + (s == d ? 1 : 0); }
uint8_t PairByte(int s, int d, size_t i) { return static_cast<uint8_t>(s * 50 + d * 7 + i); }

MPI_CASE("alltoallv with uneven and empty pairs") {
  const int n = WorldSize(), me = WorldRank();
  for (size_t base : {size_t{0}, size_t{5}, size_t{70000}}) {
    std::vector<size_t> send(n), recv(n);
    std::vector<uint8_t> in, want;
    for (int d = 0; d < n; ++d) {
      send[d] = PairBytes(me, d, base);
      for (size_t i = 0; i < send[d]; ++i) in.push_back(PairByte(me, d, i));
    }
    for (int s = 0; s < n; ++s) {
      recv[s] = PairBytes(s, me, base);
      for (size_t i = 0; i < recv[s]; ++i) want.push_back(PairByte(s, me, i));
    }
    std::vector<uint8_t> out(want.size(), 0xee);
    Status s = World().Alltoallv(in.data(), send, out.data(), recv);
    const std::string label = "alltoallv base " + std::to_string(base);
    if (!s.ok()) return label + ": " + s.ToString();
    std::string e = Compare(out, want, label);
    if (!e.empty()) return e;
  }
  return "";
}

MPI_CASE("barrier") {
  for (int i = 0; i < 3; ++i) {
    Status s = World().Barrier();
    if (!s.ok()) return s.ToString();
  }
  return "";
}

// A ring: every rank sends to the next and receives from the previous, several messages in
// order with different tags and sizes (0 B, 1 B, 1 MiB, a tag past 2^31).
MPI_CASE("send/recv in a ring, in order over several tags") {
  const int n = WorldSize(), me = WorldRank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const uint32_t tags[] = {7, 7, 3, 0xfffffff0u};
  const size_t sizes[] = {0, 1, size_t{1} << 20, 4096};
  for (int k = 0; k < 4; ++k) {
    std::vector<uint8_t> out(sizes[k]), in(sizes[k], 0xee), want(sizes[k]);
    for (size_t i = 0; i < sizes[k]; ++i) {
      out[i] = Byte(me + k, i);
      want[i] = Byte(prev + k, i);
    }
    Status s;
    if (me % 2 == 0) {
      s = World().Send(out.data(), out.size(), next, tags[k]);
      if (s.ok()) s = World().Recv(in.data(), in.size(), prev, tags[k]);
    } else {
      s = World().Recv(in.data(), in.size(), prev, tags[k]);
      if (s.ok()) s = World().Send(out.data(), out.size(), next, tags[k]);
    }
    const std::string label = "message " + std::to_string(k) + " tag " + std::to_string(tags[k]);
    if (!s.ok()) return label + ": " + s.ToString();
    std::string e = Compare(in, want, label);
    if (!e.empty()) return e;
  }
  return "";
}

MPI_CASE("send/recv: this rank or a rank out of range is INVALID_ARGUMENT") {
  uint8_t b = 0;
  Status a = World().Send(&b, 1, WorldRank(), 0);
  Status c = World().Recv(&b, 1, WorldSize(), 0);
  if (a.code() != Code::kInvalidArgument || c.code() != Code::kInvalidArgument) {
    return "got " + a.ToString() + " and " + c.ToString();
  }
  return "";
}

// 64 MiB in float32 (MPI's own sum) and in bfloat16 (Hora's reduce through a user op).
MPI_CASE("allreduce of 64 MiB, float32 and bfloat16") {
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16}) {
    const size_t count = (size_t{64} << 20) / DataTypeSize(t);
    std::vector<uint8_t> buf(count * DataTypeSize(t)), want(buf.size());
    FillInput(t, ReduceOp::kSum, WorldRank(), buf.data(), count);
    FillExpected(t, ReduceOp::kSum, WorldSize(), want.data(), count);
    Status s = World().Allreduce(buf.data(), count, t, ReduceOp::kSum);
    const std::string label = Label("allreduce", t, ReduceOp::kSum, count);
    if (!s.ok()) return label + ": " + s.ToString();
    std::string e = Compare(buf, want, label);
    if (!e.empty()) return e;
  }
  return "";
}

MPI_CASE("alltoallv and allgatherv of 64 MiB in total") {
  const int n = WorldSize(), me = WorldRank();
  const size_t each = (size_t{64} << 20) / n;
  std::vector<size_t> bytes(n, each);
  std::vector<uint8_t> in(each), out(each * n), want(each * n);
  for (size_t i = 0; i < each; ++i) in[i] = Byte(me, i);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < each; ++i) want[r * each + i] = Byte(r, i);
  }
  Status s = World().Allgatherv(in.data(), out.data(), bytes);
  if (!s.ok()) return "allgatherv: " + s.ToString();
  std::string e = Compare(out, want, "allgatherv 64 MiB");
  if (!e.empty()) return e;
  std::vector<size_t> pair(n, each / n);
  std::vector<uint8_t> a_in(each / n * n), a_out(a_in.size());
  for (int d = 0; d < n; ++d) {
    for (size_t i = 0; i < each / n; ++i) a_in[d * (each / n) + i] = PairByte(me, d, i);
  }
  s = World().Alltoallv(a_in.data(), pair, a_out.data(), pair);
  if (!s.ok()) return "alltoallv: " + s.ToString();
  for (int src = 0; src < n; ++src) {
    for (size_t i = 0; i < each / n; ++i) {
      if (a_out[src * (each / n) + i] != PairByte(src, me, i)) {
        return "alltoallv 64 MiB: wrong byte from rank " + std::to_string(src);
      }
    }
  }
  return "";
}

}  // namespace
}  // namespace testing
}  // namespace hora
