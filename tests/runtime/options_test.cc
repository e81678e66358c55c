#include "runtime/options.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "collectives/registry.h"
#include "runtime/env_aliases.h"

using namespace hora;

namespace {

EnvLookup Env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A launched rank's options with `extra` variables set.
StatusOr<Options> With(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> v{{"HORA_COORDINATOR_ADDR", "127.0.0.1:5000"},
                                       {"HORA_JOB_TOKEN", "t"}};
  for (const auto& kv : extra) v[kv.first] = kv.second;
  return ParseOptions(Env(v), {});
}

}  // namespace

TEST_CASE("defaults for a single process without a launcher") {
  auto o = ParseOptions(Env({}), {});
  REQUIRE(o.ok());
  REQUIRE(o.value().rank == 0);
  REQUIRE(o.value().size == 1);
  REQUIRE(o.value().coordinator_address == "127.0.0.1:0");
  REQUIRE(o.value().fusion_threshold_bytes == 64ll << 20);
  REQUIRE(o.value().stall_timeout_s == 600);
  REQUIRE(o.value().collective_timeout_s == o.value().heartbeat_timeout_s);
}

TEST_CASE("identity comes from HORA_* first, then Open MPI, torchrun, Slurm") {
  auto o = ParseOptions(Env({{"HORA_RANK", "2"},
                             {"HORA_SIZE", "4"},
                             {"RANK", "1"},
                             {"WORLD_SIZE", "9"},
                             {"HORA_COORDINATOR_ADDR", "10.0.0.1:5000"},
                             {"HORA_JOB_TOKEN", "t"}}),
                        {});
  REQUIRE(o.ok());
  REQUIRE(o.value().rank == 2);
  REQUIRE(o.value().size == 4);
  REQUIRE(o.value().launch.launcher == Launcher::kHorarun);
  auto m = ParseOptions(Env({{"OMPI_COMM_WORLD_RANK", "1"},
                             {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "node1"},
                             {"MASTER_PORT", "1234"},
                             {"PMIX_NAMESPACE", "ns1"}}),
                        {});
  REQUIRE(m.ok());
  REQUIRE(m.value().rank == 1);
  REQUIRE(m.value().coordinator_address.empty());  // published by rank 0 through PMIx
  REQUIRE(m.value().coordinator_exchange == "pmix");
  REQUIRE(m.value().token == "PMIX_NAMESPACE=ns1");
  auto t = ParseOptions(Env({{"RANK", "3"},
                             {"WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "h"},
                             {"MASTER_PORT", "29500"},
                             {"TORCHELASTIC_RUN_ID", "r"},
                             {"SLURM_PROCID", "0"},
                             {"SLURM_NTASKS", "1"}}),
                        {});
  REQUIRE(t.ok());
  REQUIRE(t.value().rank == 3);
  REQUIRE(t.value().coordinator_address == "h:29501");  // torchrun's own store has MASTER_PORT
  REQUIRE(t.value().coordinator_listen_any);
  REQUIRE(t.value().coordinator_exchange.empty());
  REQUIRE(t.value().token == "torchrun:r@h:29500");
}

TEST_CASE(
    "the coordinator address: given, single rank, the launcher's rule, or an error naming it") {
  std::map<std::string, std::string> slurm{{"SLURM_PROCID", "1"},
                                           {"SLURM_NTASKS", "3"},
                                           {"SLURM_STEP_NODELIST", "gpu[07-09]"},
                                           {"SLURM_JOB_ID", "4242"},
                                           {"SLURM_STEP_ID", "0"}};
  auto s = ParseOptions(Env(slurm), {});
  REQUIRE(s.ok());
  REQUIRE(s.value().coordinator_address == "gpu07:" + std::to_string(20000 + 242 * 20));
  REQUIRE(s.value().token == "SLURM_JOB_ID=4242.0");
  slurm["HORA_COORDINATOR_ADDR"] = "10.1.1.1:7777";
  slurm["HORA_COORDINATOR_IFACE"] = "ib0";
  auto given = ParseOptions(Env(slurm), {});
  REQUIRE(given.value().coordinator_address == "10.1.1.1:7777");
  REQUIRE_FALSE(given.value().coordinator_listen_any);
  REQUIRE(given.value().coordinator_iface == "ib0");
  auto one = ParseOptions(
      Env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}), {});
  REQUIRE(one.value().coordinator_address == "127.0.0.1:0");
  auto no_pmix = ParseOptions(
      Env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"HORA_JOB_TOKEN", "t"}}),
      {});
  REQUIRE_FALSE(no_pmix.ok());
  REQUIRE(no_pmix.status().message().find("PMIX_NAMESPACE") != std::string::npos);
  auto no_master =
      ParseOptions(Env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"HORA_JOB_TOKEN", "t"}}), {});
  REQUIRE_FALSE(no_master.ok());
  REQUIRE(no_master.status().message().find("MASTER_ADDR") != std::string::npos);
  auto no_list =
      ParseOptions(Env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "1"}}), {});
  REQUIRE_FALSE(no_list.ok());
  REQUIRE(no_list.status().message().find("SLURM_STEP_NODELIST") != std::string::npos);
  auto bad_list = ParseOptions(
      Env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}}), {});
  REQUIRE_FALSE(bad_list.ok());
  REQUIRE(bad_list.status().message().find("SLURM_JOB_NODELIST='n[1-'") != std::string::npos);
  auto bad_rank = ParseOptions(Env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}), {});
  REQUIRE_FALSE(bad_rank.ok());
  REQUIRE(bad_rank.status().message().find("RANK='4' is not below WORLD_SIZE='4'") !=
          std::string::npos);
}

