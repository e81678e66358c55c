// A real job, one process per rank under horarun: every collective x every dtype x every op
// against a reference computed here, with 0, 1, odd and larger element counts; 1,000 mixed
// tensors enqueued at once in a different random order on each rank; and mismatches that must
// fail on every rank while the job goes on. The same battery then runs on two overlapping
// process sets at once, one thread per set, the second set on the loopback backend (so one
// job uses two backends), with the same tensor names in both sets. Uses only the public C API.
#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/job_util.h"

using namespace jobtest;

namespace {

const hora_dtype_t kDtypes[] = {HORA_UINT8,   HORA_INT8,    HORA_INT16,   HORA_UINT16,
                                HORA_INT32,   HORA_INT64,   HORA_FLOAT16, HORA_BFLOAT16,
                                HORA_FLOAT32, HORA_FLOAT64, HORA_BOOL};
const hora_reduce_op_t kOps[] = {HORA_SUM, HORA_AVERAGE, HORA_MIN, HORA_MAX, HORA_PRODUCT};
const int64_t kCounts[] = {0, 1, 7, 1001, 65537};
// The group the battery runs in: thread-local, so two threads run it on two sets at once.
thread_local int g_size = 1;
thread_local int32_t g_set = HORA_GLOBAL_PROCESS_SET;

bool IsSigned(hora_dtype_t t) { return t != HORA_UINT8 && t != HORA_UINT16 && t != HORA_BOOL; }
bool IsFloat(hora_dtype_t t) {
  return t == HORA_FLOAT16 || t == HORA_BFLOAT16 || t == HORA_FLOAT32 || t == HORA_FLOAT64;
}

double Value(int rank, int64_t i, hora_dtype_t t, hora_reduce_op_t op) {
  if (t == HORA_BOOL) return (rank + i) % 2;
  if (op == HORA_PRODUCT) return (rank + i) % 3 == 0 ? 2 : 1;
  return static_cast<double>((rank * 7 + i * 3) % 11) - (IsSigned(t) ? 3 : 0);
}

double Reduce(int64_t i, hora_dtype_t t, hora_reduce_op_t op) {
  double acc = Value(0, i, t, op);
  for (int r = 1; r < g_size; ++r) {
    double v = Value(r, i, t, op);
    if (t == HORA_BOOL) {
      acc = (op == HORA_MIN || op == HORA_PRODUCT) ? (acc && v) : (acc || v);
    } else if (op == HORA_SUM || op == HORA_AVERAGE) {
      acc += v;
    } else if (op == HORA_MIN) {
      acc = std::min(acc, v);
    } else if (op == HORA_MAX) {
      acc = std::max(acc, v);
    } else {
      acc *= v;
    }
  }
  if (op == HORA_AVERAGE && t != HORA_BOOL)
    acc = IsFloat(t) ? acc / g_size : std::trunc(acc / g_size);
  return acc;
}

std::vector<char> Fill(int rank, int64_t n, hora_dtype_t t, hora_reduce_op_t op) {
  std::vector<char> buf(static_cast<size_t>(n) * DtypeSize(t));
  for (int64_t i = 0; i < n; ++i) Set(&buf, t, i, Value(rank, i, t, op));
  return buf;
}

void TestAllreduce(int rank) {
  for (hora_dtype_t t : kDtypes) {
    for (hora_reduce_op_t op : kOps) {
      for (int64_t n : kCounts) {
        std::vector<int64_t> shape = {n};
        std::vector<char> in = Fill(rank, n, t, op);
        std::vector<char> out(in.size());
        bool in_place = (n % 2) == 1;
        hora_tensor_t x = Tensor(in.data(), shape, t);
        std::string name =
            std::string("ar.") + DtypeName(t) + "." + std::to_string(op) + "." + std::to_string(n);
        hora_handle_t h = 0;
        Must(hora_allreduce_async(name.c_str(), &x, in_place ? in.data() : out.data(), op, 1.0, 1.0,
                                  g_set, &h),
             "allreduce");
        Must(hora_wait(h, 60), name.c_str());
        Must(hora_release(h), "release");
        const std::vector<char>& got = in_place ? in : out;
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 3; ++i) {
          double want = Reduce(i, t, op);
          if (!Close(Get(got, t, i), want, t)) {
            ++bad;
            JOB_CHECK(false, "%s[%lld] = %g, want %g", name.c_str(), (long long)i, Get(got, t, i),
                      want);
          }
        }
        JOB_CHECK(bad == 0, "%s", name.c_str());
      }
    }
  }
  // Prescale and postscale on floats: sum * 0.5 * 3.
  std::vector<int64_t> shape = {5, 3};
  std::vector<char> in = Fill(rank, 15, HORA_FLOAT32, HORA_SUM);
  hora_tensor_t x = Tensor(in.data(), shape, HORA_FLOAT32);
  hora_handle_t h = 0;
  Must(hora_allreduce_async("ar.scaled", &x, in.data(), HORA_SUM, 0.5, 3.0, g_set, &h),
       "allreduce scaled");
  Must(hora_wait(h, 60), "ar.scaled");
  hora_release(h);
  for (int64_t i = 0; i < 15; ++i) {
    JOB_CHECK(
        Close(Get(in, HORA_FLOAT32, i), Reduce(i, HORA_FLOAT32, HORA_SUM) * 1.5, HORA_FLOAT32),
        "scaled[%lld]", (long long)i);
  }
}

