#include "coordinator/planner_check.h"

#include <charconv>
#include <cmath>
#include <utility>

namespace hora {
namespace planner_internal {
namespace {

bool Reduces(CollectiveType c) {
  return c == CollectiveType::kAllreduce || c == CollectiveType::kReducescatter;
}

bool ComparesShapeTail(CollectiveType c) {
  return c == CollectiveType::kAllgather || c == CollectiveType::kAlltoall;
}

// Shortest text that reads back as the same double.
std::string DoubleString(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

bool SameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::vector<int64_t> ShapeTail(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {};
  return std::vector<int64_t>(shape.begin() + 1, shape.end());
}

// "tensor 'w': shape differs across ranks: [4] on ranks 0,2; [5] on rank 1". Values are
// grouped by their text, groups in the order of their lowest rank.
Status MismatchStatus(const CompleteName& c, const char* field,
                      const std::vector<std::pair<int, std::string>>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, text] : values) {
    bool found = false;
    for (auto& g : groups) {
      if (g.first == text) {
        g.second.push_back(rank);
        found = true;
        break;
      }
    }
    if (!found) groups.push_back({text, {rank}});
  }
  std::string msg = "tensor '" + c.name + "': " + field + " differs across ranks: ";
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) msg += "; ";
    msg += groups[i].first + " on " + RanksString(groups[i].second);
  }
  return Status(Code::kMismatch, msg);
}

// Compares get(spec) across submitting ranks with `same`; on a difference, formats every
// rank's value with `fmt`. Ranks that share the reference's spec (the planner keeps one copy
// of equal specs: usually every rank does) are equal without a look: at 1,024 ranks the
// per-rank copies of the shape cost rank 0 more than the rest of the check.
template <typename Get, typename Same, typename Fmt>
Status CompareField(const CompleteName& c, const char* field, Get get, Same same, Fmt fmt) {
  const int ref = ReferenceRank(c);
  const uint32_t ref_spec = c.spec_of[ref];
  bool differs = false;
  for (int r = ref + 1; r < c.size && !differs; ++r) {
    if (c.submitted[r] && c.spec_of[r] != ref_spec && !same(get(c.spec(ref)), get(c.spec(r)))) {
      differs = true;
    }
  }
  if (!differs) return Status::Ok();
  std::vector<std::pair<int, std::string>> values;
  for (int r = 0; r < c.size; ++r) {
    if (c.submitted[r]) values.push_back({r, fmt(get(c.spec(r)))});
  }
  return MismatchStatus(c, field, values);
}

template <typename T>
bool Equal(const T& a, const T& b) {
  return a == b;
}

Status CheckFields(const CompleteName& c) {
  const CollectiveType coll = c.spec(ReferenceRank(c)).collective;
  HORA_RETURN_IF_ERROR(CompareField(
      c, "collective", [](const TensorSpec& s) { return s.collective; }, Equal<CollectiveType>,
      [](CollectiveType v) { return std::string(CollectiveName(v)); }));
  const bool barrier = coll == CollectiveType::kBarrier;
  if (!barrier) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "dtype", [](const TensorSpec& s) { return s.dtype; }, Equal<DataType>,
        [](DataType v) { return std::string(DataTypeName(v)); }));
  }
  if (Reduces(coll)) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "op", [](const TensorSpec& s) { return s.op; }, Equal<ReduceOp>,
        [](ReduceOp v) { return std::string(ReduceOpName(v)); }));
  }
  if (ComparesShapeTail(coll)) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "shape[1:]", [](const TensorSpec& s) { return ShapeTail(s.shape); },
        Equal<std::vector<int64_t>>, ShapeString));
  } else if (!barrier) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "shape", [](const TensorSpec& s) { return s.shape; }, Equal<std::vector<int64_t>>,
        ShapeString));
  }
  if (coll == CollectiveType::kBroadcast) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "root", [](const TensorSpec& s) { return s.root; }, Equal<int32_t>,
        [](int32_t v) { return std::to_string(v); }));
  }
  if (Reduces(coll)) {
    HORA_RETURN_IF_ERROR(CompareField(
        c, "prescale", [](const TensorSpec& s) { return s.prescale; }, SameDouble, DoubleString));
    HORA_RETURN_IF_ERROR(CompareField(
        c, "postscale", [](const TensorSpec& s) { return s.postscale; }, SameDouble, DoubleString));
  }
  return CompareField(
      c, "device", [](const TensorSpec& s) { return s.device; }, Equal<Device>,
      [](Device v) { return std::string(v == Device::kCuda ? "cuda" : "cpu"); });
}