TEST_CASE("the job token is given, derived from the launcher's job id, or required") {
  auto given = ParseOptions(Env({{"HORA_JOB_TOKEN", "abc"}}), {});
  REQUIRE(given.value().token == "abc");
  auto single = ParseOptions(Env({}), {});
  REQUIRE_FALSE(single.value().token.empty());
  auto slurm = ParseOptions(Env({{"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_JOB_ID", "77"},
                                 {"SLURM_STEP_ID", "3"},
                                 {"SLURM_JOB_NODELIST", "h"}}),
                            {});
  REQUIRE(slurm.value().token == "SLURM_JOB_ID=77.3");
  auto missing = ParseOptions(
      Env({{"HORA_RANK", "1"}, {"HORA_SIZE", "2"}, {"HORA_COORDINATOR_ADDR", "h:1"}}), {});
  REQUIRE_FALSE(missing.ok());
  REQUIRE(missing.status().message().find("HORA_JOB_TOKEN") != std::string::npos);
}

TEST_CASE("overrides from the init config win") {
  OptionOverrides ov;
  ov.rank = 1;
  ov.size = 2;
  ov.coordinator_address = "127.0.0.1:7000";
  ov.token = "secret";
  auto o = ParseOptions(Env({{"HORA_RANK", "0"}, {"HORA_SIZE", "3"}, {"HORA_JOB_TOKEN", "x"}}), ov);
  REQUIRE(o.ok());
  REQUIRE(o.value().rank == 1);
  REQUIRE(o.value().size == 2);
  REQUIRE(o.value().token == "secret");
}

