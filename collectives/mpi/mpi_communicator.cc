// The collectives of the MPI backend: each is one (or, past MPI's int count, a few) MPI
// non-blocking call(s) and a bounded wait (mpi_communicator.h says why and how).
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "collectives/mpi/mpi_impl.h"
#include "collectives/mpi/mpi_reduce.h"
#include "common/logging.h"
#include "common/mutex.h"

namespace hora {
namespace {

// The largest piece a chunked call hands MPI at once (elements or bytes).
constexpr size_t kMaxPiece = size_t{1} << 30;
static_assert(kMaxPiece <= static_cast<size_t>(INT_MAX), "a piece must fit MPI's int count");

// Spins this many unsuccessful tests before each yield of the core; the clock is read at
// the same rhythm.
constexpr int kSpinsPerYield = 64;

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// Counts and displacements for the v-collectives, which MPI takes as int.
Status ToIntCounts(const std::vector<size_t>& sizes, const char* what, std::vector<int>* counts,
                   std::vector<int>* displs) {
  counts->resize(sizes.size());
  displs->resize(sizes.size());
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > static_cast<size_t>(INT_MAX) || offset > static_cast<size_t>(INT_MAX)) {
      return InvalidArgument(std::string("mpi ") + what + ": " + std::to_string(Sum(sizes)) +
                             " in total is past MPI's int count limit of " +
                             std::to_string(INT_MAX) + " per rank and in offsets");
    }
    (*counts)[i] = static_cast<int>(sizes[i]);
    (*displs)[i] = static_cast<int>(offset);
    offset += sizes[i];
  }
  return Status::Ok();
}

std::string Describe(const char* what, size_t bytes) {
  return std::string("mpi ") + what + " of " + std::to_string(bytes) + " bytes";
}

}  // namespace

WaitEnd PollRequest(MPI_Request* request, std::chrono::steady_clock::time_point deadline,
                    const std::atomic<bool>* aborted, int* mpi_error) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      *mpi_error = rc;
      return WaitEnd::kFailed;
    }
    if (done) return WaitEnd::kDone;
    if (aborted->load(std::memory_order_acquire)) return WaitEnd::kAborted;
    if (spins % kSpinsPerYield == kSpinsPerYield - 1) {
      if (std::chrono::steady_clock::now() >= deadline) return WaitEnd::kTimedOut;
      sched_yield();  // more ranks than cores must not starve the peer we wait for
    }
  }
}

MpiCommunicator::MpiCommunicator(MpiEnvironment env, MPI_Comm comm,
                                 std::chrono::milliseconds timeout)
    : env_(std::move(env)), comm_(comm), timeout_(timeout) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub != nullptr && *ub > 0) tag_ub_ = *ub;
}

MpiCommunicator::~MpiCommunicator() {
  MutexLock lock(&mu_);
  // A communicator with an abandoned request stays allocated: MPI may still complete it.
  if (abandoned_) return;
  MPI_Comm c = comm_;
  MPI_Comm_free(&c);
}

Status MpiCommunicator::Error() const {
  MutexLock lock(&mu_);
  return error_;
}

Status MpiCommunicator::Fail(Status s) {
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;  // aborted meanwhile: the abort's reason is the cause
    error_ = s;
  }
  HORA_LOG_ERROR("mpi communicator rank {} is broken: {}", rank_, s.ToString());
  return s;
}

