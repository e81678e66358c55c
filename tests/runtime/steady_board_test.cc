// The steady path's readiness board (runtime/steady_shm_board.h), its members as threads over one
// zeroed buffer: each instance has one outcome every member sees, the log holds the fast
// instances in decision order, and a wake-up goes only to the threads that must act on it
// (an append wakes the other members' helpers, or their driver when they have none; never a
// sleeper with nothing to do).
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/steady_shm_board.h"

namespace hora {
namespace {

using Outcome = SteadyBoard::Outcome;
using Role = SteadyBoard::Role;

struct Memory {
  Memory() : bytes(MostBytes() / sizeof(uint64_t) + 1, 0) {}
  static size_t MostBytes() {
    size_t most = 0;
    for (int m = 1; m <= ShmSteadyBoard::kMaxMembers; ++m) {
      most = std::max(most, ShmSteadyBoard::BytesNeeded(m));
    }
    return most;
  }
  void* data() { return bytes.data(); }
  std::vector<uint64_t> bytes;  // 8-byte aligned and zeroed
};

// The scheduler state of thread `tid` of this process ('S': sleeping), or 0.
char ThreadState(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? 0 : line[paren + 2];
}

// A thread of one member sleeping on the board as `role` (up to 60 s) until woken.
class Sleeper {
 public:
  Sleeper(ShmSteadyBoard* board, Role role, bool lazy = false) : board_(board), role_(role) {
    const uint32_t seen = board->Bell();
    thread_ = std::thread([this, seen, lazy] {
      tid_.store(static_cast<pid_t>(syscall(SYS_gettid)));
      woken_.store(board_->Sleep(seen, 60 * 1000 * 1000, role_, lazy) ? 1 : 2);
    });
    // Asleep: counted as a sleeper and blocked (in the futex: Sleep blocks nowhere else).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(board->sleeping(role) > 0 && tid_.load() != 0 && ThreadState(tid_.load()) == 'S')) {
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~Sleeper() {
    if (thread_.joinable()) thread_.join();
  }
  // 1 once woken, 2 once timed out, 0 while asleep.
  int woken() const { return woken_.load(); }
  int Join() {
    thread_.join();
    return woken_.load();
  }

 private:
  ShmSteadyBoard* const board_;
  const Role role_;
  std::atomic<pid_t> tid_{0};
  std::atomic<int> woken_{0};
  std::thread thread_;
};

// Gives a wrongly woken sleeper time to show it (woken() would turn 1).
void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

TEST_CASE("steady board: every member sees one outcome per instance", "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 2), b(memory.data(), 1, 2);
  uint32_t e = 9;
  int last = -1;

  REQUIRE(a.Offer(3, 1) == Outcome::kPending);
  REQUIRE(a.State(3, 1, 0) == Outcome::kPending);
  REQUIRE_FALSE(a.LogAt(0, &e));
  REQUIRE(b.Offer(3, 1) == Outcome::kFast);
  REQUIRE(a.State(3, 1, 0) == Outcome::kFast);
  REQUIRE(b.Refuse(3, 1) == Outcome::kFast);  // too late to refuse
  REQUIRE(a.LogAt(0, &e, &last));
  CHECK(e == 3);
  CHECK(last == 1);

  // Instance 2: refused by one member, slow for both, whatever order they come in.
  REQUIRE(b.Refuse(3, 2) == Outcome::kSlow);
  REQUIRE(a.Offer(3, 2) == Outcome::kSlow);
  REQUIRE(a.State(3, 2, 1) == Outcome::kSlow);
  // Instance 3 decided without member 0's offer: its late offer of instance 3 is slow too,
  // and so is a state asked about an instance the word has passed.
  REQUIRE(a.Offer(3, 3) == Outcome::kPending);
  REQUIRE(a.Refuse(3, 3) == Outcome::kSlow);  // member 0 withdraws (patience)
  REQUIRE(b.Offer(3, 3) == Outcome::kSlow);
  REQUIRE(b.Offer(3, 4) == Outcome::kPending);
  REQUIRE(a.State(3, 3, 1) == Outcome::kSlow);
  REQUIRE_FALSE(a.LogAt(1, &e));
  REQUIRE(a.Offer(3, 4) == Outcome::kFast);
  REQUIRE(b.LogAt(1, &e, &last));
  CHECK(e == 3);
  CHECK(last == 0);

  REQUIRE_FALSE(b.joined());
  a.SetJoined();
  REQUIRE(b.joined());
}

TEST_CASE("steady board: a fast instance passed by a quicker member is still fast", "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 2), b(memory.data(), 1, 2);
  REQUIRE(a.Offer(7, 1) == Outcome::kPending);
  REQUIRE(b.Offer(7, 1) == Outcome::kFast);
  // b runs instance 1 (an Eager one needs nothing from a) and offers instance 2 before a has
  // read the log: the word moves on, but a's instance 1 is fast, and withdrawing it is too late.
  REQUIRE(b.Offer(7, 2) == Outcome::kPending);
  CHECK(a.State(7, 1, 0) == Outcome::kFast);
  CHECK(a.Withdraw(7, 1, 0) == Outcome::kFast);
  CHECK(b.State(7, 2, 1) == Outcome::kPending);  // the withdrawal touched nothing
  // Once a ran log slot 0, instance 1 is no longer anybody's business; instance 2 goes on.
  REQUIRE(a.Offer(7, 2) == Outcome::kFast);
  uint32_t e = 0;
  REQUIRE(b.LogAt(1, &e));
  CHECK(e == 7);
  // A withdrawal of a pending instance makes it slow for both.
  REQUIRE(a.Offer(7, 3) == Outcome::kPending);
  CHECK(a.Withdraw(7, 3, 2) == Outcome::kSlow);
  CHECK(b.Offer(7, 3) == Outcome::kSlow);
  CHECK(b.State(7, 3, 2) == Outcome::kSlow);
}

TEST_CASE("steady board: eager data is read back only for its own instance", "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 3), c(memory.data(), 2, 3);
  REQUIRE(a.Eager(0, ShmSteadyBoard::kMaxEagerBytes));
  REQUIRE_FALSE(a.Eager(0, ShmSteadyBoard::kMaxEagerBytes + 1));
  REQUIRE_FALSE(a.Eager(ShmSteadyBoard::kEagerEntries, 4));
  REQUIRE_FALSE(a.Eager(0, 0));
  const float one[3] = {1.5f, -2.0f, 3.25f};
  const float three[3] = {7.0f, 8.0f, 9.0f};
  float got[3] = {0, 0, 0};
  CHECK_FALSE(a.GetEager(4, 1, 2, got, sizeof(got)));  // never written
  c.PutEager(4, 1, one, sizeof(one));
  REQUIRE(a.GetEager(4, 1, 2, got, sizeof(got)));
  CHECK(std::memcmp(got, one, sizeof(one)) == 0);
  CHECK_FALSE(a.GetEager(4, 1, 0, got, sizeof(got)));  // member 0 wrote nothing
  c.PutEager(4, 2, three, sizeof(three));  // the other parity: instance 1 is still there
  REQUIRE(a.GetEager(4, 1, 2, got, sizeof(got)));
  CHECK(std::memcmp(got, one, sizeof(one)) == 0);
  c.PutEager(4, 3, three, sizeof(three));  // instance 3 overwrote instance 1's slot
  CHECK_FALSE(a.GetEager(4, 1, 2, got, sizeof(got)));
  REQUIRE(a.GetEager(4, 3, 2, got, sizeof(got)));
  CHECK(std::memcmp(got, three, sizeof(three)) == 0);
}

TEST_CASE("steady board: eager slots hold 4 KiB up to 4 members, the board stays near 2 MiB",
          "[steady]") {
  for (int m = 1; m <= ShmSteadyBoard::kMaxMembers; ++m) {
    INFO("members " << m);
    CHECK(ShmSteadyBoard::BytesNeeded(m) <= (size_t{2176} << 10));
    CHECK(ShmSteadyBoard::EagerBytes(m) >= 240);
    if (m <= 4) CHECK(ShmSteadyBoard::EagerBytes(m) == ShmSteadyBoard::kMaxEagerBytes);
    if (m == 8) CHECK(ShmSteadyBoard::EagerBytes(m) >= 2000);
  }
  CHECK(ShmSteadyBoard::EagerBytes(ShmSteadyBoard::kMaxMembers) < ShmSteadyBoard::kMaxEagerBytes);
}

TEST_CASE("steady board: every member's eager slots of every entry are disjoint", "[steady]") {
  for (int members : {2, 8, 9, ShmSteadyBoard::kMaxMembers}) {
    INFO("members " << members);
    Memory memory;
    std::vector<std::unique_ptr<ShmSteadyBoard>> boards;
    for (int m = 0; m < members; ++m) {
      boards.push_back(std::make_unique<ShmSteadyBoard>(memory.data(), m, members));
    }
    const size_t bytes = boards[0]->EagerBytes(members);
    std::vector<uint8_t> data(bytes), got(bytes);
    // Member m writes byte value (e * 7 + m * 3 + n) everywhere in slot (e, n) of instance
    // n = 1, 2; any overlap would change some other slot's bytes.
    auto value = [](uint32_t e, int m, uint32_t n) {
      return static_cast<uint8_t>(e * 7 + m * 3 + n);
    };
    for (uint32_t e = 0; e < ShmSteadyBoard::kEagerEntries; ++e) {
      for (int m = 0; m < members; ++m) {
        for (uint32_t n = 1; n <= 2; ++n) {
          std::fill(data.begin(), data.end(), value(e, m, n));
          boards[m]->PutEager(e, n, data.data(), bytes);
        }
      }
    }
    int wrong = 0;
    for (uint32_t e = 0; e < ShmSteadyBoard::kEagerEntries; ++e) {
      for (int m = 0; m < members; ++m) {
        for (uint32_t n = 1; n <= 2; ++n) {
          const bool read = boards[(m + 1) % members]->GetEager(e, n, m, got.data(), bytes);
          if (!read ||
              std::count(got.begin(), got.end(), value(e, m, n)) != static_cast<long>(bytes)) {
            ++wrong;
          }
        }
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("steady board: an append wakes the other members' drivers, not its own", "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 2), b(memory.data(), 1, 2);
  Sleeper a_driver(&a, Role::kDriver);
  Sleeper b_driver(&b, Role::kDriver);
  REQUIRE(a.Offer(0, 1) == Outcome::kPending);  // a's offer rings the bell for nobody
  Settle();
  CHECK(a_driver.woken() == 0);
  CHECK(b_driver.woken() == 0);
  REQUIRE(b.Offer(0, 1) == Outcome::kFast);
  CHECK(a_driver.Join() == 1);  // it has to run the log
  Settle();
  CHECK(b_driver.woken() == 0);  // its member's offering thread runs the log itself
  b.WakeOwn();
  CHECK(b_driver.Join() == 1);
}

TEST_CASE("steady board: an eager append leaves a lazy driver asleep, any other wakes it",
          "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 2), b(memory.data(), 1, 2);
  {
    Sleeper lazy(&a, Role::kDriver, /*lazy=*/true);
    REQUIRE(a.Offer(0, 1, /*eager=*/true) == Outcome::kPending);
    REQUIRE(b.Offer(0, 1, /*eager=*/true) == Outcome::kFast);
    Settle();
    CHECK(lazy.woken() == 0);  // its own thread runs the instance, or it looks after its sleep
    a.WakeOwn();
    CHECK(lazy.Join() == 1);
  }
  {
    Sleeper lazy(&a, Role::kDriver, /*lazy=*/true);
    REQUIRE(a.Offer(1, 1) == Outcome::kPending);
    REQUIRE(b.Offer(1, 1) == Outcome::kFast);  // not eager: the peers need this member's part
    CHECK(lazy.Join() == 1);
  }
  {
    Sleeper driver(&a, Role::kDriver);  // not lazy: woken by an eager append too
    REQUIRE(a.Offer(0, 2, true) == Outcome::kPending);
    REQUIRE(b.Offer(0, 2, true) == Outcome::kFast);
    CHECK(driver.Join() == 1);
  }
  a.EnterHelp();
  {
    Sleeper helper(&a, Role::kHelper, /*lazy=*/true);  // lazy means nothing to a helper
    REQUIRE(a.Offer(0, 3, true) == Outcome::kPending);
    REQUIRE(b.Offer(0, 3, true) == Outcome::kFast);
    CHECK(helper.Join() == 1);
  }
  a.LeaveHelp();
}

TEST_CASE("steady board: a member with a helper gets the helper woken, not its driver",
          "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 2), b(memory.data(), 1, 2);
  a.EnterHelp();
  REQUIRE(a.helpers() == 1);
  Sleeper driver(&a, Role::kDriver);
  Sleeper helper(&a, Role::kHelper);
  REQUIRE(a.Offer(5, 1) == Outcome::kPending);
  REQUIRE(b.Offer(5, 1) == Outcome::kFast);
  CHECK(helper.Join() == 1);
  Settle();
  CHECK(driver.woken() == 0);
  // The helper leaves with the log still to run: it hands the log back to its driver.
  a.LeaveHelp();
  REQUIRE(a.helpers() == 0);
  a.WakeOwn();
  CHECK(driver.Join() == 1);
}

TEST_CASE("steady board: a refusal wakes every sleeper; a sleep ends at its timeout", "[steady]") {
  Memory memory;
  ShmSteadyBoard a(memory.data(), 0, 3), b(memory.data(), 1, 3), c(memory.data(), 2, 3);
  b.EnterHelp();
  std::vector<std::unique_ptr<Sleeper>> sleepers;
  for (ShmSteadyBoard* board : {&a, &b, &c}) {
    for (Role role : {Role::kDriver, Role::kHelper}) {
      sleepers.push_back(std::make_unique<Sleeper>(board, role));
    }
  }
  REQUIRE(a.Offer(1, 1) == Outcome::kPending);
  REQUIRE(c.Refuse(1, 1) == Outcome::kSlow);  // a's offering thread must hear of it
  for (auto& s : sleepers) CHECK(s->Join() == 1);
  b.LeaveHelp();

  CHECK_FALSE(a.Sleep(a.Bell(), 20 * 1000, Role::kDriver));       // 20 ms, nothing rings
  CHECK(a.Sleep(a.Bell() - 1, 60 * 1000 * 1000, Role::kDriver));  // the bell moved already
}

}  // namespace
}  // namespace hora
