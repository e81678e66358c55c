/* What the C API tests share: a CPU tensor's descriptor, a free port for a coordinator. */
#ifndef HORA_TESTS_BINDINGS_C_TEST_UTIL_H_
#define HORA_TESTS_BINDINGS_C_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bindings/c/hora.h"

/* A dense CPU tensor over `data` (`ndim` dimensions of `shape`). */
static inline hora_tensor_t make_tensor(void* data, const int64_t* shape, int ndim,
                                        hora_dtype_t dtype) {
  hora_tensor_t x;
  memset(&x, 0, sizeof(x));
  x.data = data;
  x.shape = shape;
  x.ndim = ndim;
  x.dtype = dtype;
  x.device = HORA_DEVICE_CPU;
  return x;
}

/* A free TCP port on 127.0.0.1 for a test's coordinator (the kernel picks it; -1 on error). */
static inline int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr*)&a, &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

#endif /* HORA_TESTS_BINDINGS_C_TEST_UTIL_H_ */
