// Process-wide settings of the gRPC library Hora links (Debian's), made once, before the
// process's first coordinator channel or server (coordinator/client.cc, service.cc).
#ifndef HORA_COORDINATOR_GRPC_PROCESS_H_
#define HORA_COORDINATOR_GRPC_PROCESS_H_

namespace hora {

// Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on:
// every lock gRPC takes records an edge in a process-wide lock graph (absl's GraphCycles),
// about a tenth of rank 0's CPU at 1,024 ranks (docs/coordinator-scale.md). It is turned off
// here; Hora's own locks are checked by clang's thread-safety analysis when it is built.
void PrepareGrpcProcess();

}  // namespace hora

#endif  // HORA_COORDINATOR_GRPC_PROCESS_H_
