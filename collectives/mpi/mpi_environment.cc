#include "collectives/mpi/mpi_environment.h"

#include <mpi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "collectives/mpi/mpi_components.h"
#include "common/logging.h"
#include "common/mutex.h"

namespace hora {
namespace {

constexpr const char kWorldSize[] = "OMPI_COMM_WORLD_SIZE";
constexpr const char kWorldRank[] = "OMPI_COMM_WORLD_RANK";

bool ParseNonNegative(const char* s, long* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

// The process-wide state behind every MpiEnvironment.
struct State {
  Mutex mu;
  bool initialized GUARDED_BY(mu) = false;  // MPI is usable (by us or by the application)
  bool ours GUARDED_BY(mu) = false;         // we called MPI_Init_thread, so we finalize
  int references GUARDED_BY(mu) = 0;
  int world_rank = 0;  // constant once initialized
  int world_size = 0;  // constant once initialized
};

State& Global() {
  static State* state = new State;  // never destroyed: the atexit handler uses it
  return *state;
}

// atexit: finalize what we initialized, unless a communicator still lives.
void FinalizeAtExit() {
  State& st = Global();
  MutexLock lock(&st.mu);
  if (!st.ours) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (st.references > 0) {
    // The logger may already be gone at exit: plain stderr.
    std::fprintf(stderr, "hora mpi: %d communicator(s) still alive at exit; MPI is not finalized\n",
                 st.references);
    return;
  }
  MPI_Finalize();
}

// Open MPI's libnbc picks a binomial tree for every in-place MPI_Iallreduce and for fewer
// than 4 ranks, which at 64 MiB takes about twice MPI_Allreduce's time here; its ring is as
// fast as the blocking call. Hora's allreduces are in place, so it selects the ring through
// the MPI tool interface (the same MCA variable mpirun --mca sets), once, before any
// communicator exists, so every rank of the job runs the same algorithm. A value the user
// set (OMPI_MCA_coll_libnbc_iallreduce_algorithm) is left alone.
constexpr const char kIallreduceVar[] = "coll_libnbc_iallreduce_algorithm";
constexpr int kLibnbcRing = 1;

void SelectRingIallreduce(const MpiEnvLookup& env) {
  const std::string env_name = std::string("OMPI_MCA_") + kIallreduceVar;
  if (env && env(env_name.c_str()) != nullptr) return;
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
  int index = -1, count = 0;
  MPI_T_cvar_handle handle;
  bool set = false;
  if (MPI_T_cvar_get_index(kIallreduceVar, &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    int ring = kLibnbcRing;
    set = MPI_T_cvar_write(handle, &ring) == MPI_SUCCESS;
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  if (!set)
    HORA_LOG_INFO("mpi: cannot select libnbc's ring allreduce ({} not writable)", kIallreduceVar);
}

Status InitLocked(State& st, const MpiEnvLookup& env) REQUIRES(st.mu) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return FailedPrecondition(
        "mpi: MPI was already finalized in this process; it cannot be "
        "initialized again");
  }
  int already = 0;
  MPI_Initialized(&already);
  int provided = MPI_THREAD_SINGLE;
  if (already) {
    MPI_Query_thread(&provided);
  } else {
    // A libmpi without its components aborts inside MPI_Init_thread: refuse before.
    HORA_RETURN_IF_ERROR(CheckMpiComponents());
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      return Internal("mpi: MPI_Init_thread(MPI_THREAD_MULTIPLE) failed: " + MpiErrorString(rc));
    }
    st.ours = true;
    std::atexit(FinalizeAtExit);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPrecondition(
        std::string("mpi: the MPI library provides only ") + ThreadLevelName(provided) +
        (already ? " (MPI was initialized by the application)" : "") +
        "; Hora drives one MPI communicator per process set from its own thread and needs "
        "MPI_THREAD_MULTIPLE (use an MPI built with thread support, or another backend)");
  }
  if (st.ours) SelectRingIallreduce(env);
  // Errors come back as codes; MPI must not abort the job behind Hora's back.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &st.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &st.world_size);
  st.initialized = true;
  HORA_LOG_INFO("mpi: initialized ({}), world rank {}/{}", ThreadLevelName(provided), st.world_rank,
                st.world_size);
  return Status::Ok();
}

}  // namespace

Status CheckMpiLauncher(const MpiEnvLookup& env, int global_rank,
                        const std::vector<int>& global_ranks, int job_size) {
  const char* size_text = env ? env(kWorldSize) : nullptr;
  if (size_text == nullptr) {
    return FailedPrecondition(std::string("not started by an MPI launcher: ") + kWorldSize +
                              " is not set (run the job under mpirun, or horarun --mpi)");
  }
  long size = 0, rank = 0;
  if (!ParseNonNegative(size_text, &size) || size < 1) {
    return InvalidArgument(std::string(kWorldSize) + "='" + size_text +
                           "' is not a positive integer");
  }
  const char* rank_text = env(kWorldRank);
  if (!ParseNonNegative(rank_text, &rank) || rank >= size) {
    return InvalidArgument(std::string(kWorldRank) + "='" + (rank_text ? rank_text : "") +
                           "' is not a rank in [0, " + std::to_string(size) + ")");
  }
  if (rank != global_rank) {
    return FailedPrecondition("the MPI rank (" + std::string(kWorldRank) + "=" +
                              std::to_string(rank) + ") differs from Hora's rank " +
                              std::to_string(global_rank) +
                              " (HORA_RANK and the launcher disagree)");
  }
  if (job_size > 0 && size != job_size) {
    return FailedPrecondition("the MPI job has " + std::to_string(size) + " ranks (" + kWorldSize +
                              ") but Hora's job has " + std::to_string(job_size));
  }
  for (int r : global_ranks) {
    if (r >= size) {
      return FailedPrecondition("Hora rank " + std::to_string(r) + " is outside the MPI job of " +
                                std::to_string(size) + " ranks (" + kWorldSize + ")");
    }
  }
  return Status::Ok();
}

StatusOr<MpiEnvironment> MpiEnvironment::Acquire(const MpiEnvLookup& env) {
  State& st = Global();
  MutexLock lock(&st.mu);
  if (!st.initialized) HORA_RETURN_IF_ERROR(InitLocked(st, env));
  ++st.references;
  return MpiEnvironment();
}

MpiEnvironment& MpiEnvironment::operator=(MpiEnvironment&& o) noexcept {
  if (this != &o) {
    this->~MpiEnvironment();
    held_ = o.held_;
    o.held_ = false;
  }
  return *this;
}

MpiEnvironment::~MpiEnvironment() {
  if (!held_) return;
  State& st = Global();
  MutexLock lock(&st.mu);
  --st.references;
}

int MpiEnvironment::world_rank() const { return Global().world_rank; }
int MpiEnvironment::world_size() const { return Global().world_size; }

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, len) + " (MPI error " + std::to_string(code) + ")";
}

}  // namespace hora
