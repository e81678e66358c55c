/* Written in C against hora.h only: a single-rank job and the documented error statuses. */
#define _POSIX_C_SOURCE 200809L /* c_test_util.h: sockets, close */
#include <stdio.h>
#include <string.h>

#include "bindings/c/hora.h"
#include "tests/bindings/c_test_util.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    ++checks;                                                                         \
    if (!(cond)) {                                                                    \
      ++failures;                                                                     \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              hora_last_error());                                                     \
    }                                                                                 \
  } while (0)

static void before_init(void) {
  int32_t r = -1;
  hora_handle_t h = 0;
  CHECK(hora_is_initialized() == 0);
  CHECK(hora_rank(&r) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(strstr(hora_last_error(), "not initialized") != NULL);
  CHECK(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(hora_shutdown() == HORA_OK);
  hora_config_t bad = HORA_CONFIG_INITIALIZER;
  bad.struct_size = 0;
  CHECK(hora_init(&bad) == HORA_ERR_INVALID_ARGUMENT);
}

static void collectives(void) {
  int64_t shape[1] = {4};
  float data[4] = {1, 2, 3, 4};
  float out[4] = {0};
  hora_tensor_t x = make_tensor(data, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0;
  int done = 0;
  CHECK(hora_allreduce_async("c.sum", &x, out, HORA_AVERAGE, 2.0, 1.0, HORA_GLOBAL_PROCESS_SET,
                             &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(hora_poll(h, &done) == HORA_OK && done == 1);
  CHECK(out[3] == 8.0f);
  CHECK(hora_release(h) == HORA_OK);

  CHECK(hora_allgather_async("c.gather", &x, HORA_GLOBAL_PROCESS_SET, &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  int64_t rshape[2] = {0, 0};
  int32_t nd = 0;
  CHECK(hora_result_shape(h, rshape, 2, &nd) == HORA_OK && nd == 1 && rshape[0] == 4);
  float gathered[4] = {0};
  CHECK(hora_result_copy(h, gathered, 3) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_result_copy(h, gathered, sizeof(gathered)) == HORA_OK && gathered[2] == 3.0f);
  CHECK(hora_release(h) == HORA_OK);

  /* Into the caller's buffer: written there when it fits, else held as above. */
  float into[4] = {0};
  CHECK(hora_allgather_into_async("c.into", &x, NULL, sizeof(into), HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allgather_into_async("c.into", &x, into, sizeof(into), HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(into[0] == 1.0f && into[3] == 4.0f); /* before any hora_result_copy */
  CHECK(hora_result_copy(h, into, sizeof(into)) == HORA_OK && into[2] == 3.0f);
  CHECK(hora_result_copy(h, gathered, 8) == HORA_ERR_INVALID_ARGUMENT);
  memset(gathered, 0, sizeof(gathered));
  CHECK(hora_result_copy(h, gathered, sizeof(gathered)) == HORA_OK && gathered[1] == 2.0f);
  CHECK(hora_release(h) == HORA_OK);
  float roomy[8] = {0};
  CHECK(hora_allgather_into_async("c.into", &x, roomy, sizeof(roomy), HORA_GLOBAL_PROCESS_SET,
                                  &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(roomy[0] == 0.0f); /* another size: held, not written */
  CHECK(hora_result_copy(h, gathered, sizeof(gathered)) == HORA_OK && gathered[3] == 4.0f);
  CHECK(hora_release(h) == HORA_OK);

  /* A reducescatter's part into the caller's buffer (this job has one rank: all 4 rows),
   * the postscale applied there; another size is held. */
  float part[4] = {0};
  CHECK(hora_reducescatter_into_async("c.rs", &x, NULL, sizeof(part), HORA_SUM, 1.0, 2.0,
                                      HORA_GLOBAL_PROCESS_SET, &h) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_reducescatter_into_async("c.rs", &x, part, sizeof(part), HORA_SUM, 1.0, 2.0,
                                      HORA_GLOBAL_PROCESS_SET, &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(part[0] == 2.0f && part[3] == 8.0f); /* before any hora_result_copy */
  CHECK(hora_result_copy(h, part, sizeof(part)) == HORA_OK && part[1] == 4.0f);
  CHECK(hora_release(h) == HORA_OK);
  memset(roomy, 0, sizeof(roomy));
  CHECK(hora_reducescatter_into_async("c.rs", &x, roomy, sizeof(roomy), HORA_SUM, 1.0, 2.0,
                                      HORA_GLOBAL_PROCESS_SET, &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(roomy[0] == 0.0f); /* another size: held, not written */
  CHECK(hora_result_copy(h, part, sizeof(part)) == HORA_OK && part[2] == 6.0f);
  CHECK(hora_release(h) == HORA_OK);

  /* An alltoall's received rows into the caller's buffer (one rank: its own 4 rows). */
  float rows[4] = {0};
  CHECK(hora_alltoall_into_async("c.a2a", &x, NULL, 0, NULL, sizeof(rows), HORA_GLOBAL_PROCESS_SET,
                                 &h) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_alltoall_into_async("c.a2a", &x, NULL, 0, rows, sizeof(rows), HORA_GLOBAL_PROCESS_SET,
                                 &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(rows[0] == 1.0f && rows[3] == 4.0f); /* before any hora_result_copy */
  CHECK(hora_result_copy(h, rows, sizeof(rows)) == HORA_OK);
  CHECK(hora_release(h) == HORA_OK);

  CHECK(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(hora_release(h) == HORA_OK);
}

static void bad_inputs(void) {
  int64_t shape[1] = {4};
  int64_t neg[1] = {-3};
  int64_t huge[3] = {INT64_MAX / 2, 1 << 20, 1 << 20};
  float data[4] = {0};
  hora_tensor_t x = make_tensor(data, shape, 1, HORA_FLOAT32);
  hora_handle_t h = 0;
  int done = 0;

  CHECK(hora_allreduce_async(NULL, &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("", &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("t", NULL, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("bad\xff\xfe", &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET,
                             &h) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "UTF-8") != NULL);
  /* Names of up to 4096 bytes (hora.h); one byte more is refused, naming the limit. */
  static char long_name[4098];
  memset(long_name, 'n', 4097);
  long_name[4097] = '\0';
  CHECK(hora_allreduce_async(long_name, &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "4097 bytes is longer than 4096") != NULL);
  long_name[4096] = '\0';
  CHECK(hora_allreduce_async(long_name, &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(hora_release(h) == HORA_OK);
  CHECK(hora_allreduce_async("caf\xc3\xa9", &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET,
                             &h) == HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  CHECK(hora_release(h) == HORA_OK);
  CHECK(hora_allreduce_async("t", &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, NULL) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("t", &x, NULL, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("t", &x, data, (hora_reduce_op_t)17, 1, 1, HORA_GLOBAL_PROCESS_SET,
                             &h) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "reduce op") != NULL);
  hora_tensor_t bad_dtype = make_tensor(data, shape, 1, (hora_dtype_t)42);
  CHECK(hora_allreduce_async("t", &bad_dtype, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "dtype") != NULL);
  hora_tensor_t negative = make_tensor(data, neg, 1, HORA_FLOAT32);
  CHECK(hora_allreduce_async("t", &negative, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "negative") != NULL);
  hora_tensor_t overflow = make_tensor(data, huge, 3, HORA_FLOAT32);
  CHECK(hora_allreduce_async("t", &overflow, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "overflow") != NULL);
  hora_tensor_t bad_ndim = make_tensor(data, shape, -1, HORA_FLOAT32);
  CHECK(hora_allreduce_async("t", &bad_ndim, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  hora_tensor_t null_shape = make_tensor(data, NULL, 1, HORA_FLOAT32);
  CHECK(hora_allreduce_async("t", &null_shape, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  hora_tensor_t null_data = make_tensor(NULL, shape, 1, HORA_FLOAT32);
  CHECK(hora_allreduce_async("t", &null_data, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("t", &x, data, HORA_SUM, 0.0 / 0.0, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_broadcast_async("t", &x, 1, HORA_GLOBAL_PROCESS_SET, &h) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(hora_last_error(), "root 1 is out of range") != NULL);
  CHECK(hora_broadcast_async("t", &x, -1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  int64_t splits[2] = {2, 2};
  CHECK(hora_alltoall_async("t", &x, splits, 2, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_alltoall_async("t", &x, NULL, 3, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  hora_tensor_t scalar = make_tensor(data, NULL, 0, HORA_FLOAT32);
  CHECK(hora_allgather_async("t", &scalar, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  hora_tensor_t cuda = make_tensor(data, shape, 1, HORA_FLOAT32);
  cuda.device = HORA_DEVICE_CUDA;
  CHECK(hora_allreduce_async("t", &cuda, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);
  hora_tensor_t bad_device = make_tensor(data, shape, 1, HORA_FLOAT32);
  bad_device.device = (hora_device_t)9;
  CHECK(hora_allreduce_async("t", &bad_device, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_ERR_INVALID_ARGUMENT);

  /* Handles: unknown, released, null outputs. */
  CHECK(hora_wait(987654, 1) == HORA_ERR_NOT_FOUND);
  CHECK(hora_poll(987654, &done) == HORA_ERR_NOT_FOUND);
  CHECK(hora_poll(1, NULL) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_allreduce_async("t", &x, data, HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h) ==
        HORA_OK);
  CHECK(hora_wait(h, 30) == HORA_OK);
  int32_t ndim = 0;
  CHECK(hora_result_shape(h, NULL, 4, &ndim) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_release(h) == HORA_OK);
  CHECK(hora_release(h) == HORA_ERR_NOT_FOUND);
  CHECK(hora_wait(h, 1) == HORA_ERR_NOT_FOUND);
  CHECK(hora_rank(NULL) == HORA_ERR_INVALID_ARGUMENT);
  CHECK(hora_init(NULL) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(strcmp(hora_error_string(HORA_ERR_MISMATCH), "MISMATCH") == 0);
  CHECK(strcmp(hora_error_string((hora_status_t)99), "UNKNOWN") == 0);
  const char* msg = NULL;
  CHECK(hora_async_error(&msg) == HORA_OK);
}

int main(void) {
  before_init();
  hora_config_t config = HORA_CONFIG_INITIALIZER;
  config.rank = 0;
  config.size = 1;
  CHECK(hora_init(&config) == HORA_OK);
  int32_t rank = -1, size = -1, local = -1;
  CHECK(hora_rank(&rank) == HORA_OK && rank == 0);
  CHECK(hora_size(&size) == HORA_OK && size == 1);
  CHECK(hora_local_rank(&local) == HORA_OK && local == 0);
  collectives();
  bad_inputs();
  CHECK(hora_shutdown() == HORA_OK);
  hora_handle_t h = 0;
  CHECK(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h) == HORA_ERR_FAILED_PRECONDITION);
  CHECK(strstr(hora_last_error(), "shut down") != NULL);
  CHECK(hora_shutdown() == HORA_OK);
  /* init again after shutdown works */
  CHECK(hora_init(&config) == HORA_OK);
  CHECK(hora_shutdown() == HORA_OK);
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