void TestBroadcast(int rank) {
  for (hora_dtype_t t : kDtypes) {
    for (int root = 0; root < g_size; ++root) {
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(1001)}) {
        std::vector<int64_t> shape = {n};
        std::vector<char> buf = Fill(rank, n, t, HORA_SUM);
        hora_tensor_t x = Tensor(buf.data(), shape, t);
        std::string name = std::string("bc.") + DtypeName(t) + "." + std::to_string(root) + "." +
                           std::to_string(n);
        hora_handle_t h = 0;
        Must(hora_broadcast_async(name.c_str(), &x, root, g_set, &h), "broadcast");
        Must(hora_wait(h, 60), name.c_str());
        hora_release(h);
        bool ok = true;
        for (int64_t i = 0; i < n; ++i) ok = ok && Get(buf, t, i) == Value(root, i, t, HORA_SUM);
        JOB_CHECK(ok, "%s", name.c_str());
      }
    }
  }
}

void TestAllgather(int rank) {
  for (hora_dtype_t t : kDtypes) {
    // Rank r contributes (r % 3) rows of 3 columns: some ranks contribute nothing.
    const int64_t cols = 3;
    int64_t rows = rank % 3;
    std::vector<int64_t> shape = {rows, cols};
    std::vector<char> in(static_cast<size_t>(rows * cols) * DtypeSize(t));
    for (int64_t i = 0; i < rows * cols; ++i) Set(&in, t, i, Value(rank, i, t, HORA_SUM));
    hora_tensor_t x = Tensor(in.data(), shape, t);
    std::string name = std::string("ag.") + DtypeName(t);
    hora_handle_t h = 0;
    Must(hora_allgather_async(name.c_str(), &x, g_set, &h), "allgather");
    Must(hora_wait(h, 60), name.c_str());
    int64_t total = 0;
    for (int r = 0; r < g_size; ++r) total += r % 3;
    int64_t rshape[4];
    int32_t nd = 0;
    Must(hora_result_shape(h, rshape, 4, &nd), "result_shape");
    JOB_CHECK(nd == 2 && rshape[0] == total && rshape[1] == cols, "%s shape", name.c_str());
    std::vector<char> out(static_cast<size_t>(total * cols) * DtypeSize(t));
    Must(hora_result_copy(h, out.data(), out.size()), "result_copy");
    hora_release(h);
    size_t k = 0;
    bool ok = true;
    for (int r = 0; r < g_size; ++r) {
      for (int64_t i = 0; i < (r % 3) * cols; ++i)
        ok = ok && Get(out, t, k++) == Value(r, i, t, HORA_SUM);
    }
    JOB_CHECK(ok, "%s values", name.c_str());
  }
}

void TestReducescatter(int rank) {
  for (hora_dtype_t t : kDtypes) {
    for (hora_reduce_op_t op : kOps) {
      const int64_t rows = 2 * g_size + 1, cols = 2;  // uneven: the first rank gets one more row
      std::vector<int64_t> shape = {rows, cols};
      std::vector<char> in = Fill(rank, rows * cols, t, op);
      hora_tensor_t x = Tensor(in.data(), shape, t);
      std::string name = std::string("rs.") + DtypeName(t) + "." + std::to_string(op);
      hora_handle_t h = 0;
      Must(hora_reducescatter_async(name.c_str(), &x, op, 1.0, 1.0, g_set, &h), "reducescatter");
      Must(hora_wait(h, 60), name.c_str());
      int64_t my_rows = rows / g_size + (rank < rows % g_size ? 1 : 0);
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += rows / g_size + (r < rows % g_size ? 1 : 0);
      int64_t rshape[2];
      int32_t nd = 0;
      Must(hora_result_shape(h, rshape, 2, &nd), "result_shape");
      JOB_CHECK(nd == 2 && rshape[0] == my_rows, "%s rows %lld want %lld", name.c_str(),
                (long long)rshape[0], (long long)my_rows);
      std::vector<char> out(static_cast<size_t>(my_rows * cols) * DtypeSize(t));
      Must(hora_result_copy(h, out.data(), out.size()), "result_copy");
      hora_release(h);
      bool ok = true;
      for (int64_t i = 0; i < my_rows * cols; ++i)
        ok = ok && Close(Get(out, t, i), Reduce(first * cols + i, t, op), t);
      JOB_CHECK(ok, "%s values", name.c_str());
    }
  }
}

