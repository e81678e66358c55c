// The tcp backend's algorithms over Links (transfer.h), one function per collective. Internal
// to collectives/tcp; TcpCommunicator validates arguments and calls these.
//
// Every function is collective over the links' members, REQUIRES size() >= 2, and returns
// what Links::Run returns. Pieces are at most options.piece_bytes, and at least
// options.pieces_per_block per block (down to options.min_piece_bytes), whole elements.
#ifndef HORA_COLLECTIVES_TCP_TCP_COLLECTIVES_H_
#define HORA_COLLECTIVES_TCP_TCP_COLLECTIVES_H_

#include <cstddef>
#include <vector>

#include "collectives/tcp/tcp_options.h"
#include "collectives/tcp/transfer.h"
#include "common/reduce.h"
#include "common/types.h"

namespace hora {

// Ring allreduce in place: reduce-scatter then allgather, every piece forwarded as soon as it
// is reduced. post (may be null) scales each element once, on the member that finishes its
// reduction, before the allgather carries it. scratch: channels x piece bytes.
Status RingAllreduce(Links& links, const TcpOptions& options, char* buf, size_t count,
                     DataType dtype, ReduceOp op, const Postscale* post,
                     std::vector<char>* scratch);

// Recursive doubling in place (members beyond the largest power of two fold into a partner
// first and get the result from it last). scratch: the buffer's size.
Status DoublingAllreduce(Links& links, const TcpOptions& options, char* buf, size_t count,
                         DataType dtype, ReduceOp op, const Postscale* post,
                         std::vector<char>* scratch);

// Ring reduce-scatter: out receives counts[rank] elements. work: sum(counts) elements.
Status RingReducescatter(Links& links, const TcpOptions& options, const char* in, char* out,
                         const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                         std::vector<char>* work);

// Ring allgather of uneven contributions.
Status RingAllgatherv(Links& links, const TcpOptions& options, const char* in, char* out,
                      const std::vector<size_t>& bytes_per_rank);

// Pipelined chain from root: each member forwards a piece as soon as it has it.
Status ChainBroadcast(Links& links, const TcpOptions& options, char* buf, size_t bytes, int root);

// Every pair at once, each direction striped over the pair's channels.
Status PairwiseAlltoallv(Links& links, const TcpOptions& options, const char* in,
                         const std::vector<size_t>& send_bytes, char* out,
                         const std::vector<size_t>& recv_bytes);

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_TCP_COLLECTIVES_H_
