// Internal to collectives/mpi: the MpiCommunicator class shared by mpi_communicator.cc (the
// collectives and the waits) and mpi_create.cc (building the MPI communicator).
#ifndef HORA_COLLECTIVES_MPI_MPI_IMPL_H_
#define HORA_COLLECTIVES_MPI_MPI_IMPL_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/mpi/mpi_environment.h"
#include "common/mutex.h"
#include "common/status.h"

namespace hora {

// Polls one request until it completes, the deadline passes or *aborted becomes true.
// On DEADLINE_EXCEEDED / abort the request is left pending (the caller abandons it).
// `what` names the op in messages ("mpi allreduce of 64 bytes").
enum class WaitEnd { kDone, kTimedOut, kAborted, kFailed };
WaitEnd PollRequest(MPI_Request* request, std::chrono::steady_clock::time_point deadline,
                    const std::atomic<bool>* aborted, int* mpi_error);

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of comm (freed in the destructor unless a request was abandoned).
  MpiCommunicator(MpiEnvironment env, MPI_Comm comm, std::chrono::milliseconds timeout);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status Broadcast(void* buf, size_t bytes, int root) override;
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override;
  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override;
  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override;
  void Abort(const Status& reason) override;

 private:
  // Waits for `request`, started by an MPI call that returned `started`. The first failure
  // is sticky (recorded and returned by every later call). `cancel`: the request is a
  // receive, cancelled when it does not complete.
  Status Await(int started, MPI_Request request, const char* what, size_t bytes,
               std::chrono::steady_clock::time_point deadline, bool cancel = false);
  Status Fail(Status s);
  Status Error() const;
  Status CheckPeer(int peer, const char* what) const;
  int Tag(uint32_t tag) const {
    return static_cast<int>(tag % (static_cast<uint64_t>(tag_ub_) + 1));
  }
  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() + timeout_;
  }

  // Constant after construction.
  MpiEnvironment env_;
  const MPI_Comm comm_;
  const std::chrono::milliseconds timeout_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;

  std::atomic<bool> aborted_{false};  // set with error_ by Abort(); read by every wait
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);            // the first failure or the abort reason
  bool abandoned_ GUARDED_BY(mu_) = false;  // a request was left pending inside MPI
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_MPI_MPI_IMPL_H_