void TestAlltoall(int rank) {
  // Rank r sends (r + dst) % 3 rows to rank dst; row value encodes (sender, dst, row).
  const int64_t cols = 2;
  std::vector<int64_t> splits(g_size);
  int64_t rows = 0;
  for (int d = 0; d < g_size; ++d) rows += splits[d] = (rank + d) % 3;
  std::vector<int64_t> shape = {rows, cols};
  std::vector<char> in(static_cast<size_t>(rows * cols) * 4);
  int64_t k = 0;
  for (int d = 0; d < g_size; ++d) {
    for (int64_t j = 0; j < splits[d] * cols; ++j)
      Set(&in, HORA_INT32, k++, rank * 10000 + d * 100 + j);
  }
  hora_tensor_t x = Tensor(in.data(), shape, HORA_INT32);
  hora_handle_t h = 0;
  Must(hora_alltoall_async("a2a", &x, splits.data(), g_size, g_set, &h), "alltoall");
  Must(hora_wait(h, 60), "a2a");
  std::vector<int64_t> recv(g_size);
  Must(hora_result_splits(h, recv.data(), g_size), "result_splits");
  int64_t total = 0;
  for (int s = 0; s < g_size; ++s) {
    JOB_CHECK(recv[s] == (s + rank) % 3, "a2a recv split from %d", s);
    total += recv[s];
  }
  std::vector<char> out(static_cast<size_t>(total * cols) * 4);
  Must(hora_result_copy(h, out.data(), out.size()), "result_copy");
  hora_release(h);
  k = 0;
  bool ok = true;
  for (int s = 0; s < g_size; ++s) {
    for (int64_t j = 0; j < recv[s] * cols; ++j)
      ok = ok && Get(out, HORA_INT32, k++) == s * 10000 + rank * 100 + j;
  }
  JOB_CHECK(ok, "a2a values");
}

void TestManyMixed(int rank) {
  // 1,000 tensors of mixed sizes and dtypes, enqueued at once in a different order per rank.
  const int kN = 1000;
  std::vector<int> order(kN);
  for (int i = 0; i < kN; ++i) order[i] = i;
  std::mt19937 rng(1234 + rank * 7919);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<char>> bufs(kN);
  std::vector<std::vector<int64_t>> shapes(kN);
  std::vector<hora_handle_t> handles(kN);
  auto dtype_of = [](int i) { return kDtypes[i % 8]; };  // no bool: sums
  auto count_of = [](int i) { return static_cast<int64_t>((i * 37) % 513); };
  for (int i : order) {
    shapes[i] = {count_of(i)};
    bufs[i] = Fill(rank, count_of(i), dtype_of(i), HORA_SUM);
    hora_tensor_t x = Tensor(bufs[i].data(), shapes[i], dtype_of(i));
    std::string name = "mixed." + std::to_string(i);
    Must(hora_allreduce_async(name.c_str(), &x, bufs[i].data(), HORA_SUM, 1.0, 1.0, g_set,
                              &handles[i]),
         "mixed enqueue");
  }
  int bad = 0;
  for (int i = 0; i < kN; ++i) {
    Must(hora_wait(handles[i], 120), "mixed wait");
    hora_release(handles[i]);
    for (int64_t j = 0; j < count_of(i); ++j) {
      if (!Close(Get(bufs[i], dtype_of(i), j), Reduce(j, dtype_of(i), HORA_SUM), dtype_of(i))) {
        ++bad;
        break;
      }
    }
  }
  JOB_CHECK(bad == 0, "%d of 1000 mixed tensors wrong", bad);
}