// Only allreduce can run with ranks that joined instead of submitting.
Status CheckJoin(const CompleteName& c) {
  const CollectiveType coll = c.spec(ReferenceRank(c)).collective;
  if (coll == CollectiveType::kAllreduce) return Status::Ok();
  std::vector<int> absent;
  for (int r = 0; r < c.size; ++r) {
    if (!c.submitted[r]) absent.push_back(r);
  }
  if (absent.empty()) return Status::Ok();
  return InvalidArgument("tensor '" + c.name + "': " + CollectiveName(coll) + " cannot run while " +
                         RanksString(absent) + (absent.size() == 1 ? " has" : " have") +
                         " joined: only allreduce supports join");
}

Status CheckSplits(const CompleteName& c, int r) {
  const TensorSpec& s = c.spec(r);
  const std::string prefix = "tensor '" + c.name + "': alltoall ";
  const std::string on = " on rank " + std::to_string(r);
  if (s.splits.empty()) {
    if (s.shape[0] % c.size != 0) {
      return InvalidArgument(prefix + "with even splits needs the first dimension (" +
                             std::to_string(s.shape[0]) + ")" + on + " to be divisible by " +
                             std::to_string(c.size) + " ranks");
    }
    return Status::Ok();
  }
  if (static_cast<int>(s.splits.size()) != c.size) {
    return InvalidArgument(prefix + "splits" + on + " have " + std::to_string(s.splits.size()) +
                           " entries, expected " + std::to_string(c.size));
  }
  int64_t sum = 0;
  for (int64_t v : s.splits) {
    if (v < 0) {
      return InvalidArgument(prefix + "splits" + on + " contain a negative entry (" +
                             std::to_string(v) + ")");
    }
    sum += v;
  }
  if (sum != s.shape[0]) {
    return InvalidArgument(prefix + "splits" + on + " sum to " + std::to_string(sum) +
                           ", but the first dimension is " + std::to_string(s.shape[0]));
  }
  return Status::Ok();
}

Status CheckSanity(const CompleteName& c) {
  const TensorSpec& ref = c.spec(ReferenceRank(c));
  const CollectiveType coll = ref.collective;
  const bool needs_dim = coll == CollectiveType::kAllgather || coll == CollectiveType::kAlltoall ||
                         coll == CollectiveType::kReducescatter;
  for (int r = 0; r < c.size; ++r) {
    if (!c.submitted[r]) continue;
    const TensorSpec& s = c.spec(r);
    for (int64_t d : s.shape) {
      if (d < 0) {
        return InvalidArgument("tensor '" + c.name + "': shape " + ShapeString(s.shape) +
                               " on rank " + std::to_string(r) + " has a negative dimension");
      }
    }
    if (needs_dim && s.shape.empty()) {
      return InvalidArgument("tensor '" + c.name + "': " + CollectiveName(coll) +
                             " needs at least one dimension, but rank " + std::to_string(r) +
                             " submitted a scalar");
    }
    if (coll == CollectiveType::kAlltoall) HORA_RETURN_IF_ERROR(CheckSplits(c, r));
  }
  if (coll == CollectiveType::kBroadcast && (ref.root < 0 || ref.root >= c.size)) {
    return InvalidArgument("tensor '" + c.name + "': broadcast root " + std::to_string(ref.root) +
                           " is out of range [0, " + std::to_string(c.size) + ")");
  }
  return Status::Ok();
}

}  // namespace

