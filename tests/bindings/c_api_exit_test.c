/* Written in C against hora.h only: a process may exit with Hora still running. Two ranks
 * (two forked children) start Hora, run one allreduce and call exit(7) without
 * hora_shutdown; each must end with that status, not with a signal (an engine shut down by
 * static destructors once logged through a logger whose statics were already gone, and
 * crashed). The parent only watches; every wait is bounded (alarm()). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindings/c/hora.h"
#include "tests/bindings/c_test_util.h"

enum { kExitCode = 7 };

/* Starts Hora as `rank` of 2, checks one allreduce, and exits without hora_shutdown. */
static void run_rank(int rank, const char* address) {
  alarm(60);
  setenv("HORA_LOG_LEVEL", "debug", 1); /* the shutdown then logs, as a failed job's does */
  hora_config_t config = HORA_CONFIG_INITIALIZER;
  config.rank = rank;
  config.size = 2;
  config.coordinator_address = address;
  config.token = "c-api-exit-test-token";
  if (hora_init(&config) != HORA_OK) {
    fprintf(stderr, "rank %d: hora_init: %s\n", rank, hora_last_error());
    _exit(2);
  }
  int64_t shape[1] = {4};
  float x[4] = {1, 2, 3, 4};
  hora_tensor_t t = make_tensor(x, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0;
  if (hora_allreduce_async("x", &t, x, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) != HORA_OK ||
      hora_wait(h, 30000) != HORA_OK || x[3] != 8.0f) {
    fprintf(stderr, "rank %d: allreduce: %s\n", rank, hora_last_error());
    _exit(3);
  }
  exit(kExitCode); /* Hora still initialized: the atexit handler shuts it down */
}

int main(void) {
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", free_port());
  fflush(stdout);
  pid_t children[2];
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = fork();
    if (children[rank] == 0) run_rank(rank, address);
  }
  alarm(90);
  int failed = 0;
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    waitpid(children[rank], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != kExitCode) {
      ++failed;
      if (WIFSIGNALED(status)) {
        fprintf(stderr, "FAIL rank %d ended by signal %d, not exit(%d)\n", rank, WTERMSIG(status),
                kExitCode);
      } else {
        fprintf(stderr, "FAIL rank %d exited with %d, not %d\n", rank, WEXITSTATUS(status),
                kExitCode);
      }
    }
  }
  printf("%d passed, %d failed\n", 2 - failed, failed);
  return failed == 0 ? 0 : 1;
}
