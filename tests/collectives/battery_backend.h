// Which backend the collective battery (collective_battery_test.cc) runs on: each test target
// that compiles the battery links one definition of TheBattery() (gloo_battery.cc,
// tcp_battery.cc).
#ifndef HORA_TESTS_COLLECTIVES_BATTERY_BACKEND_H_
#define HORA_TESTS_COLLECTIVES_BATTERY_BACKEND_H_

#include <string>
#include <vector>

#include "tests/collectives/rank_threads.h"

namespace hora {
namespace testing {

struct BatteryBackend {
  std::string name;  // what Communicator::name() returns
  CommFactory create;
};

const BatteryBackend& TheBattery();

inline std::vector<std::string> RunBattery(int size, const RankBody& body) {
  return RunRanksWith(size, TheBattery().create, body);
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_BATTERY_BACKEND_H_