TEST_CASE("bad values name the variable") {
  auto check = [](std::map<std::string, std::string> vars, const std::string& needle) {
    vars.emplace("HORA_COORDINATOR_ADDR", "127.0.0.1:5000");
    vars.emplace("HORA_JOB_TOKEN", "t");
    auto o = ParseOptions(Env(vars), {});
    REQUIRE_FALSE(o.ok());
    REQUIRE(o.status().code() == Code::kInvalidArgument);
    INFO(o.status().message());
    REQUIRE(o.status().message().find(needle) != std::string::npos);
  };
  check({{"HORA_FUSION_THRESHOLD", "12x"}}, "HORA_FUSION_THRESHOLD='12x'");
  check({{"HORA_FUSION_THRESHOLD", "-1"}}, "HORA_FUSION_THRESHOLD");
  check({{"HORA_CYCLE_TIME_MS", "abc"}}, "HORA_CYCLE_TIME_MS");
  check({{"HORA_DIAGNOSE_SIGNAL", "TERM"}}, "HORA_DIAGNOSE_SIGNAL='TERM' is not SIGUSR1");
  check({{"HORA_DIAGNOSE_SECONDS", "-1"}}, "HORA_DIAGNOSE_SECONDS='-1'");
  check({{"HORA_FLIGHT_RECORDER_SIZE", "2000000"}}, "HORA_FLIGHT_RECORDER_SIZE");
  check({{"HORA_HEARTBEAT_TIMEOUT_SECONDS", "0"}}, "HORA_HEARTBEAT_TIMEOUT_SECONDS");
  check({{"HORA_HEARTBEAT_TIMEOUT_SECONDS", "2"}, {"HORA_HEARTBEAT_INTERVAL_SECONDS", "3"}},
        "HORA_HEARTBEAT_INTERVAL_SECONDS");
  check({{"HORA_LOG_LEVEL", "loud"}}, "HORA_LOG_LEVEL='loud'");
  check({{"HORA_CPU_OPERATIONS", "mpi2"}}, "HORA_CPU_OPERATIONS=mpi2: no backend 'mpi2' is built");
  check({{"HORA_CPU_OPERATIONS", "mpi2"}}, "(built: gloo, hierarchical, loopback");
  // A CUDA build stages CUDA tensors through a named CPU backend; no build runs CPU tensors on
  // a CUDA-only backend.
  if (IsBackendBuilt("nccl")) {
    check({{"HORA_CPU_OPERATIONS", "nccl"}},
          "HORA_CPU_OPERATIONS=nccl: backend 'nccl' serves cuda");
  } else {
    check({{"HORA_GPU_OPERATIONS", "gloo"}}, "HORA_GPU_OPERATIONS=gloo: backend 'gloo' serves cpu");
  }
  check({{"HORA_RANK", "5"}, {"HORA_SIZE", "2"}}, "HORA_RANK='5' is not below HORA_SIZE='2'");
  check({{"HORA_RANK", "0"}, {"HORA_SIZE", "0"}}, "HORA_SIZE");
  check({{"HORA_SIZE", "2"}}, "HORA_RANK is not set (HORA_SIZE is)");
  check({{"HORA_TLS_CERT", "/c.pem"}}, "HORA_TLS_KEY");
  check({{"HORA_STEADY", "yes"}}, "HORA_STEADY='yes' is not one of auto, on, off");
  check({{"HORA_HOST_RELAY", "maybe"}}, "HORA_HOST_RELAY='maybe' is not one of auto, on, off");
  check({{"HORA_STEADY_PATIENCE_MS", "0"}}, "HORA_STEADY_PATIENCE_MS");
  auto no_addr =
      ParseOptions(Env({{"HORA_SIZE", "2"}, {"HORA_RANK", "0"}, {"HORA_JOB_TOKEN", "t"}}), {});
  REQUIRE_FALSE(no_addr.ok());
  REQUIRE(no_addr.status().message().find("HORA_COORDINATOR_ADDR") != std::string::npos);
  auto bad_addr = ParseOptions(Env({{"HORA_RANK", "0"},
                                    {"HORA_SIZE", "2"},
                                    {"HORA_COORDINATOR_ADDR", "nohost"},
                                    {"HORA_JOB_TOKEN", "t"}}),
                               {});
  REQUIRE_FALSE(bad_addr.ok());
  REQUIRE(bad_addr.status().message().find("host:port") != std::string::npos);
}

TEST_CASE("the digest covers the options that must agree") {
  auto a = ParseOptions(Env({{"HORA_FUSION_THRESHOLD", "1024"}}), {});
  auto b = ParseOptions(Env({{"HORA_FUSION_THRESHOLD", "2048"}}), {});
  REQUIRE(a.value().Digest() != b.value().Digest());
  REQUIRE(a.value().Digest().find("fusion_threshold=1024") != std::string::npos);
  auto off = ParseOptions(Env({{"HORA_STEADY", "off"}}), {});
  auto plain = ParseOptions(Env({}), {});
  REQUIRE(off.ok());
  REQUIRE(plain.ok());
  REQUIRE(off.value().steady == "off");
  REQUIRE(plain.value().steady == "auto");
  REQUIRE(plain.value().steady_patience_ms == 500);
  REQUIRE(off.value().Digest() != plain.value().Digest());
  REQUIRE(off.value().Digest().find("steady=off") != std::string::npos);
}