std::string RanksString(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ranks[i]);
  }
  return s;
}

int ReferenceRank(const CompleteName& c) {
  for (int r = 0; r < c.size; ++r) {
    if (c.submitted[r]) return r;
  }
  return 0;
}

Status CheckComplete(const CompleteName& c) {
  HORA_RETURN_IF_ERROR(CheckFields(c));
  HORA_RETURN_IF_ERROR(CheckJoin(c));
  return CheckSanity(c);
}

Status CheckRefused(const CompleteName& c) {
  for (int r = 0; r < c.size; ++r) {
    if (c.submitted[r] && !c.spec(r).refused.empty()) {
      return InvalidArgument("tensor '" + c.name + "' cannot run: " + c.spec(r).refused);
    }
  }
  return Status::Ok();
}

Status CheckPointToPoint(const CompleteName& c, const std::vector<int>& pair) {
  const int from = pair[0], to = pair[1];
  const TensorSpec& s = c.spec(from);
  const TensorSpec& r = c.spec(to);
  const std::string prefix = "transfer '" + c.name + "' from rank " + std::to_string(from) +
                             " to rank " + std::to_string(to) + ": ";
  if (s.collective != CollectiveType::kSend || s.peer != to ||
      r.collective != CollectiveType::kRecv || r.peer != from) {
    return Status(Code::kMismatch, prefix + "rank " + std::to_string(from) + " submitted " +
                                       CollectiveName(s.collective) + " with peer " +
                                       std::to_string(s.peer) + ", rank " + std::to_string(to) +
                                       " submitted " + CollectiveName(r.collective) +
                                       " with peer " + std::to_string(r.peer));
  }
  if (s.dtype != r.dtype) {
    return Status(Code::kMismatch, prefix + "dtype differs: " + DataTypeName(s.dtype) +
                                       " on the sender, " + DataTypeName(r.dtype) +
                                       " on the receiver");
  }
  if (s.NumElements() != r.NumElements()) {
    return Status(Code::kMismatch, prefix + "size differs: " + std::to_string(s.NumElements()) +
                                       " elements " + ShapeString(s.shape) + " sent, " +
                                       std::to_string(r.NumElements()) + " elements " +
                                       ShapeString(r.shape) + " expected");
  }
  if (s.device != r.device) {
    return Status(Code::kMismatch, prefix + "device differs between sender and receiver");
  }
  return Status::Ok();
}

PlannedBucket::Entry MakeEntry(const CompleteName& c) {
  const TensorSpec& ref = c.spec(ReferenceRank(c));
  PlannedBucket::Entry e;
  e.name = c.name;
  e.submitted = c.submitted;
  switch (ref.collective) {
    case CollectiveType::kAllgather:
      e.num_elements = ref.RowElements();
      for (int r = 0; r < c.size; ++r) e.first_dims.push_back(c.spec(r).shape[0]);
      break;
    case CollectiveType::kAlltoall:
      e.num_elements = ref.RowElements();
      for (int r = 0; r < c.size; ++r) {
        const TensorSpec& s = c.spec(r);
        if (s.splits.empty()) {
          e.splits.emplace_back(c.size, s.shape[0] / c.size);
        } else {
          e.splits.push_back(s.splits);
        }
      }
      break;
    case CollectiveType::kBarrier:
      e.num_elements = 0;
      break;
    default:
      e.num_elements = ref.NumElements();
      break;
  }
  // FNV-1a over the dimensions in order, tagged by collective (never 0 when there are any).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h = (h ^ static_cast<uint64_t>((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    }
  };
  for (int64_t d : e.first_dims) mix(d);
  for (const std::vector<int64_t>& row : e.splits) {
    mix(-1);
    for (int64_t v : row) mix(v);
  }
  if (!e.first_dims.empty() || !e.splits.empty()) e.layout = h | 1;
  return e;
}

}  // namespace planner_internal
}  // namespace hora
