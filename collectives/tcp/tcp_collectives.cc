// The tcp backend's algorithms (tcp_collectives.h).
//
// The ring. Members sit on a ring (right = rank + 1, left = rank - 1) and the buffer is cut
// into one block per member (uneven: the first count % n blocks one element longer). Each
// member sends one stream to its right and receives one from its left:
//   reduce-scatter, steps j = 0 .. n-2: receive block (rank - j - 1), reduce it into the
//     buffer; after the last step block (rank + 1) is reduced over every member;
//   allgather, steps k = 0 .. n-2: receive block (rank - k), final, into the buffer.
// What a member sends at step j + 1 is exactly what it received at step j (and at step 0 its
// own block), so the whole allreduce is one send stream and one receive stream, and the
// send stream's piece i + (pieces of the first block) waits only for receive piece i: piece
// k+1 of a step arrives while piece k is reduced and forwarded, and the steps overlap too.
// Received reduce-scatter pieces land in a per-channel scratch piece and are reduced into the
// buffer (the one copy the reduction needs); allgather pieces land in the buffer directly.
// Every block is finished on one member and copied from there, so every member ends with the
// same bits. Each byte crosses a link 2(n-1)/n times: the bandwidth algorithm.
//
// Recursive doubling (small buffers). With p the largest power of two <= n and r = n - p,
// members 2i and 2i+1 for i < r pair first: the even one sends its buffer and waits; the odd
// one reduces it in and plays member i among p. Then log2 p rounds: exchange the whole
// buffer with the member whose index differs in bit k, reduce. Partners reduce the same two
// values (the ops are commutative, bit for bit), so they stay equal. Last, each odd member of
// the first 2r sends the result to its even partner. log2 p + 2 round trips: latency.
//
// Reduce-scatter and allgatherv are the ring's halves (the reduce-scatter's blocks shifted so
// that member r ends with block r; it reads `in` directly and keeps partial sums in `work`).
// Broadcast is a chain from the root, each member forwarding a piece as soon as it has it.
// Alltoallv runs every pair's two directions at once.
//
// Pacing (TcpOptions::inflight_bytes): the exchanges of recursive doubling, each pair of an
// alltoallv, the allreduce's ring and the reduce-scatter and allgatherv rings whose blocks
// are equal (within one element) send at most that many bytes beyond what they have
// received. Uneven rings are not paced: a member whose own block is large would wait for
// bytes that depend on its own (transfer.h SendStream::pace).
#include "collectives/tcp/tcp_collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hora {
namespace {

int Mod(int a, int n) { return ((a % n) + n) % n; }

// The piece for a stream whose block (the unit a step forwards) is `block` bytes: at most
// piece_bytes, at least pieces_per_block of them per block down to min_piece_bytes, whole
// elements. Both ends compute it from sizes they share, so they cut alike.
size_t PieceBytes(const TcpOptions& o, size_t esize, size_t block) {
  const size_t split = std::max(o.min_piece_bytes, block / o.pieces_per_block);
  return std::max<size_t>(esize, std::min(o.piece_bytes, split) / esize * esize);
}

SendStream SendTo(int peer, const Links& links) {
  SendStream s;
  s.peer = peer;
  s.lanes = links.channels();
  return s;
}

RecvStream RecvFrom(int peer, const Links& links) {
  RecvStream r;
  r.peer = peer;
  r.lanes = links.channels();
  return r;
}

// Byte offsets of `sizes` laid end to end.
std::vector<size_t> Offsets(const std::vector<size_t>& sizes) {
  std::vector<size_t> off(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) off[i + 1] = off[i] + sizes[i];
  return off;
}

// Whether the blocks differ by at most `slack` bytes (a ring that may be paced).
bool Balanced(const std::vector<size_t>& bytes, size_t slack) {
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  return lo == bytes.end() || *hi - *lo <= slack;
}

// `to` sends no more than options.inflight_bytes beyond what `from` has received, scaled to
// its pieces of `piece` bytes (as many pieces in flight as with piece_bytes).
void Pace(SendStream* to, const RecvStream* from, const TcpOptions& options, size_t piece) {
  if (options.inflight_bytes == 0) return;
  to->pace = from;
  to->window =
      std::max<size_t>(1, static_cast<size_t>(static_cast<double>(options.inflight_bytes) * piece /
                                              static_cast<double>(options.piece_bytes)));
}

Status Exchange(Links& links, const TcpOptions& options, int peer, char* send, char* recv,
                size_t bytes, size_t piece, const std::string& what) {
  std::vector<SendStream> sends;
  std::vector<RecvStream> recvs;
  if (recv != nullptr) {
    recvs.push_back(RecvFrom(peer, links));
    CutPieces(recv, bytes, piece, &recvs.back().pieces);
  }
  if (send != nullptr) {
    sends.push_back(SendTo(peer, links));
    CutPieces(send, bytes, piece, &sends.back().pieces);
    if (recv != nullptr) Pace(&sends.back(), &recvs.back(), options, piece);
  }
  return links.Run(&sends, &recvs, what);
}

}  // namespace

