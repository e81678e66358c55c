// Members of a tcp-backend set as threads of one process, on loopback (tcp_test,
// tcp_pieces_test, tcp_fault_test).
#ifndef HORA_TESTS_COLLECTIVES_TCP_RANKS_H_
#define HORA_TESTS_COLLECTIVES_TCP_RANKS_H_

#include <string>

#include "collectives/tcp/tcp_communicator.h"
#include "tests/collectives/rank_threads.h"

namespace hora {
namespace testing {

// Small pieces, three channels and the ring from 2 elements on: every striped, pipelined and
// ring-wrapping path runs on the battery's small data. Blocks under 3 x 4096 bytes are cut in
// three (at least 256 bytes a piece), so streams of one collective differ in piece size.
inline TcpOptions TinyPieces() {
  TcpOptions o;
  o.channels = 3;
  o.piece_bytes = 4096;
  o.pieces_per_block = 3;
  o.min_piece_bytes = 256;
  o.small_allreduce_bytes = 0;
  o.pair_doubling_bytes = 0;  // the ring at two members too
  o.inflight_bytes = 1000;    // paced in parts of a piece
  o.spin_us = 0;              // every stall sleeps in poll()
  return o;
}

inline BackendConfig TcpTestConfig(int rank, int size, KvStore* store,
                                   std::chrono::milliseconds timeout) {
  BackendConfig c;
  c.rank = rank;
  for (int r = 0; r < size; ++r) {
    c.global_ranks.push_back(r);
    c.hostnames.push_back("host" + std::to_string(r));
  }
  c.store = store;
  c.key_prefix = "tcp/test/";
  c.bind_address = "127.0.0.1";
  c.timeout = timeout;
  return c;
}

inline CommFactory TcpFactory(const TcpOptions& options) {
  return [options](int rank, int size, KvStore* store, std::chrono::milliseconds timeout) {
    return CreateTcpCommunicator(TcpTestConfig(rank, size, store, timeout), options);
  };
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_TCP_RANKS_H_
