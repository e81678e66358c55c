#include "runtime/interface_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace hora {
namespace {

struct Iface {
  std::string name;
  std::string address;
  bool up_external;
};

StatusOr<std::vector<Iface>> ListIpv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Internal(std::string("getifaddrs: ") + std::strerror(errno));
  std::vector<Iface> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    const bool up_external = (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_LOOPBACK) == 0;
    out.push_back(Iface{a->ifa_name, buf, up_external});
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

StatusOr<std::string> InterfaceAddress(const std::string& var, const std::string& names) {
  auto ifaces = ListIpv4();
  if (!ifaces.ok()) return ifaces.status();
  std::stringstream ss(names);
  std::string name;
  while (std::getline(ss, name, ',')) {
    for (const Iface& i : ifaces.value()) {
      if (i.name == name) return i.address;
    }
  }
  std::string have;
  for (const Iface& i : ifaces.value())
    have += (have.empty() ? "" : ", ") + i.name + " " + i.address;
  return InvalidArgument(var + "='" + names +
                         "': none of these interfaces has an IPv4 address (this host has: " +
                         (have.empty() ? "none" : have) + ")");
}

StatusOr<std::string> FirstExternalAddress() {
  auto ifaces = ListIpv4();
  if (!ifaces.ok()) return ifaces.status();
  for (const Iface& i : ifaces.value()) {
    if (i.up_external) return i.address;
  }
  return Unavailable("no network interface other than loopback has an IPv4 address");
}

}  // namespace hora
