// The shm collectives, each a sequence of steps (see shm_communicator.cc for the protocol).
//
// Allreduce, small (bytes <= small_bytes), one step: every member stages its whole buffer,
// then reduces all n contributions in rank order into its own buffer. n times the data is
// read per member, but there is one synchronization, and every member computes the same
// sequence of operations on the same bits, so all results are identical.
//
// Allreduce, large: the buffer goes in chunks of half_bytes / 2 (a quarter of the staging
// area: step s uses quarter s mod 4), two steps per chunk.
//   A: each member stages the chunk except its own slice (slices: the chunk cut in n,
//      64-byte aligned), publishes;
//   B: each member reduces its slice into its own buffer, reading the peers' staged slices
//      in place (blocks of 16 KiB, so the destination stays in L1), and stages the result
//      (while it is hot); publishes; stages and publishes the next chunk's A; then copies
//      the peers' result slices into its buffer.
// Per member and byte: one copy in, one pass of reduction reads, one copy out; every slice
// is reduced by one member only, so results are identical everywhere. With four quarters a
// member stages chunk k + 1 while the peers finish their B of chunk k, so neither of its
// waits per chunk comes right after the peers' matching step (software pipelining). So an
// A step is published before the member read the peers' previous B step, which is safe
// because A's quarter is not B's; a collective's last step is always a B step, and Claim's
// rule holds again for the next collective.
//
// Reducescatter: the A half of the above, per step each member stages up to half_bytes / n
// of every other member's slice; each reduces its own. Allgatherv: per step each member
// stages up to half_bytes of its contribution, everyone copies out. Alltoallv: a first step
// exchanges every member's send and receive sizes (so every member checks the whole matrix
// and derives the same number of steps), then per step each member stages up to
// half_bytes / n for every destination.
#include <cstring>
#include <numeric>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "collectives/shm/shm_impl.h"
#include "common/copy.h"
#include "common/reduce.h"

