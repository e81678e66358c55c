// A real job for the timeline test (tests/timeline/test_timeline_job.py runs it under
// horarun with --timeline-filename): steps of every tensor kind (a fused group of
// allreduces, a small inline one, broadcast, allgather, reducescatter, alltoall, a barrier,
// a send/recv ring), with one rank sleeping before its submissions so that the others wait
// for it; then the timeline is stopped, one step runs untraced, and a second timeline
// (argv[3]) records one more step. Uses only the public C API.
//
//   timeline_job LATE_RANK DELAY_MS SECOND_TIMELINE
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/job_util.h"

using namespace jobtest;

namespace {

int g_size = 1;

void Wait(hora_handle_t h, const char* what) {
  Must(hora_wait(h, 60), what);
  Must(hora_release(h), "release");
}

// One step: every kind of operation once, names the same in every step.
void Step(const std::string& tag, int late, int delay_ms) {
  if (g_rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  std::vector<hora_handle_t> handles;
  // Shapes live as long as the tensors that point at them (hora_tensor_t holds a pointer).
  std::vector<std::vector<float>> grads(4);
  std::vector<std::vector<int64_t>> shapes(4);
  for (int i = 0; i < 4; ++i) {
    grads[i].assign(20000 + 100 * i, 1.0f);  // data plane, fused
    shapes[i] = {static_cast<int64_t>(grads[i].size())};
    hora_tensor_t t = Tensor(grads[i].data(), shapes[i], HORA_FLOAT32);
    hora_handle_t h;
    Must(hora_allreduce_async((tag + "grad." + std::to_string(i)).c_str(), &t, grads[i].data(),
                              HORA_SUM, 1.0, 1.0, HORA_GLOBAL_PROCESS_SET, &h),
         "allreduce");
    handles.push_back(h);
  }
  float loss = 1.0f;
  const std::vector<int64_t> scalar, pshape = {3000}, rshape = {2, 8}, rsshape = {g_size * 4, 4},
                                     ashape = {g_size * 2, 2}, vshape = {64};
  hora_tensor_t lt = Tensor(&loss, scalar, HORA_FLOAT32);
  hora_handle_t h;
  Must(hora_allreduce_async((tag + "loss").c_str(), &lt, &loss, HORA_AVERAGE, 1.0, 1.0,
                            HORA_GLOBAL_PROCESS_SET, &h),
       "allreduce loss");
  handles.push_back(h);
  std::vector<float> params(3000, static_cast<float>(g_rank));
  hora_tensor_t pt = Tensor(params.data(), pshape, HORA_FLOAT32);
  Must(hora_broadcast_async((tag + "params").c_str(), &pt, 0, HORA_GLOBAL_PROCESS_SET, &h),
       "broadcast");
  handles.push_back(h);
  std::vector<float> rows(2 * 8, 1.0f);
  hora_tensor_t rt = Tensor(rows.data(), rshape, HORA_FLOAT32);
  Must(hora_allgather_async((tag + "gather").c_str(), &rt, HORA_GLOBAL_PROCESS_SET, &h),
       "allgather");
  handles.push_back(h);
  std::vector<float> rs(static_cast<size_t>(g_size) * 16, 1.0f);
  hora_tensor_t rst = Tensor(rs.data(), rsshape, HORA_FLOAT32);
  Must(hora_reducescatter_async((tag + "scatter").c_str(), &rst, HORA_SUM, 1.0, 1.0,
                                HORA_GLOBAL_PROCESS_SET, &h),
       "reducescatter");
  handles.push_back(h);
  std::vector<float> a2a(static_cast<size_t>(g_size) * 4, 1.0f);
  hora_tensor_t at = Tensor(a2a.data(), ashape, HORA_FLOAT32);
  Must(
      hora_alltoall_async((tag + "alltoall").c_str(), &at, nullptr, 0, HORA_GLOBAL_PROCESS_SET, &h),
      "alltoall");
  handles.push_back(h);
  std::vector<float> out(64, static_cast<float>(g_rank)), in(64, -1.0f);
  if (g_size > 1) {
    hora_tensor_t ot = Tensor(out.data(), vshape, HORA_FLOAT32);
    hora_tensor_t it = Tensor(in.data(), vshape, HORA_FLOAT32);
    Must(hora_send_async(&ot, (g_rank + 1) % g_size, 0, HORA_GLOBAL_PROCESS_SET, &h), "send");
    handles.push_back(h);
    Must(hora_recv_async(&it, (g_rank + g_size - 1) % g_size, 0, HORA_GLOBAL_PROCESS_SET, &h),
         "recv");
    handles.push_back(h);
  }
  for (hora_handle_t x : handles) Wait(x, "step");
  JOB_CHECK(grads[0][0] == static_cast<float>(g_size), "grad.0 = %f", grads[0][0]);
  JOB_CHECK(params[0] == 0.0f, "broadcast got %f", params[0]);
  Must(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h), "barrier");
  Wait(h, "barrier");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: timeline_job LATE_RANK DELAY_MS SECOND_TIMELINE\n");
    return 2;
  }
  const int late = std::atoi(argv[1]);
  const int delay_ms = std::atoi(argv[2]);
  Must(hora_init(nullptr), "init");
  int32_t rank = 0, size = 0;
  Must(hora_rank(&rank), "rank");
  Must(hora_size(&size), "size");
  g_rank = rank;
  g_size = size;
  // HORA_TIMELINE (from --timeline-filename) started one at init: a second start is refused.
  JOB_CHECK(hora_start_timeline(argv[3], 0) == HORA_ERR_FAILED_PRECONDITION, "start while on: %s",
            hora_last_error());
  for (int step = 0; step < 6; ++step) Step("", late, delay_ms);
  Must(hora_stop_timeline(), "stop_timeline");
  JOB_CHECK(hora_stop_timeline() == HORA_OK, "second stop");
  Step("untraced.", late, 0);
  Must(hora_start_timeline(argv[3], 1), "start_timeline");  // with CYCLE_START marks
  Step("second.", -1, 0);
  Must(hora_stop_timeline(), "stop_timeline");
  Must(hora_shutdown(), "shutdown");
  std::printf("rank %d: %d checks, %d failures\n", rank, g_checks.load(), g_failures.load());
  return g_failures.load() == 0 ? 0 : 1;
}