Status MpiCommunicator::Await(int started, MPI_Request request, const char* what, size_t bytes,
                              std::chrono::steady_clock::time_point deadline, bool cancel) {
  if (started != MPI_SUCCESS) {
    return Fail(Internal(Describe(what, bytes) + " could not start: " + MpiErrorString(started)));
  }
  int mpi_error = MPI_SUCCESS;
  const WaitEnd end = PollRequest(&request, deadline, &aborted_, &mpi_error);
  if (end == WaitEnd::kDone) return Status::Ok();
  if (end == WaitEnd::kFailed) {
    return Fail(PeerFailure(Describe(what, bytes) +
                            " failed in MPI (a rank may have died): " + MpiErrorString(mpi_error)));
  }
  if (cancel) {
    MPI_Cancel(&request);
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) MPI_Request_free(&request);
  }
  {
    MutexLock lock(&mu_);
    abandoned_ = abandoned_ || !cancel;
  }
  if (end == WaitEnd::kAborted) return Error();
  return Fail(DeadlineExceeded(
      Describe(what, bytes) + " timed out after " + std::to_string(timeout_.count()) +
      " ms waiting for a peer (MPI cannot tell whether a rank died or stopped; the "
      "coordinator's heartbeats name a dead rank)"));
}

Status MpiCommunicator::Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  auto reduction = MpiReductionFor(dtype, op);
  if (!reduction.ok()) return reduction.status();
  HORA_RETURN_IF_ERROR(Error());
  // Every rank has the same count, so all skip together.
  if (count == 0 || size_ == 1) return Status::Ok();
  const size_t elem = DataTypeSize(dtype);
  const auto deadline = Deadline();
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(kMaxPiece, count - done);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc =
        MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(buf) + done * elem, static_cast<int>(n),
                       reduction.value().type, reduction.value().op, comm_, &req);
    HORA_RETURN_IF_ERROR(Await(rc, req, "allreduce", count * elem, deadline));
    done += n;
  }
  return Status::Ok();
}

Status MpiCommunicator::Broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    return InvalidArgument("mpi broadcast root " + std::to_string(root) + " is out of range [0, " +
                           std::to_string(size_) + ")");
  }
  HORA_RETURN_IF_ERROR(Error());
  if (bytes == 0 || size_ == 1) return Status::Ok();
  const auto deadline = Deadline();
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxPiece, bytes - done);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Ibcast(static_cast<char*>(buf) + done, static_cast<int>(n), MPI_BYTE, root, comm_,
                        &req);
    HORA_RETURN_IF_ERROR(Await(rc, req, "broadcast", bytes, deadline));
    done += n;
  }
  return Status::Ok();
}

Status MpiCommunicator::Allgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytes_per_rank) {
  if (bytes_per_rank.size() != static_cast<size_t>(size_)) {
    return InvalidArgument("mpi allgatherv needs one byte count per rank: got " +
                           std::to_string(bytes_per_rank.size()) + ", size is " +
                           std::to_string(size_));
  }
  HORA_RETURN_IF_ERROR(Error());
  const size_t total = Sum(bytes_per_rank);
  if (total == 0) return Status::Ok();  // every rank knows the same counts
  std::vector<int> counts, displs;
  HORA_RETURN_IF_ERROR(ToIntCounts(bytes_per_rank, "allgatherv", &counts, &displs));
  char* mine = static_cast<char*>(out) + displs[rank_];
  if (size_ == 1) {
    if (counts[0] > 0 && in != mine) std::memmove(mine, in, counts[0]);
    return Status::Ok();
  }
  // Already in its place in out: MPI_IN_PLACE; else MPI reads `in`.
  const void* send = in == mine ? MPI_IN_PLACE : in;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Iallgatherv(send, counts[rank_], MPI_BYTE, out, counts.data(), displs.data(),
                           MPI_BYTE, comm_, &req);
  return Await(rc, req, "allgatherv", total, Deadline());
}