TEST_CASE("HORA_DETERMINISTIC: off by default, in the digest, the init config wins") {
  auto plain = ParseOptions(Env({}), {});
  auto on = ParseOptions(Env({{"HORA_DETERMINISTIC", "1"}}), {});
  auto word = ParseOptions(Env({{"HORA_DETERMINISTIC", "true"}}), {});
  REQUIRE(plain.ok());
  REQUIRE(on.ok());
  REQUIRE(word.ok());
  REQUIRE_FALSE(plain.value().deterministic);
  REQUIRE(on.value().deterministic);
  REQUIRE(word.value().deterministic);
  REQUIRE(on.value().Digest() != plain.value().Digest());
  REQUIRE(on.value().Digest().find("deterministic=1") != std::string::npos);
  OptionOverrides force_on, force_off;
  force_on.deterministic = 1;
  force_off.deterministic = 0;
  REQUIRE(ParseOptions(Env({}), force_on).value().deterministic);
  REQUIRE_FALSE(ParseOptions(Env({{"HORA_DETERMINISTIC", "1"}}), force_off).value().deterministic);
  auto bad = ParseOptions(Env({{"HORA_DETERMINISTIC", "yes"}}), {});
  REQUIRE_FALSE(bad.ok());
  REQUIRE(bad.status().message() == "HORA_DETERMINISTIC='yes' is not 0, 1, true or false");
}

TEST_CASE("cpu and gpu operations: auto by default, a built backend by name") {
  std::map<std::string, std::string> vars{{"HORA_COORDINATOR_ADDR", "127.0.0.1:5000"},
                                          {"HORA_JOB_TOKEN", "t"}};
  auto o = ParseOptions(Env(vars), {});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "auto");
  REQUIRE(o.value().gpu_operations == "auto");
  vars["HORA_CPU_OPERATIONS"] = "loopback";
  o = ParseOptions(Env(vars), {});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "loopback");
  REQUIRE(o.value().Digest().find("cpu_operations=loopback") != std::string::npos);
}

TEST_CASE("Horovod's variables are read as Hora's; Hora's name wins; each is reported") {
  auto o = ParseOptions(Env({{"HOROVOD_FUSION_THRESHOLD", "1048576"},
                             {"HOROVOD_CYCLE_TIME", "3.5"},
                             {"HOROVOD_STALL_CHECK_TIME_SECONDS", "7"},
                             {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "20"},
                             {"HOROVOD_LOG_LEVEL", "DEBUG"},
                             {"HOROVOD_CPU_OPERATIONS", "GLOO"},
                             {"HOROVOD_GLOO_TIMEOUT_SECONDS", "45"},
                             {"HOROVOD_CACHE_CAPACITY", "1024"}}),
                        {});
  REQUIRE(o.ok());
  const Options& v = o.value();
  CHECK(v.fusion_threshold_bytes == 1048576);
  CHECK(v.cycle_time_ms == 3.5);
  CHECK(v.stall_warning_s == 7);
  CHECK(v.stall_timeout_s == 20);
  CHECK(v.log_level == "debug");
  CHECK(v.cpu_operations == "gloo");
  CHECK(v.collective_timeout_s == 45);
  auto has = [&](const std::string& text) {
    for (const auto& n : v.env_notes) {
      if (n.find(text) != std::string::npos) return true;
    }
    return false;
  };
  CHECK(has("HOROVOD_CYCLE_TIME=3.5 read as HORA_CYCLE_TIME_MS=3.5"));
  CHECK(has("HOROVOD_CPU_OPERATIONS=GLOO read as HORA_CPU_OPERATIONS=gloo"));
  CHECK(has("HOROVOD_CACHE_CAPACITY=1024 has no effect"));
  size_t cycle_notes = 0;
  for (const auto& n : v.env_notes) cycle_notes += n.find("HOROVOD_CYCLE_TIME=") == 0;
  CHECK(cycle_notes == 1);  // once, though the option is read more than once

  auto both = ParseOptions(
      Env({{"HORA_FUSION_THRESHOLD", "4096"}, {"HOROVOD_FUSION_THRESHOLD", "8192"}}), {});
  REQUIRE(both.ok());
  CHECK(both.value().fusion_threshold_bytes == 4096);
  CHECK(both.value().env_notes.empty());

  auto off = ParseOptions(Env({{"HOROVOD_STALL_CHECK_DISABLE", "1"}}), {});
  REQUIRE(off.ok());
  CHECK(off.value().stall_warning_s >= 1e6);

  // A bad Horovod value is refused naming the Hora option it was read as.
  auto bad = ParseOptions(Env({{"HOROVOD_FUSION_THRESHOLD", "lots"}}), {});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("HORA_FUSION_THRESHOLD='lots'") != std::string::npos);

  // HOROVOD_RANK/SIZE (horovodrun's names) give the identity.
  auto ids = ParseOptions(Env({{"HOROVOD_RANK", "1"},
                               {"HOROVOD_SIZE", "2"},
                               {"HORA_COORDINATOR_ADDR", "127.0.0.1:5000"},
                               {"HORA_JOB_TOKEN", "t"}}),
                          {});
  REQUIRE(ids.ok());
  CHECK(ids.value().rank == 1);
  CHECK(ids.value().size == 2);
}

