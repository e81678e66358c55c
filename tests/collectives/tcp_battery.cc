// The collective battery on the tcp backend: tcp_test with the default options, and
// tcp_pieces_test (TCP_BATTERY_TINY_PIECES) with tcp_ranks.h's TinyPieces().
#include "tests/collectives/battery_backend.h"
#include "tests/collectives/tcp_ranks.h"

namespace hora {
namespace testing {

const BatteryBackend& TheBattery() {
#ifdef TCP_BATTERY_TINY_PIECES
  static const BatteryBackend backend{"tcp", TcpFactory(TinyPieces())};
#else
  static const BatteryBackend backend{"tcp", TcpFactory(TcpOptions())};
#endif
  return backend;
}

}  // namespace testing
}  // namespace hora
