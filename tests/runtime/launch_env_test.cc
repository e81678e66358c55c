#include "runtime/launch_env.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>

using namespace hora;

namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup Env(const Vars& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

LaunchEnv Detect(const Vars& vars) {
  auto l = DetectLaunchEnv(Env(vars));
  INFO((l.ok() ? "" : l.status().message()));
  REQUIRE(l.ok());
  return l.value();
}

void RequireError(const Vars& vars, const std::string& needle) {
  auto l = DetectLaunchEnv(Env(vars));
  REQUIRE_FALSE(l.ok());
  INFO(l.status().message());
  REQUIRE(l.status().code() == Code::kInvalidArgument);
  REQUIRE(l.status().message().find(needle) != std::string::npos);
}

// What srun sets for task `rank` of a 5-task step on node[01-02],gpu-a1 with 2,2,1 tasks.
Vars SlurmTask(int rank) {
  const int node = rank / 2;
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", "5"},
          {"SLURM_LOCALID", std::to_string(rank % 2)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_STEP_NODELIST", "node[01-02],gpu-a1"},
          {"SLURM_JOB_NODELIST", "node[01-04],gpu-a[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_TASKS_PER_NODE", "2(x6)"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_JOB_ID", "123456"},
          {"SLURM_STEP_ID", "3"}};
}

}  // namespace

TEST_CASE("no launcher: rank 0 of 1 and nothing else") {
  LaunchEnv l = Detect({});
  REQUIRE(l.launcher == Launcher::kNone);
  REQUIRE(l.rank == 0);
  REQUIRE(l.size == 1);
  REQUIRE(l.local_rank == -1);
  REQUIRE(l.coordinator_address.empty());
  REQUIRE(l.token.empty());
}

TEST_CASE("horarun: HORA_* identity, local and cross from its variables") {
  LaunchEnv l = Detect({{"HORA_RANK", "3"},
                        {"HORA_SIZE", "4"},
                        {"HORA_LOCAL_RANK", "1"},
                        {"HORA_LOCAL_SIZE", "2"},
                        {"HORA_CROSS_RANK", "1"},
                        {"HORA_CROSS_SIZE", "2"},
                        {"OMPI_COMM_WORLD_RANK", "0"},
                        {"RANK", "0"},
                        {"SLURM_PROCID", "0"}});
  REQUIRE(l.launcher == Launcher::kHorarun);
  REQUIRE((l.rank == 3 && l.size == 4 && l.local_rank == 1 && l.local_size == 2 &&
           l.cross_rank == 1 && l.cross_size == 2));
  RequireError({{"HORA_SIZE", "2"}}, "HORA_RANK is not set (HORA_SIZE is)");
  RequireError({{"HORA_RANK", "2"}}, "HORA_SIZE is not set (HORA_RANK is)");
  RequireError({{"HORA_RANK", "2"}, {"HORA_SIZE", "2"}},
               "HORA_RANK='2' is not below HORA_SIZE='2'");
  RequireError({{"HORA_RANK", "0"}, {"HORA_SIZE", "2"}, {"HORA_LOCAL_RANK", "0"}},
               "HORA_LOCAL_SIZE is not set");
}

TEST_CASE(
    "Open MPI: world and local variables; the address through PMIx; token from the namespace") {
  LaunchEnv l = Detect({{"OMPI_COMM_WORLD_RANK", "2"},
                        {"OMPI_COMM_WORLD_SIZE", "3"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                        {"PMIX_NAMESPACE", "55115777"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "1"}});
  REQUIRE(l.launcher == Launcher::kOpenMpi);
  REQUIRE((l.rank == 2 && l.size == 3 && l.local_rank == 0 && l.local_size == 1));
  REQUIRE((l.cross_rank == -1 && l.cross_size == -1));
  REQUIRE(l.address_through_pmix);
  REQUIRE(l.coordinator_address.empty());
  REQUIRE(l.listen_port == 0);
  REQUIRE(l.token == "PMIX_NAMESPACE=55115777");
  REQUIRE_FALSE(l.SingleHost());
  LaunchEnv port = Detect({{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                           {"PMIX_NAMESPACE", "n"},
                           {"HORA_COORDINATOR_PORT", "31000"}});
  REQUIRE(port.listen_port == 31000);
  REQUIRE(port.SingleHost());
  LaunchEnv no_pmix = Detect({{"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_MCA_ess_base_jobid", "77"}});
  REQUIRE_FALSE(no_pmix.address_through_pmix);
  REQUIRE(no_pmix.token == "OMPI_MCA_ess_base_jobid=77");
  RequireError({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}},
               "OMPI_COMM_WORLD_RANK='3' is not below OMPI_COMM_WORLD_SIZE='3'");
  RequireError({{"OMPI_COMM_WORLD_RANK", "0"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
               "OMPI_COMM_WORLD_LOCAL_RANK='2' is not below");
  RequireError({{"OMPI_COMM_WORLD_RANK", "0"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"PMIX_NAMESPACE", "n"},
                {"HORA_COORDINATOR_PORT", "70000"}},
               "HORA_COORDINATOR_PORT='70000'");
}

TEST_CASE("PMI (MPICH Hydra): rank, size and local rank") {
  LaunchEnv l = Detect(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  REQUIRE(l.launcher == Launcher::kPmi);
  REQUIRE((l.rank == 1 && l.size == 4 && l.local_rank == 1 && l.local_size == 2));
  REQUIRE(l.coordinator_address.empty());
  REQUIRE_FALSE(l.address_through_pmix);
}

TEST_CASE("torchrun: RANK/WORLD_SIZE/LOCAL_*/GROUP_*, the coordinator at MASTER_PORT + 1") {
  Vars v{{"RANK", "5"},
         {"WORLD_SIZE", "8"},
         {"LOCAL_RANK", "1"},
         {"LOCAL_WORLD_SIZE", "4"},
         {"GROUP_RANK", "1"},
         {"GROUP_WORLD_SIZE", "2"},
         {"MASTER_ADDR", "trainer-0"},
         {"MASTER_PORT", "29500"},
         {"TORCHELASTIC_RUN_ID", "job7"},
         {"SLURM_PROCID", "1"},
         {"SLURM_NTASKS", "2"}};
  LaunchEnv l = Detect(v);
  REQUIRE(l.launcher == Launcher::kTorchrun);
  REQUIRE((l.rank == 5 && l.size == 8 && l.local_rank == 1 && l.local_size == 4 &&
           l.cross_rank == 1 && l.cross_size == 2));
  REQUIRE(l.coordinator_address == "trainer-0:29501");
  REQUIRE(l.listen_any);
  REQUIRE(l.token == "torchrun:job7@trainer-0:29500");
  v["TORCHELASTIC_RESTART_COUNT"] = "0";  // the first attempt
  REQUIRE(Detect(v).token == "torchrun:job7@trainer-0:29500");
  v["TORCHELASTIC_RESTART_COUNT"] = "2";  // the agent's third: another job's token
  REQUIRE(Detect(v).token == "torchrun:job7#2@trainer-0:29500");
  v.erase("TORCHELASTIC_RESTART_COUNT");
  v["HORA_COORDINATOR_PORT"] = "40000";
  REQUIRE(Detect(v).coordinator_address == "trainer-0:40000");
  v.erase("HORA_COORDINATOR_PORT");
  v.erase("MASTER_ADDR");
  REQUIRE(Detect(v).coordinator_address.empty());  // HORA_COORDINATOR_ADDR must say
  RequireError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
               "MASTER_PORT is not set (MASTER_ADDR is)");
  RequireError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}},
               "MASTER_PORT='65535' is not an integer in [1, 65534]");
  RequireError({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK='2' is not below WORLD_SIZE='2'");
  RequireError({{"RANK", "1"}}, "WORLD_SIZE is not set (RANK is)");
  RequireError({{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one'");
  RequireError({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
               "LOCAL_RANK='2' is not below LOCAL_WORLD_SIZE='2'");
  RequireError({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"GROUP_RANK", "0"}},
               "GROUP_WORLD_SIZE is not set (GROUP_RANK is)");
}

TEST_CASE("Slurm: identity, topology from the step's lists, first host and the port rule") {
  for (int rank = 0; rank < 5; ++rank) {
    LaunchEnv l = Detect(SlurmTask(rank));
    INFO("rank " << rank);
    REQUIRE(l.launcher == Launcher::kSlurm);
    REQUIRE((l.rank == rank && l.size == 5));
    REQUIRE(l.local_rank == rank % 2);
    REQUIRE(l.local_size == (rank < 4 ? 2 : 1));
    REQUIRE((l.cross_rank == rank / 2 && l.cross_size == 3));
    REQUIRE(l.coordinator_address == "node01:" + std::to_string(20000 + 456 * 20 + 3));
    REQUIRE(l.listen_any);
    REQUIRE(l.token == "SLURM_JOB_ID=123456.3");
  }
  REQUIRE(SlurmCoordinatorPort(0, 0) == 20000);
  REQUIRE(SlurmCoordinatorPort(999, 19) == 39999);
  REQUIRE(SlurmCoordinatorPort(1000, 20) == 20000);
  Vars v = SlurmTask(0);
  v["HORA_COORDINATOR_PORT"] = "23456";
  REQUIRE(Detect(v).coordinator_address == "node01:23456");
  v.erase("SLURM_STEP_NODELIST");  // the job's list is the fallback (its first host runs task 0)
  v.erase("SLURM_STEP_TASKS_PER_NODE");
  LaunchEnv job = Detect(v);
  REQUIRE(job.coordinator_address == "node01:23456");
  REQUIRE(job.cross_size == 6);  // from SLURM_TASKS_PER_NODE, the job's
  Vars minimal{{"SLURM_PROCID", "1"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_JOB_NODELIST", "c7"},
               {"SLURM_JOB_ID", "9"}};
  LaunchEnv m = Detect(minimal);
  REQUIRE(m.coordinator_address == "c7:20180");
  REQUIRE((m.local_rank == -1 && m.cross_rank == -1));
  REQUIRE(m.token == "SLURM_JOB_ID=9");
  Vars per_node{{"SLURM_PROCID", "1"},
                {"SLURM_NTASKS", "4"},
                {"SLURM_LOCALID", "1"},
                {"SLURM_NTASKS_PER_NODE", "2"}};
  REQUIRE(Detect(per_node).local_size == 2);
  REQUIRE(Detect(per_node).coordinator_address.empty());
}

TEST_CASE("Slurm: malformed and inconsistent variables name the variable") {
  auto with = [](Vars v, const std::string& k, const std::string& value) {
    v[k] = value;
    return v;
  };
  auto without = [](Vars v, const std::string& k) {
    v.erase(k);
    return v;
  };
  RequireError(with(SlurmTask(0), "SLURM_PROCID", "5"),
               "SLURM_PROCID='5' is not below SLURM_NTASKS='5'");
  RequireError(without(SlurmTask(0), "SLURM_NTASKS"), "SLURM_NPROCS is not set (SLURM_PROCID is)");
  RequireError(with(SlurmTask(0), "SLURM_STEP_NODELIST", "node[01-02"),
               "SLURM_STEP_NODELIST='node[01-02'");
  RequireError(with(SlurmTask(0), "SLURM_STEP_NODELIST", "node[01-04]"),
               "SLURM_STEP_NODELIST='node[01-04]' has 4 hosts but the tasks-per-node list 3 nodes");
  RequireError(with(SlurmTask(0), "SLURM_STEP_TASKS_PER_NODE", "2(x3)"),
               "SLURM_STEP_TASKS_PER_NODE='2(x3)' adds up to 6 tasks but SLURM_NTASKS='5'");
  RequireError(with(SlurmTask(0), "SLURM_STEP_TASKS_PER_NODE", "2(x"),
               "SLURM_STEP_TASKS_PER_NODE='2(x'");
  RequireError(with(SlurmTask(4), "SLURM_LOCALID", "1"),
               "SLURM_LOCALID='1' is not below this node's task count 1");
  RequireError(with(SlurmTask(4), "SLURM_NODEID", "3"),
               "SLURM_NODEID='3' is not below SLURM_STEP_TASKS_PER_NODE='3'");
  RequireError(without(SlurmTask(0), "SLURM_JOB_ID"),
               "SLURM_JOB_ID is not set (SLURM_STEP_NODELIST is)");
  RequireError(with(SlurmTask(0), "SLURM_STEP_ID", "x"), "SLURM_STEP_ID='x'");
  RequireError(with(SlurmTask(0), "HORA_COORDINATOR_PORT", "0"), "HORA_COORDINATOR_PORT='0'");
}

TEST_CASE("the launcher's local and cross values are compared with the hostnames' topology") {
  LaunchEnv l = Detect(SlurmTask(3));
  REQUIRE(CompareWithTopology(l, 1, 2, 1, 3).empty());
  const std::string d = CompareWithTopology(l, 3, 5, 0, 1);
  REQUIRE(d.find("Slurm says local rank 1 (hostnames give 3), local size 2 (hostnames give 5), "
                 "cross rank 1 "
                 "(hostnames give 0), cross size 3 (hostnames give 1)") != std::string::npos);
  LaunchEnv mpi = Detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  REQUIRE(CompareWithTopology(mpi, 0, 2, 0, 1).empty());  // says nothing, so nothing differs
}
