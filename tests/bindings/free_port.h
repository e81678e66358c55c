/* A free TCP port on 127.0.0.1 for a test's coordinator (the kernel picks it; -1 on error). */
#ifndef HORA_TESTS_BINDINGS_FREE_PORT_H_
#define HORA_TESTS_BINDINGS_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

#endif /* HORA_TESTS_BINDINGS_FREE_PORT_H_ */
