// The steady path's settings (runtime/steady_path.h), in one place, grouped as leveldb's
// Options and gloo's AllreduceOptions are: what changes what happens, then what only changes
// how fast. The defaults are what the engine uses; a setting read from the environment names
// its variable (docs/options.md). The boards' sizes (entries, log slots, eager bytes,
// members) are memory layout rather than tuning: runtime/steady_board.h,
// steady_shm_board.h and steady_net_board.h.
#ifndef HORA_RUNTIME_STEADY_OPTIONS_H_
#define HORA_RUNTIME_STEADY_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/limits.h"

namespace hora {

struct SteadyOptions {
  // ---- Affect behaviour ----

  // Plans in a row with the same spec that make a name a cache entry (or update its spec).
  int warmup = 3;
  // How long an offer waits for every member before this member withdraws it, where the
  // board can (shared memory): the instance then goes to the coordinator.
  // HORA_STEADY_PATIENCE_MS.
  std::chrono::milliseconds patience{500};
  // On a board that cannot withdraw an offer (messages): how long an instance waits before a
  // warning, and before it fails the job (0: never), naming who did not submit it.
  // HORA_STALL_WARNING_SECONDS, HORA_STALL_TIMEOUT_SECONDS.
  std::chrono::milliseconds stall_warning{60000};
  std::chrono::milliseconds stall_timeout{0};

  // ---- Affect performance ----

  // Before it sleeps on the board, a waiting thread (the set's thread, and a helper: a thread
  // in hora_wait waiting for its own result) yields its core (sched_yield) for up to this
  // long each time the bell moves: the peer's offer, or the instance to run, usually comes
  // within that, and a futex wake-up costs 25-60 us on a VM. Spinning instead (50 us, 1 ms
  // after each fast instance) took the core from the peer's threads and made the median
  // worse on 2 loaded cores; yielding gives the core to any thread that wants it
  // (docs/benchmarks-steady.md).
  std::chrono::microseconds yield{50};
  // The longest sleep of a waiting thread (stop and abort also wake it).
  std::chrono::milliseconds max_sleep{200};
  // The largest fast instance the enqueuing thread runs itself (Begin), unless its caller is
  // prompt: a caller that waited for the entry's last instance within prompt_wait of the
  // enqueue's return (a blocking call, hora_allreduce or hvd.allreduce, is enqueue then wait)
  // has every instance run by the enqueuing thread, whatever its size, because handing it to
  // the set's thread costs two wake-ups (the set's thread, then the waiting caller): 25-60 us
  // each on a VM, 10-15 % of a 1 MiB allreduce (docs/benchmarks-steady-lean.md). A caller
  // that overlaps (DistributedOptimizer's hooks wait at synchronize) is not prompt.
  size_t inline_bytes = 64 << 10;
  std::chrono::microseconds prompt_wait{500};
  // The set's thread sleeps lazily (SteadyBoard::Sleep): an append of an Eager instance does
  // not wake it, since no peer waits for this member to run one and this member's thread
  // waiting for it (Help) or polling (Progress) usually runs it first. Its sleep ends after
  // the grace: min_grace, doubled while its ends find nothing to run, up to max_grace (how
  // late an Eager instance that nobody on this member waits for can finish). Those wake-ups
  // were 5000 a second in 4-rank 4-byte allreduces on 2 cores, 8 % of the CPU time in futex
  // calls on the offering thread, plus each woken thread's context switch.
  std::chrono::milliseconds min_grace{1};
  std::chrono::milliseconds max_grace{50};
  // The most bytes of one bucket of fused allreduces (runtime/steady_path.h "Execution"); 0:
  // every instance runs alone. HORA_FUSION_THRESHOLD, as the coordinator's buckets.
  int64_t fusion_bytes = kDefaultFusionThresholdBytes;
  // A larger tensor runs alone, in place: copying it into the fused bucket and out again costs
  // more than the collective it saves. ResNet-50's gradients one by one at 2 hosts x 2 ranks:
  // 243 ms a step with this limit, 260-307 ms without, 247-257 ms before fusing at all
  // (docs/benchmarks-steady.md "Across hosts").
  size_t fuse_tensor_bytes = 1 << 20;
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_OPTIONS_H_