namespace hora {
namespace shm {
namespace {

constexpr size_t kReduceBlockBytes = 16 << 10;
// Collectives of at least this many bytes copy their results out of the segment with
// streaming stores: the destination is far larger than the caches, so skipping the
// read-for-ownership of every line is worth ~20 % of the copy (measured on the bench host),
// and the data would have left the cache before the caller reads it anyway.
constexpr size_t kStreamingBytes = 8 << 20;

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// A slice of `count` elements cut in n parts aligned to 64 bytes: [*lo, *hi) for part r.
void Slice(size_t count, size_t esize, int n, int r, size_t* lo, size_t* hi) {
  const size_t align = std::max<size_t>(1, 64 / esize);
  size_t per = (count + n - 1) / n;
  per = (per + align - 1) / align * align;
  *lo = std::min(count, per * r);
  *hi = std::min(count, *lo + per);
}

// dst op= srcs[0], srcs[1], ... over count elements, block by block; scales each finished
// block by *post when it is not null (while it is in cache) and copies it to copy_to as well
// when that is not null.
void ReduceBlocks(uint8_t* dst, const std::vector<const uint8_t*>& srcs, size_t count,
                  DataType dtype, ReduceOp op, uint8_t* copy_to, const Postscale* post = nullptr) {
  const size_t esize = DataTypeSize(dtype);
  const size_t block = kReduceBlockBytes / esize;
  for (size_t i = 0; i < count; i += block) {
    const size_t m = std::min(block, count - i);
    for (const uint8_t* s : srcs) ReduceInto(dst + i * esize, s + i * esize, m, dtype, op);
    if (post != nullptr) ScaleInPlace(dst + i * esize, m, dtype, *post);
    if (copy_to != nullptr) CopyBytes(copy_to + i * esize, dst + i * esize, m * esize);
  }
}

// The rank-order twin (OfferRankOrder): dst = srcs[0] op srcs[1] op ... block by block, each
// block built in a buffer that stays in L1 (dst may be one of the sources: a block is read
// before it is written), then scaled and copied to dst and copy_to.
void ReduceBlocksInOrder(uint8_t* dst, const std::vector<const uint8_t*>& srcs, size_t count,
                         DataType dtype, ReduceOp op, uint8_t* copy_to, const Postscale* post) {
  const size_t esize = DataTypeSize(dtype);
  const size_t block = kReduceBlockBytes / esize;
  alignas(64) static thread_local uint8_t acc[kReduceBlockBytes];
  for (size_t i = 0; i < count; i += block) {
    const size_t m = std::min(block, count - i);
    CopyBytes(acc, srcs[0] + i * esize, m * esize);
    for (size_t r = 1; r < srcs.size(); ++r) ReduceInto(acc, srcs[r] + i * esize, m, dtype, op);
    if (post != nullptr) ScaleInPlace(acc, m, dtype, *post);
    CopyBytes(dst + i * esize, acc, m * esize);
    if (copy_to != nullptr) CopyBytes(copy_to + i * esize, acc, m * esize);
  }
}

// memcpy, with streaming stores when `streaming` (see kStreamingBytes).
void CopyOut(uint8_t* dst, const uint8_t* src, size_t n, bool streaming) {
#if defined(__SSE2__)
  if (streaming && n >= 4096) {
    while ((reinterpret_cast<uintptr_t>(dst) & 15) != 0) {
      *dst++ = *src++;
      --n;
    }
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    CopyBytes(dst + i, src + i, n - i);
    _mm_sfence();  // streaming stores are weakly ordered: done before anyone is told
    return;
  }
#endif
  (void)streaming;
  CopyBytes(dst, src, n);
}

bool Overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

}  // namespace

Status ShmCommunicator::Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  HORA_RETURN_IF_ERROR(CheckOp(dtype, op, "allreduce"));
  if (count == 0 || n_ == 1) return Status::Ok();  // every member has the same count
  auto* p = static_cast<uint8_t*>(buf);
  if (count * DataTypeSize(dtype) <= tuning_.small_bytes)
    return AllreduceSmall(p, count, dtype, op);
  return AllreduceLarge(p, count, dtype, op);
}

Status ShmCommunicator::AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                                        const Postscale& post) {
  HORA_RETURN_IF_ERROR(CheckOp(dtype, op, "allreduce"));
  auto* p = static_cast<uint8_t*>(buf);
  if (count > 0 && n_ > 1 && count * DataTypeSize(dtype) > tuning_.small_bytes) {
    return AllreduceLarge(p, count, dtype, op, post.identity() ? nullptr : &post);
  }
  HORA_RETURN_IF_ERROR(Allreduce(buf, count, dtype, op));  // small: every member reduces all
  ScaleInPlace(buf, count, dtype, post);
  return Status::Ok();
}

Status ShmCommunicator::AllreduceSmall(uint8_t* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * DataTypeSize(dtype);
  const uint64_t s = ++step_;
  HORA_RETURN_IF_ERROR(Claim(s, "allreduce"));
  CopyBytes(Half(me_, s), buf, bytes);
  Publish(s);
  HORA_RETURN_IF_ERROR(WaitAll(s, "allreduce"));
  if (me_ != 0) CopyBytes(buf, Half(0, s), bytes);
  for (int r = 1; r < n_; ++r) ReduceInto(buf, Half(r, s), count, dtype, op);
  return Status::Ok();
}

