#include "collectives/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

namespace hora {
namespace {

// The local IP address a packet to `host` would leave from (no packet is sent).
std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

}  // namespace

StatusOr<std::string> BindAddress(const BackendConfig& config) {
  if (!config.bind_address.empty()) return config.bind_address;
  std::string address =
      config.SingleHost() ? "127.0.0.1" : LocalAddressToward(config.coordinator_host);
  if (address.empty()) {
    return Unavailable("cannot find a local address toward the coordinator " +
                       config.coordinator_host + "; set HORA_GLOO_IFACE to this host's address");
  }
  return address;
}

}  // namespace hora
