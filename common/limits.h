// Every default and limit that more than one layer uses, in one place. The options
// (runtime/options.h) start from these; the configs of the coordinator, its client, the
// planner and the backends default to them, so a test that builds a config by hand gets the
// same values as a job.
#ifndef HORA_COMMON_LIMITS_H_
#define HORA_COMMON_LIMITS_H_

#include <chrono>
#include <cstdint>

namespace hora {

constexpr int64_t kDefaultFusionThresholdBytes = int64_t{64} << 20;
constexpr std::chrono::microseconds kDefaultCycleTime{1000};
constexpr int64_t kDefaultInlineThresholdBytes = 16384;
constexpr std::chrono::milliseconds kDefaultStartTimeout{120000};
constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{1000};
constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{30000};
constexpr std::chrono::milliseconds kDefaultStallWarning{60000};
// A stall (a tensor some ranks submitted and others did not) aborts the job after this long
// unless HORA_STALL_TIMEOUT_SECONDS says otherwise (0 = never): no wait is unbounded by default.
constexpr std::chrono::milliseconds kDefaultStallTimeout{600000};
// HORA_DIAGNOSE_SECONDS: how long a diagnosis waits for the ranks' reports; a rank waits half
// of it for its Python threads' stacks.
constexpr std::chrono::milliseconds kDefaultDiagnoseDeadline{3000};
// HORA_FLIGHT_RECORDER_SIZE: the operations each rank remembers (runtime/flight_recorder.h).
constexpr int64_t kDefaultFlightRecorderSize = 1024;
// The largest control-plane message (and store value), in bytes.
constexpr int64_t kDefaultMaxMessageBytes = int64_t{64} << 20;

}  // namespace hora

#endif  // HORA_COMMON_LIMITS_H_
