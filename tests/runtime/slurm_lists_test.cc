#include "runtime/slurm_lists.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace hora;

namespace {

std::vector<std::string> Hosts(const std::string& list) {
  auto h = ExpandSlurmNodelist("SLURM_STEP_NODELIST", list);
  INFO(list << ": " << (h.ok() ? "" : h.status().message()));
  REQUIRE(h.ok());
  return h.value();
}

std::string NodelistError(const std::string& list) {
  auto h = ExpandSlurmNodelist("SLURM_JOB_NODELIST", list);
  INFO(list);
  REQUIRE_FALSE(h.ok());
  REQUIRE(h.status().code() == Code::kInvalidArgument);
  REQUIRE(h.status().message().find("SLURM_JOB_NODELIST='" + list + "'") != std::string::npos);
  return h.status().message();
}

std::vector<int> Tasks(const std::string& list) {
  auto t = ExpandSlurmTasksPerNode("SLURM_STEP_TASKS_PER_NODE", list);
  INFO(list << ": " << (t.ok() ? "" : t.status().message()));
  REQUIRE(t.ok());
  return t.value();
}

}  // namespace

TEST_CASE("node lists: plain names, ranges, lists in brackets, padding") {
  using V = std::vector<std::string>;
  REQUIRE(Hosts("node1") == V{"node1"});
  REQUIRE(Hosts("a,b,c") == V{"a", "b", "c"});
  REQUIRE(Hosts("node[1-3]") == V{"node1", "node2", "node3"});
  REQUIRE(Hosts("node[01-04,07]") == V{"node01", "node02", "node03", "node04", "node07"});
  REQUIRE(Hosts("node[01-04,07],gpu-a[1-2]") ==
          V{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"});
  REQUIRE(Hosts("n[08-11]") == V{"n08", "n09", "n10", "n11"});
  REQUIRE(Hosts("n[8-10]") == V{"n8", "n9", "n10"});
  REQUIRE(Hosts("n[007]") == V{"n007"});
  REQUIRE(Hosts("n[3,1]") == V{"n3", "n1"});  // order as written
  REQUIRE(Hosts("login,c[1-2].cluster") == V{"login", "c1.cluster", "c2.cluster"});
  REQUIRE(Hosts("10.0.0.[2-3]") == V{"10.0.0.2", "10.0.0.3"});
}

TEST_CASE("node lists: several bracket groups in one name expand as a product") {
  using V = std::vector<std::string>;
  REQUIRE(Hosts("r[1-2]n[01-02]") == V{"r1n01", "r1n02", "r2n01", "r2n02"});
  REQUIRE(Hosts("rack[1,3]-gpu[0-1],x") ==
          V{"rack1-gpu0", "rack1-gpu1", "rack3-gpu0", "rack3-gpu1", "x"});
  REQUIRE(Hosts("big[0-99999]").size() == 100000);
  REQUIRE(Hosts("big[0-99999]").back() == "big99999");
}

TEST_CASE("node lists: malformed values name the variable, the value and the fault") {
  REQUIRE(NodelistError("").find("empty") != std::string::npos);
  REQUIRE(NodelistError("node[").find("unclosed '['") != std::string::npos);
  REQUIRE(NodelistError("node[1-2").find("unclosed '['") != std::string::npos);
  REQUIRE(NodelistError("node]1").find("']' without '['") != std::string::npos);
  REQUIRE(NodelistError("node[[1]]").find("nested") != std::string::npos);
  REQUIRE(NodelistError("node[]").find("empty '[]'") != std::string::npos);
  REQUIRE(NodelistError("node[3-1]").find("ends before it starts") != std::string::npos);
  REQUIRE(NodelistError("node[a-b]").find("'a-b'") != std::string::npos);
  REQUIRE(NodelistError("node[1-]").find("not a number or a range") != std::string::npos);
  REQUIRE(NodelistError("node[1,]").find("not a number or a range") != std::string::npos);
  REQUIRE(NodelistError("node[1--3]").find("not a number or a range") != std::string::npos);
  REQUIRE(NodelistError("a,,b").find("an empty name") != std::string::npos);
  REQUIRE(NodelistError("a,").find("an empty name") != std::string::npos);
  REQUIRE(NodelistError("a b").find("a space") != std::string::npos);
  REQUIRE(NodelistError("x[0-999][0-9999]").find("more than") != std::string::npos);
}

TEST_CASE("tasks per node: counts and repeats") {
  using V = std::vector<int>;
  REQUIRE(Tasks("4") == V{4});
  REQUIRE(Tasks("2(x3),1") == V{2, 2, 2, 1});
  REQUIRE(Tasks("1,3(x2),2") == V{1, 3, 3, 2});
  REQUIRE(Tasks("8(x1)") == V{8});
}

TEST_CASE("tasks per node: malformed values name the variable") {
  for (const std::string bad :
       {"", "x", "2(x)", "2(x3", "2x3", "(x3)", "0", "2(x0)", "2,", "-1", "2(y3)", "2(x3)1"}) {
    auto t = ExpandSlurmTasksPerNode("SLURM_TASKS_PER_NODE", bad);
    INFO(bad);
    REQUIRE_FALSE(t.ok());
    REQUIRE(t.status().message().find("SLURM_TASKS_PER_NODE='" + bad +
                                      "' is not a Slurm tasks-per-node list") != std::string::npos);
  }
}