Status RingAllreduce(Links& links, const TcpOptions& options, char* buf, size_t count,
                     DataType dtype, ReduceOp op, const Postscale* post,
                     std::vector<char>* scratch) {
  const int n = links.size(), rank = links.rank();
  const size_t esize = DataTypeSize(dtype);
  std::vector<size_t> bytes(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) {
    bytes[b] = (count / n + (static_cast<size_t>(b) < count % n ? 1 : 0)) * esize;
  }
  const size_t piece = PieceBytes(options, esize, bytes[0]);
  const std::vector<size_t> off = Offsets(bytes);
  scratch->resize(piece * static_cast<size_t>(links.channels()));
  std::vector<RecvStream> recvs(1, RecvFrom(Mod(rank - 1, n), links));
  std::vector<SendStream> sends(1, SendTo(Mod(rank + 1, n), links));
  RecvStream& in = recvs[0];
  SendStream& out = sends[0];
  struct Meta {
    char* dst;
    size_t bytes;
    int kind;  // 0: arrived in place; 1: reduce from scratch; 2: reduce, then postscale
  };
  std::vector<Meta> meta;
  CutPieces(buf + off[rank], bytes[rank], piece, &out.pieces);
  out.lag = out.pieces.size();
  for (int j = 0; j < 2 * n - 2; ++j) {
    const int b = j < n - 1 ? Mod(rank - j - 1, n) : Mod(rank - (j - n + 1), n);
    const int kind = j < n - 2 ? 1 : j == n - 2 ? (post != nullptr ? 2 : 1) : 0;
    std::vector<Piece> cut;
    CutPieces(buf + off[b], bytes[b], piece, &cut);
    for (const Piece& p : cut) {
      const size_t f = in.pieces.size();
      const size_t lane = f % static_cast<size_t>(links.channels());
      in.pieces.push_back({kind == 0 ? p.data : scratch->data() + lane * piece, p.bytes});
      meta.push_back({p.data, p.bytes, kind});
      if (j < 2 * n - 3) out.pieces.push_back(p);
    }
  }
  in.on_piece = [&](size_t i) {
    const Meta& m = meta[i];
    if (m.kind == 0) return;
    ReduceInto(m.dst, in.pieces[i].data, m.bytes / esize, dtype, op);
    if (m.kind == 2) ScaleInPlace(m.dst, m.bytes / esize, dtype, *post);
  };
  out.after = &in;
  Pace(&out, &in, options, piece);
  return links.Run(&sends, &recvs, "allreduce (ring)");
}

