// Who a member of the board over messages talks to (runtime/steady_net_routes.h), and which
// sets the board takes (NetSteadyBoard::Refusal). Pure functions of the members' hostnames.
#include "runtime/steady_net_routes.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/steady_net_board.h"

namespace hora {
namespace {

using V = std::vector<int>;

std::vector<std::string> Hosts(int hosts, int per_host) {
  std::vector<std::string> names;
  for (int m = 0; m < hosts * per_host; ++m) names.push_back("h" + std::to_string(m / per_host));
  return names;
}

TEST_CASE("steady routes: two levels through each host's lowest member", "[steady]") {
  // Hosts a: {0, 3}, b: {1, 2}, c: {4}; members interleaved on purpose.
  const std::vector<std::string> names = {"a", "b", "b", "a", "c"};
  const SteadyRoutes zero(0, names, 5);
  CHECK(zero.two_level());
  CHECK(zero.leader());
  CHECK(zero.hosts() == 3);
  CHECK(zero.locals() == V{3});
  CHECK(zero.leaders() == V{1, 4});
  CHECK(zero.host_members() == V{0, 3});
  CHECK(zero.own_targets().empty());  // a leader relays its own messages with its host's
  CHECK(zero.peers() == V{1, 3, 4});
  const SteadyRoutes two(2, names, 5);
  CHECK_FALSE(two.leader());
  CHECK(two.my_leader() == 1);
  CHECK(two.own_targets() == V{1});
  CHECK(two.peers() == V{1});
  CHECK(two.locals().empty());
  CHECK(two.leaders().empty());
  const SteadyRoutes four(4, names, 5);  // alone on its host: a leader without members
  CHECK(four.leader());
  CHECK(four.locals().empty());
  CHECK(four.leaders() == V{0, 1});
  CHECK(four.peers() == V{0, 1});
  // Every peer relation is mutual (the mailbox connects both ends or neither).
  for (int a = 0; a < 5; ++a) {
    const SteadyRoutes routes(a, names, 5);
    for (int b : routes.peers()) {
      const V back = SteadyRoutes(b, names, 5).peers();
      CHECK(std::find(back.begin(), back.end(), a) != back.end());
    }
  }
}

TEST_CASE("steady routes: flat with a member per host, on one host, or without hostnames",
          "[steady]") {
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"a", "b", "c"}, std::vector<std::string>{"a", "a", "a"},
        std::vector<std::string>{}}) {
    const SteadyRoutes one(1, names, 3);
    CHECK_FALSE(one.two_level());
    CHECK(one.own_targets() == V{0, 2});
    CHECK(one.peers() == V{0, 2});
  }
}

TEST_CASE("steady board over messages: the sets it takes, and why not", "[steady]") {
  CHECK(NetSteadyBoard::Refusal(64, Hosts(64, 1)).empty());
  CHECK(NetSteadyBoard::Refusal(65, Hosts(65, 1)) ==
        "65 members on 65 host(s) agree flat, at most 64");
  CHECK(NetSteadyBoard::Refusal(65, Hosts(1, 65)) ==
        "65 members on 1 host(s) agree flat, at most 64");
  CHECK(NetSteadyBoard::Refusal(1024, Hosts(128, 8)).empty());
  CHECK(NetSteadyBoard::Refusal(1040, Hosts(130, 8)) == "1040 members, at most 1024");
  CHECK(NetSteadyBoard::Refusal(258, Hosts(129, 2)) == "129 hosts, at most 128");
}

}  // namespace
}  // namespace hora
