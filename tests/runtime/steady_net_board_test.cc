// The board over messages (runtime/steady_net_board.h), its members in one thread over real
// TCP mailboxes: instances that are not Eager enter every member's log in the order member 0
// decided them, in groups. What member 0 decides waits for its runner to ask (Pull), or, if
// it has not run its last group, for that (Ran), and then goes out as one group; every member
// sees the group whole, flat or through the host leaders.
#include "runtime/steady_net_board.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/local_config.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace {

using Outcome = SteadyBoard::Outcome;

std::vector<std::unique_ptr<NetSteadyBoard>> OpenBoards(const std::vector<std::string>& hosts,
                                                        MemoryStore* store) {
  const int size = static_cast<int>(hosts.size());
  std::vector<std::unique_ptr<Mailbox>> boxes(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int m = 0; m < size; ++m) {
    threads.emplace_back([&, m] {
      const SteadyRoutes routes(m, hosts, size);
      auto box = CreateMailbox(LocalConfig(m, size, store, "board/"), routes.peers());
      if (box.ok()) {
        boxes[m] = std::move(box.value());
      } else {
        errors[m] = box.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::unique_ptr<NetSteadyBoard>> boards;
  for (int m = 0; m < size; ++m) {
    INFO(errors[m]);
    REQUIRE(boxes[m] != nullptr);
    boards.push_back(std::make_unique<NetSteadyBoard>(std::move(boxes[m]), true, hosts));
  }
  return boards;
}

// Reads every member's messages (Bell reads what arrived) until `done` holds, at most 10 s.
bool Until(const std::vector<std::unique_ptr<NetSteadyBoard>>& boards,
           const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& b : boards) (void)b->Bell();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

struct Slot {
  uint32_t e = 0;
  bool more = false;
};

bool Logged(const NetSteadyBoard& board, uint64_t index, Slot* slot) {
  return board.LogAt(index, &slot->e, nullptr, &slot->more);
}

TEST_CASE("steady board over messages: member 0 orders what it decided meanwhile as one group",
          "[steady]") {
  // Flat (a member per host), and two levels (member 3 reaches the others through its
  // leader, member 2; member 1 is member 0's local).
  const auto hosts = GENERATE(std::vector<std::string>{"a", "b", "c"},
                              std::vector<std::string>{"a", "a", "b", "b"});
  INFO("hosts " << hosts.size());
  MemoryStore store;
  auto boards = OpenBoards(hosts, &store);
  const int size = static_cast<int>(boards.size());
  auto everyone_logged = [&](uint64_t index) {
    return [&boards, index] {
      Slot s;
      for (const auto& b : boards) {
        if (!Logged(*b, index, &s)) return false;
      }
      return true;
    };
  };

  // Instance 1 of entry 0: decided, held until member 0's runner asks, then a group of one.
  for (int m = size - 1; m >= 0; --m) (void)boards[m]->Offer(0, 1);
  REQUIRE(Until(boards, [&] { return boards[0]->Pullable(); }));
  Slot none;
  CHECK_FALSE(Logged(*boards[0], 0, &none));
  REQUIRE(boards[0]->Pull());
  CHECK_FALSE(boards[0]->Pullable());
  REQUIRE(Until(boards, everyone_logged(0)));
  for (int m = 0; m < size; ++m) {
    Slot s;
    REQUIRE(Logged(*boards[m], 0, &s));
    CHECK(s.e == 0);
    CHECK_FALSE(s.more);
  }

  // Entries 1 and 2, decided by member 0's offers while it has not run slot 0: held.
  for (int m = size - 1; m > 0; --m) {
    (void)boards[m]->Offer(1, 1);
    (void)boards[m]->Offer(2, 1);
  }
  REQUIRE(Until(boards, [&] { return boards[0]->Missing(2, 1) == std::vector<int>{0}; }));
  CHECK(boards[0]->Offer(1, 1) == Outcome::kFast);
  CHECK(boards[0]->Offer(2, 1) == Outcome::kFast);
  CHECK_FALSE(boards[0]->Pullable());  // its group is still open
  CHECK_FALSE(boards[0]->Pull());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // an ORDER would be here
  for (const auto& b : boards) (void)b->Bell();
  for (int m = 0; m < size; ++m) {
    Slot s;
    CHECK_FALSE(Logged(*boards[m], 1, &s));
  }

  // Member 0 ran slot 0: both go out as one group, whole on every member.
  boards[0]->Ran(1);
  REQUIRE(Until(boards, everyone_logged(2)));
  for (int m = 0; m < size; ++m) {
    INFO("member " << m);
    Slot first, second;
    REQUIRE(Logged(*boards[m], 1, &first));
    REQUIRE(Logged(*boards[m], 2, &second));
    CHECK(first.e == 1);
    CHECK(first.more);
    CHECK(second.e == 2);
    CHECK_FALSE(second.more);
    CHECK(boards[m]->State(1, 1, 1) == Outcome::kFast);
    CHECK(boards[m]->State(2, 1, 1) == Outcome::kFast);
  }

  // Nothing held any more, and that group ran: the next instance goes out at the next Pull.
  boards[0]->Ran(3);
  CHECK_FALSE(boards[0]->Pull());
  for (int m = size - 1; m >= 0; --m) (void)boards[m]->Offer(0, 2);
  REQUIRE(Until(boards, [&] { return boards[0]->Pull(); }));
  REQUIRE(Until(boards, everyone_logged(3)));
  Slot s;
  REQUIRE(Logged(*boards[size - 1], 3, &s));
  CHECK(s.e == 0);
  CHECK_FALSE(s.more);
}

}  // namespace
}  // namespace hora