Status DoublingAllreduce(Links& links, const TcpOptions& options, char* buf, size_t count,
                         DataType dtype, ReduceOp op, const Postscale* post,
                         std::vector<char>* scratch) {
  const int n = links.size(), rank = links.rank();
  const size_t esize = DataTypeSize(dtype), bytes = count * esize;
  // Each exchange is reduced after it ends: nothing to overlap, no reason to cut finer.
  const size_t piece = PieceBytes(options, esize, SIZE_MAX);
  scratch->resize(bytes);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const std::string what = "allreduce (recursive doubling)";
  int index = rank - extra;  // among the p; -1: folded into rank + 1
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      HORA_RETURN_IF_ERROR(Exchange(links, options, rank + 1, buf, nullptr, bytes, piece, what));
      index = -1;
    } else {
      HORA_RETURN_IF_ERROR(
          Exchange(links, options, rank - 1, nullptr, scratch->data(), bytes, piece, what));
      ReduceInto(buf, scratch->data(), count, dtype, op);
      index = rank / 2;
    }
  }
  if (index >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int other = index ^ mask;
      const int peer = other < extra ? other * 2 + 1 : other + extra;
      HORA_RETURN_IF_ERROR(
          Exchange(links, options, peer, buf, scratch->data(), bytes, piece, what));
      ReduceInto(buf, scratch->data(), count, dtype, op);
    }
  }
  if (rank < 2 * extra) {
    const bool even = rank % 2 == 0;
    HORA_RETURN_IF_ERROR(Exchange(links, options, even ? rank + 1 : rank - 1, even ? nullptr : buf,
                                  even ? buf : nullptr, bytes, piece, what));
  }
  if (post != nullptr) ScaleInPlace(buf, count, dtype, *post);
  return Status::Ok();
}

Status RingReducescatter(Links& links, const TcpOptions& options, const char* in, char* out,
                         const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                         std::vector<char>* work) {
  const int n = links.size(), rank = links.rank();
  const size_t esize = DataTypeSize(dtype);
  std::vector<size_t> bytes(counts.size());
  for (size_t b = 0; b < counts.size(); ++b) bytes[b] = counts[b] * esize;
  const size_t piece = PieceBytes(options, esize, *std::max_element(bytes.begin(), bytes.end()));
  const std::vector<size_t> off = Offsets(bytes);
  work->resize(off.back());
  std::vector<RecvStream> recvs(1, RecvFrom(Mod(rank - 1, n), links));
  std::vector<SendStream> sends(1, SendTo(Mod(rank + 1, n), links));
  RecvStream& from = recvs[0];
  SendStream& to = sends[0];
  std::vector<const char*> mine;  // by received piece: this member's input to reduce in
  const int first = Mod(rank - 1, n);
  CutPieces(const_cast<char*>(in) + off[first], bytes[first], piece, &to.pieces);
  to.lag = to.pieces.size();
  // In place (out is this member's slice of in): the last step's pieces still need that
  // slice as the input they are reduced with, so they land in work and move to out at the end.
  const bool in_place = out == in + off[rank];
  for (int j = 0; j < n - 1; ++j) {
    const int b = Mod(rank - j - 2, n);
    char* dst = j == n - 2 && !in_place ? out : work->data() + off[b];
    const size_t before = from.pieces.size();
    CutPieces(dst, bytes[b], piece, &from.pieces);
    for (size_t i = before; i < from.pieces.size(); ++i) {
      mine.push_back(in + off[b] + (from.pieces[i].data - dst));
      if (j < n - 2) to.pieces.push_back(from.pieces[i]);
    }
  }
  from.on_piece = [&](size_t i) {
    ReduceInto(from.pieces[i].data, mine[i], from.pieces[i].bytes / esize, dtype, op);
  };
  to.after = &from;
  if (Balanced(bytes, esize)) Pace(&to, &from, options, piece);
  HORA_RETURN_IF_ERROR(links.Run(&sends, &recvs, "reducescatter (ring)"));
  if (in_place && bytes[rank] > 0) std::memcpy(out, work->data() + off[rank], bytes[rank]);
  return Status::Ok();
}