// A signature that differs across ranks fails on every rank, naming the field; the job goes on.
void TestMismatch(int rank) {
  if (g_size < 2) return;
  struct Case {
    const char* name;
    const char* field;
  };
  for (Case c : {Case{"mm.shape", "shape"}, Case{"mm.dtype", "dtype"}, Case{"mm.root", "root"}}) {
    std::vector<float> buf(8, 1.0f);
    std::vector<int64_t> shape = {std::string(c.field) == "shape" && rank == 1 ? 5 : 4};
    hora_dtype_t t = std::string(c.field) == "dtype" && rank == 1 ? HORA_INT32 : HORA_FLOAT32;
    hora_tensor_t x = Tensor(buf.data(), shape, t);
    hora_handle_t h = 0;
    if (std::string(c.field) == "root") {
      Must(hora_broadcast_async(c.name, &x, rank == 1 ? 1 : 0, g_set, &h), "enqueue");
    } else {
      Must(hora_allreduce_async(c.name, &x, buf.data(), HORA_SUM, 1.0, 1.0, g_set, &h), "enqueue");
    }
    hora_status_t s = hora_wait(h, 30);
    std::string msg = hora_last_error();
    JOB_CHECK(s == HORA_ERR_MISMATCH, "%s: status %s (%s)", c.name, hora_error_string(s),
              msg.c_str());
    JOB_CHECK(msg.find(c.field) != std::string::npos && msg.find("rank") != std::string::npos &&
                  msg.find(c.name) != std::string::npos,
              "%s: message does not name the field, tensor and ranks: %s", c.name, msg.c_str());
    hora_release(h);
  }
  // Bad input on one rank only (alltoall splits that do not add up on rank 1): rank 1 hears it
  // at once, every other rank from the negotiation, naming rank 1; nobody is left waiting.
  {
    std::vector<int32_t> data(g_size * 2, 1);
    std::vector<int64_t> shape = {g_size * 2};
    std::vector<int64_t> splits(g_size, 2);
    if (rank == 1) splits[0] = 5;
    hora_tensor_t x = Tensor(data.data(), shape, HORA_INT32);
    hora_handle_t h = 0;
    hora_status_t s = hora_alltoall_async("mm.refused", &x, splits.data(), g_size, g_set, &h);
    std::string msg = hora_last_error();
    if (rank != 1) {
      Must(s, "enqueue");
      s = hora_wait(h, 30);
      msg = hora_last_error();
      hora_release(h);
    }
    JOB_CHECK(s == HORA_ERR_INVALID_ARGUMENT && msg.find("splits") != std::string::npos &&
                  (rank == 1 || msg.find("cannot run: rank ") != std::string::npos),
              "one-sided bad input: %s (%s)", hora_error_string(s), msg.c_str());
  }
  // The job goes on.
  std::vector<int64_t> shape = {3};
  std::vector<float> buf(3, 1.0f);
  hora_tensor_t x = Tensor(buf.data(), shape, HORA_FLOAT32);
  hora_handle_t h = 0;
  Must(hora_allreduce_async("after.mismatch", &x, buf.data(), HORA_SUM, 1.0, 1.0, g_set, &h),
       "enqueue");
  Must(hora_wait(h, 30), "after mismatch");
  hora_release(h);
  JOB_CHECK(buf[0] == g_size, "allreduce after mismatch");
}

void Battery(int rank) {
  TestAllreduce(rank);
  TestBroadcast(rank);
  TestAllgather(rank);
  TestReducescatter(rank);
  TestAlltoall(rank);
  TestManyMixed(rank);
  TestMismatch(rank);
}

// Runs the battery on `ranks` (global ranks) as process set `set` on a thread of its own.
std::thread BatteryOn(int32_t set, std::vector<int> ranks) {
  return std::thread([set, ranks] {
    int32_t r = -1;
    Must(hora_process_set_rank(set, &r), "process_set_rank");
    if (r < 0) return;
    g_set = set;
    g_size = static_cast<int>(ranks.size());
    Battery(r);
  });
}

// Two overlapping sets (they share rank 2 from 3 ranks on), the second on another backend,
// each running the battery on a thread of its own. (With one rank, every set is the global one.)
void SetBatteries(int size) {
  std::vector<int> a = size >= 3 ? std::vector<int>{0, 2} : std::vector<int>{0};
  std::vector<int> b = size >= 4   ? std::vector<int>{1, 2, 3}
                       : size == 3 ? std::vector<int>{1, 2}
                                   : std::vector<int>{size - 1};
  int32_t set_a = -1, set_b = -1;
  Must(hora_process_set_add(a.data(), static_cast<int32_t>(a.size()), "gloo", &set_a), "add a");
  Must(hora_process_set_add(b.data(), static_cast<int32_t>(b.size()), "loopback", &set_b), "add b");
  JOB_CHECK(set_a > 0 && set_b > set_a, "set ids %d, %d", set_a, set_b);
  std::thread ta = BatteryOn(set_a, a), tb = BatteryOn(set_b, b);
  ta.join();
  tb.join();
  Must(hora_process_set_remove(set_a), "remove a");
  Must(hora_process_set_remove(set_b), "remove b");
}

}  // namespace

int main() {
  Must(hora_init(nullptr), "hora_init");
  Must(hora_rank(&g_rank), "rank");
  int32_t size = 0;
  Must(hora_size(&size), "size");
  g_size = size;
  Battery(g_rank);
  if (size >= 2) SetBatteries(size);
  hora_handle_t h = 0;
  Must(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h), "barrier");
  Must(hora_wait(h, 60), "barrier wait");
  hora_release(h);
  Must(hora_shutdown(), "shutdown");
  std::printf("rank %d of %d: %d checks, %d failed\n", g_rank, g_size, g_checks.load(),
              g_failures.load());
  return g_failures == 0 ? 0 : 1;
}
