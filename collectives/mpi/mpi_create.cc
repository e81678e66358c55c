// Building a process set's MPI communicator (mpi_communicator.h: which MPI call for which
// set, and the members' meeting through the store that bounds MPI_Comm_create_group).
#include <algorithm>
#include <string>
#include <utility>

#include "collectives/mpi/mpi_communicator.h"
#include "collectives/mpi/mpi_impl.h"
#include "common/logging.h"

namespace hora {
namespace {

Status ValidateConfig(const MpiConfig& c, int world_rank, int world_size) {
  const int n = static_cast<int>(c.world_ranks.size());
  if (n < 1) return InvalidArgument("mpi: a communicator needs at least one member");
  if (c.rank < 0 || c.rank >= n) {
    return InvalidArgument("mpi: rank " + std::to_string(c.rank) + " is out of range [0, " +
                           std::to_string(n) + ")");
  }
  if (c.timeout.count() <= 0) return InvalidArgument("mpi: timeout must be > 0 ms");
  for (int i = 0; i < n; ++i) {
    const int r = c.world_ranks[i];
    if (r < 0 || r >= world_size || (i > 0 && r <= c.world_ranks[i - 1])) {
      return InvalidArgument("mpi: member world ranks must be sorted, distinct and in [0, " +
                             std::to_string(world_size) + "); got " + std::to_string(r));
    }
  }
  if (c.world_ranks[c.rank] != world_rank) {
    return InvalidArgument(
        "mpi: this process is MPI_COMM_WORLD rank " + std::to_string(world_rank) +
        " but the set says member " + std::to_string(c.rank) + " is world rank " +
        std::to_string(c.world_ranks[c.rank]) + " (Hora's ranks and the MPI launcher's disagree)");
  }
  if (c.process_set != 0 && c.store == nullptr) {
    return InvalidArgument("mpi: process set " + std::to_string(c.process_set) +
                           " needs a KvStore for its members to meet");
  }
  if (c.process_set == 0 && n != world_size) {
    return InvalidArgument("mpi: process set 0 has " + std::to_string(n) +
                           " members but MPI_COMM_WORLD has " + std::to_string(world_size));
  }
  return Status::Ok();
}

// Every member announces itself and waits for every other one, bounded by the timeout, so
// that the unbounded MPI_Comm_create_group only starts once all members are there.
Status Meet(const MpiConfig& c) {
  const std::string base = c.key_prefix + "mpi/arrived/";
  HORA_RETURN_IF_ERROR(c.store->Set(base + std::to_string(c.rank), "1"));
  const auto deadline = std::chrono::steady_clock::now() + c.timeout;
  for (int r = 0; r < static_cast<int>(c.world_ranks.size()); ++r) {
    if (r == c.rank) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto got = c.store->Get(base + std::to_string(r), std::max(left, std::chrono::milliseconds(1)));
    if (!got.ok()) {
      return Status(got.status().code(),
                    "mpi: member " + std::to_string(r) + " (world rank " +
                        std::to_string(c.world_ranks[r]) + ") did not arrive within " +
                        std::to_string(c.timeout.count()) + " ms: " + got.status().message());
    }
  }
  return Status::Ok();
}

StatusOr<MPI_Comm> DuplicateWorld(const MpiConfig& c) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req);
  if (rc != MPI_SUCCESS) return Internal("mpi: MPI_Comm_idup failed: " + MpiErrorString(rc));
  std::atomic<bool> never{false};
  int mpi_error = MPI_SUCCESS;
  switch (PollRequest(&req, std::chrono::steady_clock::now() + c.timeout, &never, &mpi_error)) {
    case WaitEnd::kDone:
      return comm;
    case WaitEnd::kFailed:
      return Internal("mpi: MPI_Comm_idup failed: " + MpiErrorString(mpi_error));
    default:
      return DeadlineExceeded("mpi: duplicating MPI_COMM_WORLD did not complete within " +
                              std::to_string(c.timeout.count()) +
                              " ms (a rank did not build its communicator)");
  }
}

StatusOr<MPI_Comm> CreateForGroup(const MpiConfig& c, int tag_ub) {
  HORA_RETURN_IF_ERROR(Meet(c));
  MPI_Group world = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, static_cast<int>(c.world_ranks.size()), c.world_ranks.data(), &members);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, c.process_set % (tag_ub + 1), &comm);
  MPI_Group_free(&members);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS) {
    return Internal("mpi: MPI_Comm_create_group for process set " + std::to_string(c.process_set) +
                    " failed: " + MpiErrorString(rc));
  }
  return comm;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiConfig& config) {
  auto env = MpiEnvironment::Acquire(config.env);
  if (!env.ok()) return env.status();
  const int world_rank = env.value().world_rank();
  const int world_size = env.value().world_size();
  HORA_RETURN_IF_ERROR(ValidateConfig(config, world_rank, world_size));
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  const int tag_ub = (found && ub != nullptr && *ub > 0) ? *ub : 32767;
  auto comm = config.process_set == 0 ? DuplicateWorld(config) : CreateForGroup(config, tag_ub);
  if (!comm.ok()) return comm.status();
  MPI_Comm_set_errhandler(comm.value(), MPI_ERRORS_RETURN);
  HORA_LOG_INFO(
      "data plane: backend mpi, process set {}, rank {}/{} (world rank {}/{}), "
      "timeout {} ms",
      config.process_set, config.rank, config.world_ranks.size(), world_rank, world_size,
      config.timeout.count());
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(std::move(env).value(), comm.value(), config.timeout));
}

}  // namespace hora
