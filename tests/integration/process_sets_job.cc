// A real job under horarun for process sets and point-to-point, through hora.h only:
//   - sets added and removed dynamically 100 times, each used once, with no leak of
//     threads or file descriptors (the job counts /proc/self/fd and /proc/self/task);
//   - a set created differently on different ranks fails on every rank naming the ranks;
//     a non-member submitting to a set gets INVALID_ARGUMENT naming the set;
//   - a ring of messages through every rank for every dtype, 0 and 64 MiB messages, tags
//     out of order, on the global set and on a subset.
#include <dirent.h>

#include <string>
#include <vector>

#include "tests/integration/job_util.h"

using namespace jobtest;

namespace {

int g_size = 1;
const hora_dtype_t kDtypes[] = {HORA_UINT8,   HORA_INT8,    HORA_INT16,   HORA_UINT16,
                                HORA_INT32,   HORA_INT64,   HORA_FLOAT16, HORA_BFLOAT16,
                                HORA_FLOAT32, HORA_FLOAT64, HORA_BOOL};

int CountEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

void WaitOk(hora_handle_t h, const char* what) {
  Must(hora_wait(h, 120), what);
  hora_release(h);
}

void TestDynamicSets() {
  // Warm up once (gRPC and Gloo start threads lazily), then measure 100 add/use/remove cycles.
  auto cycle = [](int i) {
    std::vector<int32_t> ranks;
    for (int r = 0; r < g_size; ++r) {
      if (g_size == 1 || r % 2 == i % 2 || r == 0) ranks.push_back(r);
    }
    if (static_cast<int>(ranks.size()) == g_size && g_size > 1) ranks.pop_back();
    int32_t id = -1;
    hora_status_t s = hora_process_set_add(ranks.data(), static_cast<int32_t>(ranks.size()),
                                           i % 3 == 2 ? "loopback" : nullptr, &id);
    if (g_size == 1) {  // the only possible set is the global one
      JOB_CHECK(s == HORA_ERR_ALREADY_EXISTS, "size 1 add: %s", hora_error_string(s));
      return;
    }
    Must(s, "process_set_add");
    int included = 0;
    Must(hora_process_set_included(id, &included), "included");
    if (included) {
      float v = 1.0f;
      int64_t shape[1] = {1};
      hora_tensor_t t = {&v, shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
      hora_handle_t h = 0;
      Must(hora_allreduce_async("dyn", &t, &v, HORA_SUM, 1, 1, id, &h), "dyn allreduce");
      WaitOk(h, "dyn allreduce");
      JOB_CHECK(v == static_cast<float>(ranks.size()), "cycle %d: sum %g of %zu ranks", i, v,
                ranks.size());
    }
    Must(hora_process_set_remove(id), "process_set_remove");
  };
  for (int i = 0; i < 3; ++i) cycle(i);
  const int fds = CountEntries("/proc/self/fd"), threads = CountEntries("/proc/self/task");
  for (int i = 0; i < 100; ++i) cycle(i);
  int32_t ids[8], n = 0;
  Must(hora_process_set_ids(ids, 8, &n), "process_set_ids");
  JOB_CHECK(n == 1 && ids[0] == 0, "%d sets left after removing them all", n);
  const int fds_after = CountEntries("/proc/self/fd"),
            threads_after = CountEntries("/proc/self/task");
  std::printf("rank %d: 100 set cycles: fds %d -> %d, threads %d -> %d\n", g_rank, fds, fds_after,
              threads, threads_after);
  // gRPC's pollers may vary by a few; a leak grows with the 100 cycles.
  JOB_CHECK(fds_after <= fds + 4, "file descriptors grew from %d to %d", fds, fds_after);
  JOB_CHECK(threads_after <= threads + 3, "threads grew from %d to %d", threads, threads_after);
}

void TestBadSets() {
  if (g_size < 2) return;
  // Rank 1 asks for another set than the others: everyone fails, naming who asked what.
  std::vector<int32_t> ranks = g_rank == 1 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{1};
  int32_t id = -1;
  hora_status_t s =
      hora_process_set_add(ranks.data(), static_cast<int32_t>(ranks.size()), nullptr, &id);
  std::string msg = hora_last_error();
  JOB_CHECK(s == HORA_ERR_INVALID_ARGUMENT &&
                msg.find("differs across ranks") != std::string::npos &&
                msg.find("[0,1] on rank 1") != std::string::npos,
            "set created differently: %s: %s", hora_error_string(s), msg.c_str());
  // A non-member submitting to a set.
  std::vector<int32_t> one = {0};
  Must(hora_process_set_add(one.data(), 1, nullptr, &id), "add [0]");
  float v = 1.0f;
  int64_t shape[1] = {1};
  hora_tensor_t t = {&v, shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
  hora_handle_t h = 0;
  s = hora_allreduce_async("x", &t, &v, HORA_SUM, 1, 1, id, &h);
  if (g_rank == 0) {
    Must(s, "member allreduce");
    WaitOk(h, "member allreduce");
  } else {
    msg = hora_last_error();
    JOB_CHECK(s == HORA_ERR_INVALID_ARGUMENT && msg.find("not a member of process set " +
                                                         std::to_string(id)) != std::string::npos,
              "non-member: %s: %s", hora_error_string(s), msg.c_str());
  }
  Must(hora_process_set_remove(id), "remove [0]");
}

// The values rank `me` sends as its first and second message: small integers, exact in every
// dtype, 0/1 for bool.
double First(int me, int64_t i, hora_dtype_t t) {
  return t == HORA_BOOL ? (me + i) % 2 : (me * 7 + i) % 5 + i % 3;
}
double Second(int me, int64_t i, hora_dtype_t t) {
  return t == HORA_BOOL ? (me + i + 1) % 2 : (me * 3 + i) % 7;
}

// rank r sends to r+1 and receives from r-1 (ranks of `set`), every dtype, tags 2 then 1 on
// the receiving side, 1 then 2 on the sending side.
void Ring(int32_t set, int me, int n, int64_t count, const char* what) {
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (hora_dtype_t t : kDtypes) {
    const size_t bytes = static_cast<size_t>(count) * DtypeSize(t);
    std::vector<char> out1(bytes), out2(bytes), in1(bytes, 0x55), in2(bytes, 0x55);
    for (int64_t i = 0; i < count && i < 4096; ++i) {
      Set(&out1, t, i, First(me, i, t));
      Set(&out2, t, i, Second(me, i, t));
    }
    int64_t shape[1] = {count};
    hora_tensor_t o1 = Tensor(out1.data(), {count}, t), o2 = Tensor(out2.data(), {count}, t);
    hora_tensor_t i1 = Tensor(in1.data(), {count}, t), i2 = Tensor(in2.data(), {count}, t);
    o1.shape = o2.shape = i1.shape = i2.shape = shape;
    hora_handle_t r2, s1, r1, s2;
    Must(hora_recv_async(&i2, prev, 2, set, &r2), "recv tag 2");
    Must(hora_send_async(&o1, next, 1, set, &s1), "send tag 1");
    Must(hora_recv_async(&i1, prev, 1, set, &r1), "recv tag 1");
    Must(hora_send_async(&o2, next, 2, set, &s2), "send tag 2");
    WaitOk(r2, "recv 2");
    WaitOk(s1, "send 1");
    WaitOk(r1, "recv 1");
    WaitOk(s2, "send 2");
    bool ok = true;
    for (int64_t i = 0; i < count && i < 4096 && ok; ++i) {
      ok = Get(in1, t, i) == First(prev, i, t) && Get(in2, t, i) == Second(prev, i, t);
    }
    if (ok && count > 4096) ok = in1.back() == out1.back() && in2[bytes / 2] == out2[bytes / 2];
    JOB_CHECK(ok, "%s ring of %lld %s from rank %d", what, (long long)count, DtypeName(t), prev);
  }
}

void TestSendRecv() {
  if (g_size < 2) return;
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(1001)})
    Ring(0, g_rank, g_size, count, "global");
  // 64 MiB of float32 once.
  const int64_t big = int64_t{16} << 20;
  std::vector<float> out(big), in(big, -1.0f);
  for (int64_t i = 0; i < big; i += 4099) out[i] = static_cast<float>(g_rank * 1000 + i % 997);
  out[big - 1] = static_cast<float>(g_rank);
  hora_tensor_t o = Tensor(out.data(), {big}, HORA_FLOAT32),
                i = Tensor(in.data(), {big}, HORA_FLOAT32);
  int64_t shape[1] = {big};
  o.shape = i.shape = shape;
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  hora_handle_t r, s;
  Must(hora_recv_async(&i, prev, 7, 0, &r), "recv 64 MiB");
  Must(hora_send_async(&o, next, 7, 0, &s), "send 64 MiB");
  WaitOk(r, "recv 64 MiB");
  WaitOk(s, "send 64 MiB");
  bool ok = in[big - 1] == static_cast<float>(prev);
  for (int64_t k = 0; k < big && ok; k += 4099)
    ok = in[k] == static_cast<float>(prev * 1000 + k % 997);
  JOB_CHECK(ok, "64 MiB message from rank %d", prev);
  // On a subset, ranks 1.. in their own ring (set ranks, not global ranks).
  if (g_size >= 3) {
    std::vector<int32_t> rest;
    for (int k = 1; k < g_size; ++k) rest.push_back(k);
    int32_t id = -1;
    Must(hora_process_set_add(rest.data(), static_cast<int32_t>(rest.size()), nullptr, &id),
         "add rest");
    if (g_rank >= 1) Ring(id, g_rank - 1, g_size - 1, 513, "subset");
    Must(hora_process_set_remove(id), "remove rest");
  }
}

}  // namespace

int main() {
  Must(hora_init(nullptr), "hora_init");
  Must(hora_rank(&g_rank), "rank");
  int32_t size = 0;
  Must(hora_size(&size), "size");
  g_size = size;
  TestBadSets();
  TestSendRecv();
  TestDynamicSets();
  hora_handle_t h = 0;
  Must(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h), "barrier");
  WaitOk(h, "barrier");
  Must(hora_shutdown(), "shutdown");
  std::printf("rank %d of %d: %d checks, %d failed\n", g_rank, g_size, g_checks.load(),
              g_failures.load());
  return g_failures == 0 ? 0 : 1;
}