TEST_CASE("an unknown HORA_ variable is named with the closest known one") {
  auto w = UnknownHoraVariables({"HORA_FUSION_TRESHOLD", "HORA_RANK", "PATH", "HORA_LIBRARY",
                                 "HORA_XYZZY_PLUGH_QUUX",
                                 "HORA_NCCL_LIBRARY" /* set by hora/_lib.py itself */});
  REQUIRE(w.size() == 2);
  CHECK(w[0] ==
        "HORA_FUSION_TRESHOLD is not a Hora variable (did you mean HORA_FUSION_THRESHOLD?); "
        "it is ignored");
  CHECK(w[1].find("HORA_XYZZY_PLUGH_QUUX is not a Hora variable") == 0);
  CHECK(w[1].find("did you mean") == std::string::npos);
}

TEST_CASE("HORA_TIMELINE_MARK_CYCLES (or HOROVOD_): off by default, 1 or true, else named") {
  auto o = With({});
  REQUIRE(o.ok());
  CHECK_FALSE(o.value().timeline_mark_cycles);
  o = With({{"HOROVOD_TIMELINE", "/tmp/t"}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}});
  REQUIRE(o.ok());
  CHECK(o.value().timeline == "/tmp/t");
  CHECK(o.value().timeline_mark_cycles);
  o = With({{"HORA_TIMELINE_MARK_CYCLES", "0"}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}});
  REQUIRE(o.ok());
  CHECK_FALSE(o.value().timeline_mark_cycles);  // the Hora name wins
  o = With({{"HORA_TIMELINE_MARK_CYCLES", "yes"}});
  REQUIRE_FALSE(o.ok());
  CHECK(o.status().message() == "HORA_TIMELINE_MARK_CYCLES='yes' is not 0, 1, true or false");
}

TEST_CASE("HOROVOD_HIERARCHICAL_ALLREDUCE: 1 prefers the hierarchical backend, 0 avoids it") {
  auto o = With({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "prefer:hierarchical");
  o = With({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "avoid:hierarchical");
  // The Hora name wins over the Horovod alias; a named backend wins over both.
  o = With({{"HORA_HIERARCHICAL_ALLREDUCE", "false"}, {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "avoid:hierarchical");
  o = With({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"HORA_CPU_OPERATIONS", "gloo"}});
  REQUIRE(o.ok());
  REQUIRE(o.value().cpu_operations == "gloo");
  o = With({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "yes"}});
  REQUIRE_FALSE(o.ok());
  REQUIRE(o.status().message() ==
          "HOROVOD_HIERARCHICAL_ALLREDUCE='yes' is not 0, 1, true or false");
  // The selection forms themselves are checked like names.
  o = With({{"HORA_CPU_OPERATIONS", "prefer:nope"}});
  REQUIRE_FALSE(o.ok());
  REQUIRE(o.status().message().find(
              "HORA_CPU_OPERATIONS=prefer:nope: no backend 'nope' is built") != std::string::npos);
}