Status MpiCommunicator::Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                  const std::vector<size_t>& recv_bytes) {
  if (send_bytes.size() != static_cast<size_t>(size_) ||
      recv_bytes.size() != static_cast<size_t>(size_)) {
    return InvalidArgument("mpi alltoallv needs one send and one receive byte count per rank");
  }
  if (send_bytes[rank_] != recv_bytes[rank_]) {
    return InvalidArgument("mpi alltoallv: this rank sends itself " +
                           std::to_string(send_bytes[rank_]) + " bytes but expects " +
                           std::to_string(recv_bytes[rank_]));
  }
  HORA_RETURN_IF_ERROR(Error());
  const size_t total = Sum(send_bytes) + Sum(recv_bytes);
  if (total == 0) return Status::Ok();
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, send_bytes[0]);
    return Status::Ok();
  }
  std::vector<int> scounts, sdispls, rcounts, rdispls;
  HORA_RETURN_IF_ERROR(ToIntCounts(send_bytes, "alltoallv", &scounts, &sdispls));
  HORA_RETURN_IF_ERROR(ToIntCounts(recv_bytes, "alltoallv", &rcounts, &rdispls));
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ialltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out, rcounts.data(),
                          rdispls.data(), MPI_BYTE, comm_, &req);
  return Await(rc, req, "alltoallv", total, Deadline());
}

Status MpiCommunicator::Reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                      DataType dtype, ReduceOp op) {
  auto reduction = MpiReductionFor(dtype, op);
  if (!reduction.ok()) return reduction.status();
  if (counts.size() != static_cast<size_t>(size_)) {
    return InvalidArgument("mpi reducescatter needs one element count per rank: got " +
                           std::to_string(counts.size()) + ", size is " + std::to_string(size_));
  }
  HORA_RETURN_IF_ERROR(Error());
  const size_t elem = DataTypeSize(dtype);
  const size_t total = Sum(counts);
  if (total == 0) return Status::Ok();
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, counts[0] * elem);
    return Status::Ok();
  }
  std::vector<int> icounts, displs;
  HORA_RETURN_IF_ERROR(ToIntCounts(counts, "reducescatter", &icounts, &displs));
  // MPI forbids out inside in; in place (out is this rank's slice of in) reduces into a copy.
  const bool in_place = out == static_cast<const char*>(in) + displs[rank_] * elem;
  std::vector<char> copy(in_place ? counts[rank_] * elem : 0);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ireduce_scatter(in, in_place ? copy.data() : out, icounts.data(),
                               reduction.value().type, reduction.value().op, comm_, &req);
  HORA_RETURN_IF_ERROR(Await(rc, req, "reducescatter", total * elem, Deadline()));
  if (!copy.empty()) std::memcpy(out, copy.data(), copy.size());
  return Status::Ok();
}

Status MpiCommunicator::Barrier() {
  HORA_RETURN_IF_ERROR(Error());
  if (size_ == 1) return Status::Ok();
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(comm_, &req);
  return Await(rc, req, "barrier", 0, Deadline());
}

Status MpiCommunicator::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return InvalidArgument(std::string("mpi ") + what + ": peer " + std::to_string(peer) +
                           " is out of range [0, " + std::to_string(size_) + ") or this rank");
  }
  return Error();
}

// A message past kMaxPiece bytes travels as consecutive pieces with the same tag; MPI's
// non-overtaking order per (source, tag, communicator) keeps them in order.
Status MpiCommunicator::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "send"));
  if (bytes == 0) return Status::Ok();
  const auto deadline = Deadline();
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxPiece, bytes - done);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Isend(static_cast<const char*>(buf) + done, static_cast<int>(n), MPI_BYTE, peer,
                       Tag(tag), comm_, &req);
    HORA_RETURN_IF_ERROR(Await(rc, req, "send", bytes, deadline));
    done += n;
  }
  return Status::Ok();
}

Status MpiCommunicator::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
  if (bytes == 0) return Status::Ok();
  const auto deadline = Deadline();
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxPiece, bytes - done);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(static_cast<char*>(buf) + done, static_cast<int>(n), MPI_BYTE, peer,
                       Tag(tag), comm_, &req);
    HORA_RETURN_IF_ERROR(Await(rc, req, "recv", bytes, deadline, /*cancel=*/true));
    done += n;
  }
  return Status::Ok();
}

void MpiCommunicator::Abort(const Status& reason) {
  MutexLock lock(&mu_);
  if (!error_.ok()) return;
  error_ = reason.ok() ? Aborted("the mpi communicator was aborted") : reason;
  aborted_.store(true, std::memory_order_release);
}

}  // namespace hora
