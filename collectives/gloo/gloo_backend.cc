// Registers the Gloo backend: CPU tensors, any set, any number of hosts. It is the default
// CPU backend ("auto") until a faster one that can serve the set is built.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/registry.h"

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

StatusOr<std::unique_ptr<Communicator>> CreateForSet(const BackendConfig& c) {
  GlooConfig gc;
  gc.rank = c.rank;
  gc.size = c.size();
  gc.store = c.store;
  gc.key_prefix = c.key_prefix;
  gc.timeout = c.timeout;
  gc.bind_address = c.bind_address;
  if (gc.bind_address.empty()) {
    gc.bind_address = c.SingleHost() ? "127.0.0.1" : LocalAddressToward(c.coordinator_host);
  }
  if (gc.bind_address.empty()) {
    return Unavailable("cannot find a local address toward the coordinator " + c.coordinator_host +
                       "; set HORA_GLOO_IFACE to this host's address");
  }
  return CreateGlooCommunicator(gc);
}

BackendInfo GlooInfo() {
  BackendInfo info;
  info.name = "gloo";
  info.device = Device::kCpu;
  info.auto_priority = 10;
  info.create = CreateForSet;
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(GlooInfo());

}  // namespace hora
