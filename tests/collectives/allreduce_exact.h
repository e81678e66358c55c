// The checks every backend's tests share. Allreduce: every dtype and op, small integer values
// (dtype_values.h) so that results are exact, compared byte for byte with the reference, with
// a guard byte past the end of the buffer. Allgatherv: into a separate output and in place.
#ifndef HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_
#define HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_

#include <cstdint>
#include <cstring>
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

// Inside a RankBody: an allgatherv of rank r's counts[r] bytes (r * 17 + i), into a separate
// output, then in place (communicator.h: this rank's part already at its offset of the
// output); "" or the first failure.
inline std::string AllgathervBothWays(Communicator& comm, const std::vector<size_t>& counts) {
  size_t total = 0, offset = 0;
  std::vector<uint8_t> want;
  for (int r = 0; r < comm.size(); ++r) {
    for (size_t i = 0; i < counts[r]; ++i) want.push_back(static_cast<uint8_t>(r * 17 + i));
    if (r < comm.rank()) offset += counts[r];
    total += counts[r];
  }
  std::vector<uint8_t> in(counts[comm.rank()]);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(comm.rank() * 17 + i);
  std::vector<uint8_t> out(total, 0xEE);
  RANK_OK(comm.Allgatherv(in.data(), out.data(), counts));
  RANK_EXPECT(
      CompareBytes(out.data(), want.data(), total, "allgatherv total " + std::to_string(total)));
  std::vector<uint8_t> inplace(total, 0xEE);
  // (a rank with count 0 has in.data() == nullptr: memcpy of a null pointer is UB)
  if (!in.empty()) std::memcpy(inplace.data() + offset, in.data(), in.size());
  RANK_OK(comm.Allgatherv(inplace.data() + offset, inplace.data(), counts));
  RANK_EXPECT(CompareBytes(inplace.data(), want.data(), total,
                           "in-place allgatherv total " + std::to_string(total)));
  return "";
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_ALLREDUCE_EXACT_H_