Status ShmCommunicator::AllreduceLarge(uint8_t* buf, size_t count, DataType dtype, ReduceOp op,
                                       const Postscale* post) {
  const size_t esize = DataTypeSize(dtype);
  const size_t chunk = tuning_.half_bytes / 2 / esize;  // a quarter (see Quarter)
  const size_t chunks = (count + chunk - 1) / chunk;
  std::vector<const uint8_t*> srcs(n_ - 1);
  std::vector<const uint8_t*> ordered(n_);  // rank order: every member's slice, own included
  // Chunk k: its bytes, its element count, and this member's slice [lo, hi) of it.
  auto data = [&](size_t k) { return buf + k * chunk * esize; };
  auto len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  auto stage = [&](size_t k, uint64_t s) {  // A: everything of chunk k but this member's slice
    size_t lo, hi;
    Slice(len(k), esize, n_, me_, &lo, &hi);
    uint8_t* q = Quarter(me_, s);
    CopyBytes(q, data(k), lo * esize);
    CopyBytes(q + hi * esize, data(k) + hi * esize, (len(k) - hi) * esize);
    step_ = s;
    Publish(s);
  };
  const uint64_t first = step_ + 1;  // chunk k: A is step first + 2k, B is first + 2k + 1
  HORA_RETURN_IF_ERROR(Claim(first, "allreduce"));
  stage(0, first);
  for (size_t k = 0; k < chunks; ++k) {
    const uint64_t a = first + 2 * k, b = a + 1;
    size_t lo, hi;
    Slice(len(k), esize, n_, me_, &lo, &hi);
    // B: reduce this member's slice in place from the peers' A quarters; stage the result.
    // B's quarter was last read by the peers' copy-out of step b - 4, which each finished
    // before it published b - 2 (the last copy-out waited for that); at k = 0 by the
    // previous collective, which each finished before it published a.
    HORA_RETURN_IF_ERROR(WaitAll(a, "allreduce"));
    if (rank_order_ && op != ReduceOp::kMin && op != ReduceOp::kMax) {
      for (int r = 0; r < n_; ++r) {  // this member's own copy is in its buffer
        ordered[r] = r == me_ ? data(k) + lo * esize : Quarter(r, a) + lo * esize;
      }
      ReduceBlocksInOrder(data(k) + lo * esize, ordered, hi - lo, dtype, op,
                          Quarter(me_, b) + lo * esize, post);
    } else {
      for (int i = 1; i < n_; ++i) srcs[i - 1] = Quarter((me_ + i) % n_, a) + lo * esize;
      ReduceBlocks(data(k) + lo * esize, srcs, hi - lo, dtype, op, Quarter(me_, b) + lo * esize,
                   post);
    }
    step_ = b;
    Publish(b);
    // The next chunk's A before this chunk's copy-out, so that the peers' B is done by the
    // time it is needed. Its quarter was last read by the peers' B of step a - 1 (or, at
    // k = 0, by the previous collective), which each finished before it published a.
    if (k + 1 < chunks) stage(k + 1, b + 1);
    for (int i = 1; i < n_; ++i) {
      const int r = (me_ + i) % n_;
      size_t rlo, rhi;
      Slice(len(k), esize, n_, r, &rlo, &rhi);
      HORA_RETURN_IF_ERROR(WaitPeer(r, b, "allreduce"));
      // Plain stores: the destination lines were read by A a moment ago and are still
      // cached, so streaming stores (which would evict them) are slower here.
      CopyBytes(data(k) + rlo * esize, Quarter(r, b) + rlo * esize, (rhi - rlo) * esize);
    }
  }
  return Status::Ok();
}

Status ShmCommunicator::Reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                      DataType dtype, ReduceOp op) {
  HORA_RETURN_IF_ERROR(CheckOp(dtype, op, "reducescatter"));
  if (counts.size() != static_cast<size_t>(n_)) {
    return InvalidArgument("shm reducescatter needs one element count per rank: got " +
                           std::to_string(counts.size()) + ", size is " + std::to_string(n_));
  }
  const size_t esize = DataTypeSize(dtype);
  const size_t total = Sum(counts);
  if (total == 0) return Status::Ok();
  const size_t mine = counts[me_] * esize;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (n_ == 1) {
    if (mine > 0 && in != out) MoveBytes(out, in, mine);
    return Status::Ok();
  }
  // The output may only alias the input at this member's own slice; otherwise writing it
  // would overwrite slices still to be staged.
  const uint8_t* own =
      src + std::accumulate(counts.begin(), counts.begin() + me_, size_t{0}) * esize;
  if (dst != own && Overlaps(dst, mine, src, total * esize)) {
    std::vector<uint8_t> scratch(mine);
    HORA_RETURN_IF_ERROR(ReducescatterSteps(src, scratch.data(), counts, dtype, op));
    if (mine > 0) CopyBytes(dst, scratch.data(), mine);
    return Status::Ok();
  }
  return ReducescatterSteps(src, dst, counts, dtype, op);
}

