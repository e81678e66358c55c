#include "runtime/engine_config.h"

#include <unistd.h>

#include "runtime/interface_address.h"

namespace hora {
namespace {

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

TlsFiles TlsFrom(const Options& o) { return TlsFiles{o.tls_cert, o.tls_key, o.tls_ca}; }

}  // namespace

CoordinatorConfig CoordinatorConfigFrom(const Options& o) {
  CoordinatorConfig cc;
  cc.listen_address = o.coordinator_address;  // the engine sets CoordinatorListenAddress's
  cc.size = o.size;
  cc.token = o.token;
  cc.options_digest = o.Digest();
  cc.planner.size = o.size;
  cc.planner.fusion_threshold_bytes = o.fusion_threshold_bytes;
  cc.planner.cycle_time = std::chrono::microseconds(static_cast<int64_t>(o.cycle_time_ms * 1000));
  AutotuneConfig& at = cc.autotune;
  at.enabled = o.autotune;
  at.log_path = o.autotune_log;
  at.warmup_samples = o.autotune_warmup_samples;
  at.steps_per_sample = o.autotune_steps_per_sample;
  at.samples_per_trial = o.autotune_samples_per_trial;
  at.space.start = {cc.planner.fusion_threshold_bytes, cc.planner.cycle_time.count()};
  at.space.fusion_candidates = DefaultFusionCandidates();
  at.space.cycle_candidates = DefaultCycleCandidates();
  at.space.tune_fusion = !o.fusion_threshold_set;
  at.space.tune_cycle = !o.cycle_time_set;
  cc.start_timeout = Ms(o.start_timeout_s);
  cc.heartbeat_interval = Ms(o.heartbeat_interval_s);
  cc.heartbeat_timeout = Ms(o.heartbeat_timeout_s);
  cc.stall_warning = Ms(o.stall_warning_s);
  cc.stall_timeout = Ms(o.stall_timeout_s);
  cc.diagnose_deadline = Ms(o.diagnose_s);
  if (o.diagnose_file == "none") {
    cc.diagnose_file.clear();
  } else {
    cc.diagnose_file = o.diagnose_file.empty()
                           ? "/tmp/hora-diagnosis-" + std::to_string(getpid()) + ".txt"
                           : o.diagnose_file;
  }
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
  cl.host_relay = o.host_relay == "on" || (o.host_relay == "auto" && o.size >= kHostRelayAutoRanks);
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

std::string JoinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<std::string> CoordinatorListenAddress(const Options& o) {
  const bool exchange = !o.coordinator_exchange.empty();
  std::string host;
  if (!o.coordinator_iface.empty()) {
    auto a = InterfaceAddress(kEnvCoordinatorIface, o.coordinator_iface);
    if (!a.ok()) return a.status();
    host = a.value();
  } else if (exchange && o.launch.SingleHost()) {
    host = "127.0.0.1";
  } else if (exchange) {
    auto a = FirstExternalAddress();
    if (!a.ok()) {
      return Status(a.status().code(), a.status().message() + ": set " + kEnvCoordinatorIface +
                                           " to the interface the other hosts reach");
    }
    host = a.value();
  } else if (o.coordinator_listen_any) {
    host = "0.0.0.0";
  } else {
    host = HostOf(o.coordinator_address);
  }
  if (exchange) return JoinHostPort(host, o.coordinator_listen_port);
  const std::string port = o.coordinator_address.substr(o.coordinator_address.rfind(':') + 1);
  return JoinHostPort(host, std::stoi(port));
}

}  // namespace hora
