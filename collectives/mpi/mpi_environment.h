// The process's one MPI library state: whether this process runs under an MPI launcher,
// MPI's initialization (once per process, on first use), and its end.
//
// Launcher. Open MPI's mpirun gives every rank OMPI_COMM_WORLD_SIZE / _RANK. The backend never
// reads the process environment itself: runtime/options.cc does, and the lookup reaches it
// in BackendConfig::env (tests feed it tables); so do the checks of whether the user chose
// libnbc's allreduce algorithm.
//
// Tuning. Unless OMPI_MCA_coll_libnbc_iallreduce_algorithm is set, the first Acquire selects
// libnbc's ring for MPI_Iallreduce through the MPI tool interface (MPI_T_cvar_write), for
// every rank alike: its default for in-place calls is a binomial tree, about twice
// MPI_Allreduce's time at 64 MiB (docs/benchmarks-mpi.md).
//
// Initialization. The first MpiEnvironment::Acquire() checks that Open MPI finds its
// components (mpi_components.h: FAILED_PRECONDITION instead of MPI's abort), then calls
// MPI_Init_thread(MPI_THREAD_MULTIPLE): each process set's executor drives its own MPI
// communicator from its own thread, so anything less is refused (FAILED_PRECONDITION naming
// the level MPI provided). If MPI was already initialized by someone else (the application
// itself), the provided level is checked the same way and Hora never finalizes it. In Open
// MPI 4.1 MPI_Init_thread is collective over the whole mpirun job (a PMIx fence) and cannot
// time out: it returns once every process of the job has reached it. Hora builds its first
// communicator only after every rank passed the coordinator's start rendezvous, and mpirun
// kills the whole job when any rank dies, so this wait ends; but a job in which some ranks
// never use the mpi backend blocks here (docs/failure-model.md).
//
// Finalization. Each live MPI communicator holds a reference; MPI_Finalize runs at process
// exit (an atexit handler installed by the first Acquire) when no communicator is alive,
// never earlier, so a later communicator does not need a second MPI_Init (which MPI forbids).
// If communicators are still alive at exit (the application did not shut Hora down), MPI is
// left unfinalized: mpirun then reports that the process exited without MPI_Finalize.
//
// Thread safety: every function is thread-safe.
#ifndef HORA_COLLECTIVES_MPI_MPI_ENVIRONMENT_H_
#define HORA_COLLECTIVES_MPI_MPI_ENVIRONMENT_H_

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hora {

// Returns the value of an environment variable, or nullptr when it is not set.
using MpiEnvLookup = std::function<const char*(const char*)>;

// OK when the environment says this process is rank `global_rank` of an MPI job that holds
// every rank in `global_ranks` (and exactly `job_size` ranks when job_size > 0); else why not,
// naming the variables ("not started by an MPI launcher: OMPI_COMM_WORLD_SIZE is not set").
Status CheckMpiLauncher(const MpiEnvLookup& env, int global_rank,
                        const std::vector<int>& global_ranks, int job_size);

// A reference on the initialized MPI library. Movable, not copyable.
class MpiEnvironment {
 public:
  // Initializes MPI on the first call in this process (see above). Errors:
  // FAILED_PRECONDITION (the thread level is too low, MPI was already finalized, or Open
  // MPI has no components: CheckMpiComponents),
  // INTERNAL (MPI_Init_thread failed, with MPI's error string).
  // `env` (as in CheckMpiLauncher) tells whether the user chose libnbc's algorithm.
  static StatusOr<MpiEnvironment> Acquire(const MpiEnvLookup& env);

  MpiEnvironment(MpiEnvironment&& o) noexcept : held_(o.held_) { o.held_ = false; }
  MpiEnvironment& operator=(MpiEnvironment&& o) noexcept;
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  ~MpiEnvironment();

  // MPI_COMM_WORLD's rank and size of this process. REQUIRES: a held reference.
  int world_rank() const;
  int world_size() const;

 private:
  MpiEnvironment() : held_(true) {}
  bool held_;
};

// "MPI_ERR_TRUNCATE: message truncated": MPI's text for an error code.
std::string MpiErrorString(int code);

}  // namespace hora

#endif  // HORA_COLLECTIVES_MPI_MPI_ENVIRONMENT_H_
