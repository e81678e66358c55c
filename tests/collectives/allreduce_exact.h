// The allreduce check every backend's tests share: every dtype and op, small integer values
// (dtype_values.h) so that results are exact, compared byte for byte with the reference, with
// a guard byte past the end of the buffer.
#ifndef HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_
#define HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/rank_threads.h"

namespace hora {
namespace testing {

// Inside a RankBody: allreduces `count` elements of every dtype with every op, for each count
// of `counts`; "" or the first failure.
inline std::string AllreduceEveryDtypeAndOp(Communicator& comm, const std::vector<size_t>& counts) {
  for (size_t count : counts) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        const size_t bytes = count * DataTypeSize(t);
        std::vector<uint8_t> buf(bytes + 1), want(bytes + 1);
        FillInput(t, op, comm.rank(), buf.data(), count);
        FillExpected(t, op, comm.size(), want.data(), count);
        buf[bytes] = want[bytes] = 0xA5;  // guard byte: nothing written past the end
        RANK_OK(comm.Allreduce(count ? buf.data() : nullptr, count, t, op));
        RANK_EXPECT(
            CompareBytes(buf.data(), want.data(), bytes + 1, Label("allreduce", t, op, count)));
      }
    }
  }
  return "";
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_
