#include "runtime/engine_config.h"

#include <unistd.h>

namespace hora {
namespace {

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

TlsFiles TlsFrom(const Options& o) { return TlsFiles{o.tls_cert, o.tls_key, o.tls_ca}; }

}  // namespace

CoordinatorConfig CoordinatorConfigFrom(const Options& o) {
  CoordinatorConfig cc;
  cc.listen_address = o.coordinator_address;
  cc.size = o.size;
  cc.token = o.token;
  cc.options_digest = o.Digest();
  cc.planner.size = o.size;
  cc.planner.fusion_threshold_bytes = o.fusion_threshold_bytes;
  cc.planner.cycle_time = std::chrono::microseconds(static_cast<int64_t>(o.cycle_time_ms * 1000));
  cc.start_timeout = Ms(o.start_timeout_s);
  cc.heartbeat_interval = Ms(o.heartbeat_interval_s);
  cc.heartbeat_timeout = Ms(o.heartbeat_timeout_s);
  cc.stall_warning = Ms(o.stall_warning_s);
  cc.stall_timeout = Ms(o.stall_timeout_s);
  cc.max_message_bytes = static_cast<int>(o.max_message_bytes);
  cc.tls = TlsFrom(o);
  return cc;
}

ClientConfig ClientConfigFrom(const Options& o, const std::string& address) {
  ClientConfig cl;
  cl.address = address;
  cl.token = o.token;
  cl.rank = o.rank;
  cl.size = o.size;
  cl.hostname = o.hostname;
  cl.pid = getpid();
  cl.options_digest = o.Digest();
  cl.start_timeout = Ms(o.start_timeout_s);
  cl.heartbeat_interval = Ms(o.heartbeat_interval_s);
  cl.heartbeat_timeout = Ms(o.heartbeat_timeout_s);
  cl.max_message_bytes = static_cast<int>(o.max_message_bytes);
  cl.tls = TlsFrom(o);
  return cl;
}

std::chrono::milliseconds CollectiveTimeout(const Options& o) {
  return Ms(o.collective_timeout_s > 0 ? o.collective_timeout_s : o.heartbeat_timeout_s);
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace hora