Status ShmCommunicator::ReducescatterSteps(const uint8_t* in, uint8_t* out,
                                           const std::vector<size_t>& counts, DataType dtype,
                                           ReduceOp op) {
  const size_t esize = DataTypeSize(dtype);
  const size_t align = std::max<size_t>(1, 64 / esize);
  // Elements per destination per step.
  const size_t quota = std::max(align, tuning_.half_bytes / n_ / esize / align * align);
  const size_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<size_t> offset(n_, 0);
  for (int r = 1; r < n_; ++r) offset[r] = offset[r - 1] + counts[r - 1];
  std::vector<const uint8_t*> srcs(n_ - 1);
  for (size_t k = 0; k < most; k += quota) {
    const uint64_t s = ++step_;
    HORA_RETURN_IF_ERROR(Claim(s, "reducescatter"));
    uint8_t* stage = Half(me_, s);
    for (int d = 0; d < n_; ++d) {
      if (d == me_ || counts[d] <= k) continue;
      const size_t m = std::min(quota, counts[d] - k);
      CopyBytes(stage + d * quota * esize, in + (offset[d] + k) * esize, m * esize);
    }
    Publish(s);
    HORA_RETURN_IF_ERROR(WaitAll(s, "reducescatter"));
    if (counts[me_] <= k) continue;
    const size_t m = std::min(quota, counts[me_] - k);
    uint8_t* o = out + k * esize;
    if (o != in + (offset[me_] + k) * esize)
      MoveBytes(o, in + (offset[me_] + k) * esize, m * esize);
    for (int i = 1; i < n_; ++i) srcs[i - 1] = Half((me_ + i) % n_, s) + me_ * quota * esize;
    ReduceBlocks(o, srcs, m, dtype, op, nullptr);
  }
  return Status::Ok();
}

Status ShmCommunicator::Allgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytes_per_rank) {
  if (bytes_per_rank.size() != static_cast<size_t>(n_)) {
    return InvalidArgument("shm allgatherv needs one byte count per rank: got " +
                           std::to_string(bytes_per_rank.size()) + ", size is " +
                           std::to_string(n_));
  }
  HORA_RETURN_IF_ERROR(Healthy());
  if (Sum(bytes_per_rank) == 0) return Status::Ok();
  std::vector<size_t> offset(n_, 0);
  for (int r = 1; r < n_; ++r) offset[r] = offset[r - 1] + bytes_per_rank[r - 1];
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t mine = bytes_per_rank[me_];
  const size_t chunk = tuning_.half_bytes;
  const size_t most = n_ == 1 ? 0 : *std::max_element(bytes_per_rank.begin(), bytes_per_rank.end());
  const bool streaming = Sum(bytes_per_rank) >= kStreamingBytes;
  for (size_t k = 0; k < most; k += chunk) {
    const uint64_t s = ++step_;
    if (mine > k) {
      HORA_RETURN_IF_ERROR(Claim(s, "allgatherv"));
      CopyBytes(Half(me_, s), src + k, std::min(chunk, mine - k));
    }
    Publish(s);
    for (int i = 1; i < n_; ++i) {
      const int r = (me_ + i) % n_;
      if (bytes_per_rank[r] <= k) continue;
      HORA_RETURN_IF_ERROR(WaitPeer(r, s, "allgatherv"));
      CopyOut(dst + offset[r] + k, Half(r, s), std::min(chunk, bytes_per_rank[r] - k), streaming);
    }
  }
  if (mine > 0 && dst + offset[me_] != src) MoveBytes(dst + offset[me_], src, mine);
  return Status::Ok();
}