Status RingAllgatherv(Links& links, const TcpOptions& options, const char* in, char* out,
                      const std::vector<size_t>& bytes_per_rank) {
  const int n = links.size(), rank = links.rank();
  const size_t piece =
      PieceBytes(options, 1, *std::max_element(bytes_per_rank.begin(), bytes_per_rank.end()));
  const std::vector<size_t> off = Offsets(bytes_per_rank);
  if (bytes_per_rank[rank] > 0 && in != out + off[rank]) {
    std::memmove(out + off[rank], in, bytes_per_rank[rank]);
  }
  std::vector<RecvStream> recvs(1, RecvFrom(Mod(rank - 1, n), links));
  std::vector<SendStream> sends(1, SendTo(Mod(rank + 1, n), links));
  CutPieces(out + off[rank], bytes_per_rank[rank], piece, &sends[0].pieces);
  sends[0].lag = sends[0].pieces.size();
  for (int j = 0; j < n - 1; ++j) {
    const int b = Mod(rank - j - 1, n);
    const size_t before = recvs[0].pieces.size();
    CutPieces(out + off[b], bytes_per_rank[b], piece, &recvs[0].pieces);
    if (j < n - 2) {
      sends[0].pieces.insert(sends[0].pieces.end(), recvs[0].pieces.begin() + before,
                             recvs[0].pieces.end());
    }
  }
  sends[0].after = &recvs[0];
  if (Balanced(bytes_per_rank, 0)) Pace(&sends[0], &recvs[0], options, piece);
  return links.Run(&sends, &recvs, "allgatherv (ring)");
}

Status ChainBroadcast(Links& links, const TcpOptions& options, char* buf, size_t bytes, int root) {
  const int n = links.size(), rank = links.rank();
  const int pos = Mod(rank - root, n);
  const size_t piece = PieceBytes(options, 1, bytes);
  std::vector<RecvStream> recvs;
  std::vector<SendStream> sends;
  recvs.reserve(1);
  if (pos > 0) {
    recvs.push_back(RecvFrom(Mod(rank - 1, n), links));
    CutPieces(buf, bytes, piece, &recvs[0].pieces);
  }
  if (pos < n - 1) {
    sends.push_back(SendTo(Mod(rank + 1, n), links));
    CutPieces(buf, bytes, piece, &sends[0].pieces);
    if (pos > 0) sends[0].after = &recvs[0];
  }
  return links.Run(&sends, &recvs, "broadcast from member " + std::to_string(root));
}

Status PairwiseAlltoallv(Links& links, const TcpOptions& options, const char* in,
                         const std::vector<size_t>& send_bytes, char* out,
                         const std::vector<size_t>& recv_bytes) {
  const int n = links.size(), rank = links.rank();
  const std::vector<size_t> soff = Offsets(send_bytes), roff = Offsets(recv_bytes);
  if (send_bytes[rank] > 0) std::memcpy(out + roff[rank], in + soff[rank], send_bytes[rank]);
  std::vector<SendStream> sends;
  std::vector<RecvStream> recvs;
  sends.reserve(static_cast<size_t>(n));  // no reallocation: a send points at its pace
  recvs.reserve(static_cast<size_t>(n));
  for (int m = 0; m < n; ++m) {
    if (m == rank) continue;
    // Each direction is cut by its own size, which both of its ends know.
    if (recv_bytes[m] > 0) {
      recvs.push_back(RecvFrom(m, links));
      CutPieces(out + roff[m], recv_bytes[m], PieceBytes(options, 1, recv_bytes[m]),
                &recvs.back().pieces);
    }
    if (send_bytes[m] > 0) {
      const size_t piece = PieceBytes(options, 1, send_bytes[m]);
      sends.push_back(SendTo(m, links));
      CutPieces(const_cast<char*>(in) + soff[m], send_bytes[m], piece, &sends.back().pieces);
      // Each pair is an exchange of its own: its pace depends on nothing else.
      if (recv_bytes[m] > 0) Pace(&sends.back(), &recvs.back(), options, piece);
    }
  }
  return links.Run(&sends, &recvs, "alltoallv");
}

}  // namespace hora
