// The collective battery on Gloo (gloo_test).
#include "tests/collectives/battery_backend.h"

namespace hora {
namespace testing {

const BatteryBackend& TheBattery() {
  static const BatteryBackend backend{"gloo", CreateGlooRank};
  return backend;
}

}  // namespace testing
}  // namespace hora
