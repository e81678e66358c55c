/* Written in C against hora.h only: what needs an operation that stays pending, so two ranks
 * (this process forks: the parent is rank 0, the child rank 1; pipes order their steps).
 *   - a name already in flight (HORA_ERR_ALREADY_EXISTS), and reusable once done;
 *   - a released pending handle is gone (HORA_ERR_NOT_FOUND), its operation still completes;
 *   - shutdown with operations pending fails them with HORA_ERR_ABORTED, their handles stay
 *     valid until released;
 *   - calls after shutdown fail with HORA_ERR_FAILED_PRECONDITION.
 * Every blocking step is bounded (hora_wait timeouts, alarm()). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindings/c/hora.h"
#include "tests/bindings/c_test_util.h"

static int failures = 0;
static int checks = 0;
static int my_rank = -1;

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    ++checks;                                                                                   \
    if (!(cond)) {                                                                              \
      ++failures;                                                                               \
      fprintf(stderr, "FAIL rank %d %s:%d: %s (last error: %s)\n", my_rank, __FILE__, __LINE__, \
              #cond, hora_last_error());                                                        \
    }                                                                                           \
  } while (0)

static int to_peer = -1, from_peer = -1;

static void signal_peer(char step) { CHECK(write(to_peer, &step, 1) == 1); }

static void await_peer(char step) {
  char got = 0;
  CHECK(read(from_peer, &got, 1) == 1 && got == step);
}

static void name_in_flight(void) {
  int64_t shape[1] = {4};
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
  hora_tensor_t ta = make_tensor(a, shape, 1, HORA_FLOAT32),
                tb = make_tensor(b, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0, h2 = 0;
  int done = -1;
  if (my_rank == 1) {
    CHECK(hora_allreduce_async("dup", &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
          HORA_OK);
    CHECK(hora_poll(h, &done) == HORA_OK && done == 0); /* rank 0 has not submitted it */
    CHECK(hora_allreduce_async("dup", &tb, b, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h2) ==
          HORA_ERR_ALREADY_EXISTS);
    CHECK(strstr(hora_last_error(), "dup") != NULL);
    CHECK(hora_wait(h, 0.2) == HORA_ERR_DEADLINE_EXCEEDED); /* still pending, still valid */
    signal_peer('A');
  } else {
    await_peer('A');
    CHECK(hora_allreduce_async("dup", &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
          HORA_OK);
  }
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(a[0] == 2.0f && a[3] == 8.0f);
  CHECK(hora_release(h) == HORA_OK);
  /* Done: the name may be used again. */
  CHECK(hora_allreduce_async("dup", &tb, b, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK && b[1] == 4.0f);
  CHECK(hora_release(h) == HORA_OK);
}

static void released_while_pending(void) {
  int64_t shape[1] = {4};
  /* Static: rank 1 releases its handle, so it cannot learn when its copy is written, and
   * rank 0's completion does not mean rank 1's plan has been delivered yet; the buffer must
   * outlive this function (ThreadSanitizer caught the write into the next call's stack). */
  static float a[4] = {1, 1, 1, 1};
  hora_tensor_t ta = make_tensor(a, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0;
  int done = 0;
  if (my_rank == 1) {
    CHECK(hora_allreduce_async("released", &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
          HORA_OK);
    CHECK(hora_release(h) == HORA_OK);
    CHECK(hora_wait(h, 1) == HORA_ERR_NOT_FOUND);
    CHECK(hora_poll(h, &done) == HORA_ERR_NOT_FOUND);
    CHECK(hora_release(h) == HORA_ERR_NOT_FOUND);
    signal_peer('R');
    await_peer('r'); /* rank 0's copy completed; ours follows when our plan arrives */
  } else {
    await_peer('R');
    CHECK(hora_allreduce_async("released", &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
          HORA_OK);
    CHECK(hora_wait(h, 30) == HORA_OK && a[0] == 2.0f);
    CHECK(hora_release(h) == HORA_OK);
    signal_peer('r');
  }
  const char* msg = NULL;
  CHECK(hora_async_error(&msg) == HORA_OK);
}

static void shutdown_with_pending(void) {
  int64_t shape[1] = {4};
  float a[4] = {1, 1, 1, 1}, b[4] = {2, 2, 2, 2};
  hora_tensor_t ta = make_tensor(a, shape, 1, HORA_FLOAT32),
                tb = make_tensor(b, shape, 1, HORA_FLOAT32);
  hora_handle_t pa = 0, pb = 0, hb = 0;
  int done = 0;
  /* Names only this rank submits: they stay pending until shutdown. */
  const char* na = my_rank == 0 ? "pending.0a" : "pending.1a";
  const char* nb = my_rank == 0 ? "pending.0b" : "pending.1b";
  CHECK(hora_allreduce_async(na, &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &pa) == HORA_OK);
  CHECK(hora_allgather_async(nb, &tb, HORA_GLOBAL_PROCESS_SET, &pb) == HORA_OK);
  CHECK(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &hb) ==
        HORA_OK); /* the n-th barrier matches: completes */
  CHECK(hora_wait(hb, 30) == HORA_OK);
  CHECK(hora_release(hb) == HORA_OK);
  CHECK(hora_poll(pa, &done) == HORA_OK && done == 0);
  CHECK(hora_shutdown() == HORA_OK);
  CHECK(hora_is_initialized() == 0);
  CHECK(hora_wait(pa, 5) == HORA_ERR_ABORTED);
  CHECK(strstr(hora_last_error(), "shut down") != NULL);
  CHECK(hora_poll(pb, &done) == HORA_OK && done == 1);
  CHECK(hora_wait(pb, 5) == HORA_ERR_ABORTED);
  int64_t rshape[2];
  int32_t nd = 0;
  CHECK(hora_result_shape(pb, rshape, 2, &nd) != HORA_OK); /* no result: it failed */
  CHECK(hora_release(pa) == HORA_OK);
  CHECK(hora_release(pb) == HORA_OK);
  CHECK(hora_release(pa) == HORA_ERR_NOT_FOUND);
}

static void after_shutdown(void) {
  int64_t shape[1] = {4};
  float a[4] = {0};
  hora_tensor_t ta = make_tensor(a, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0;
  int32_t r = -1;
  CHECK(hora_allreduce_async("late", &ta, a, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_FAILED_PRECONDITION);
  CHECK(strstr(hora_last_error(), "shut down") != NULL);
  CHECK(hora_broadcast_async("late", &ta, 0, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_join_async(HORA_GLOBAL_PROCESS_SET, &h) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_rank(&r) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_size(&r) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_wait(424242, 1) == HORA_ERR_NOT_FOUND ||
        hora_wait(424242, 1) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_shutdown() == HORA_OK); /* idempotent */
}

static int run_rank(int rank, const char* address) {
  my_rank = rank;
  alarm(120); /* never hang: SIGALRM ends the process, the parent sees it */
  hora_config_t config = HORA_CONFIG_INITIALIZER;
  config.rank = rank;
  config.size = 2;
  config.coordinator_address = address;
  config.token = "c-api-pending-test-token";
  CHECK(hora_init(&config) == HORA_OK);
  if (failures) return 1;
  name_in_flight();
  released_while_pending();
  shutdown_with_pending();
  after_shutdown();
  printf("rank %d: %d checks, %d failed\n", rank, checks, failures);
  fflush(stdout);
  return failures == 0 ? 0 : 1;
}

int main(void) {
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", free_port());
  int p01[2], p10[2];
  if (pipe(p01) != 0 || pipe(p10) != 0) return 2;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    to_peer = p10[1];
    from_peer = p01[0];
    _exit(run_rank(1, address));
  }
  to_peer = p01[1];
  from_peer = p10[0];
  int rc = run_rank(0, address);
  int status = 0;
  waitpid(child, &status, 0);
  int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!child_ok) fprintf(stderr, "rank 1 failed (wait status %d)\n", status);
  /* Counts: rank 0's checks, plus rank 1 as one check. */
  int failed = failures + (child_ok ? 0 : 1);
  printf("%d passed, %d failed\n", checks + 1 - failed, failed);
  return rc == 0 && child_ok ? 0 : 1;
}