// The size step of alltoallv: every member stages its send and receive rows, and every
// member checks the whole matrix (so all return the same error on a mismatch and stay in
// step). Returns the largest block between two different members.
StatusOr<size_t> ShmCommunicator::AlltoallvSizes(const std::vector<size_t>& send_bytes,
                                                 const std::vector<size_t>& recv_bytes) {
  const size_t n = static_cast<size_t>(n_);
  const uint64_t s = ++step_;
  HORA_RETURN_IF_ERROR(Claim(s, "alltoallv"));
  auto* rows = reinterpret_cast<uint64_t*>(Half(me_, s));
  for (size_t r = 0; r < n; ++r) {
    rows[r] = send_bytes[r];
    rows[n + r] = recv_bytes[r];
  }
  Publish(s);
  HORA_RETURN_IF_ERROR(WaitAll(s, "alltoallv"));
  size_t most = 0;
  for (int a = 0; a < n_; ++a) {
    const auto* ra = reinterpret_cast<const uint64_t*>(Half(a, s));
    for (int b = 0; b < n_; ++b) {
      const auto* rb = reinterpret_cast<const uint64_t*>(Half(b, s));
      if (ra[b] != rb[n + a]) {
        return InvalidArgument("shm alltoallv: rank " + std::to_string(a) + " sends " +
                               std::to_string(ra[b]) + " bytes to rank " + std::to_string(b) +
                               ", which expects " + std::to_string(rb[n + a]));
      }
      if (a != b) most = std::max<size_t>(most, ra[b]);
    }
  }
  return most;
}

Status ShmCommunicator::Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                  const std::vector<size_t>& recv_bytes) {
  const size_t n = static_cast<size_t>(n_);
  if (send_bytes.size() != n || recv_bytes.size() != n) {
    return InvalidArgument("shm alltoallv needs one send and one receive byte count per rank");
  }
  // Sizes that do not match (this rank's to itself included) are found by every member in
  // the size step below, so that all of them return the same error and stay in step.
  HORA_RETURN_IF_ERROR(Healthy());
  if (n_ == 1 && send_bytes[0] != recv_bytes[0]) {
    return InvalidArgument("shm alltoallv: rank 0 sends " + std::to_string(send_bytes[0]) +
                           " bytes to rank 0, which expects " + std::to_string(recv_bytes[0]));
  }
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<size_t> send_off(n, 0), recv_off(n, 0);
  for (size_t r = 1; r < n; ++r) {
    send_off[r] = send_off[r - 1] + send_bytes[r - 1];
    recv_off[r] = recv_off[r - 1] + recv_bytes[r - 1];
  }
  if (n_ > 1) {
    auto most = AlltoallvSizes(send_bytes, recv_bytes);
    if (!most.ok()) return most.status();
    const size_t quota = std::max<size_t>(64, tuning_.half_bytes / n / 64 * 64);
    for (size_t k = 0; k < most.value(); k += quota) {
      const uint64_t t = ++step_;
      HORA_RETURN_IF_ERROR(Claim(t, "alltoallv"));
      uint8_t* stage = Half(me_, t);
      for (int d = 0; d < n_; ++d) {
        if (d == me_ || send_bytes[d] <= k) continue;
        CopyBytes(stage + d * quota, src + send_off[d] + k, std::min(quota, send_bytes[d] - k));
      }
      Publish(t);
      for (int i = 1; i < n_; ++i) {
        const int r = (me_ + i) % n_;
        if (recv_bytes[r] <= k) continue;
        HORA_RETURN_IF_ERROR(WaitPeer(r, t, "alltoallv"));
        CopyBytes(dst + recv_off[r] + k, Half(r, t) + me_ * quota,
                  std::min(quota, recv_bytes[r] - k));
      }
    }
  }
  if (recv_bytes[me_] > 0 && dst + recv_off[me_] != src + send_off[me_]) {
    MoveBytes(dst + recv_off[me_], src + send_off[me_], recv_bytes[me_]);
  }
  return Status::Ok();
}

}  // namespace shm
}  // namespace hora
