// Helpers shared by the launcher readers (launch_env.cc, launch_env_slurm.cc). Internal.
#ifndef HORA_RUNTIME_LAUNCH_ENV_UTIL_H_
#define HORA_RUNTIME_LAUNCH_ENV_UTIL_H_

#include <string>

#include "runtime/launch_env.h"

namespace hora {
namespace launch_env_internal {

// The value of `name`, or nullptr when it is unset or empty.
const char* Get(const EnvLookup& env, const char* name);

// Reads `name` as an integer in [lo, hi] into *out; leaves *out alone when it is unset.
// `required`: unset is an error too ("SLURM_NTASKS is not set (SLURM_PROCID is)").
Status ReadInt(const EnvLookup& env, const char* name, long long lo, long long hi, bool required,
               const char* because, long long* out);

// "NAME='value' is not below OTHER='value'" when rank >= size (both set).
Status CheckBelow(const char* rank_var, long long rank, const char* size_var, long long size);

// Reads HORA_COORDINATOR_PORT into *port when it is set (1..65535).
Status ReadPortOverride(const EnvLookup& env, int* port, bool* given);

// Reads the launcher's Slurm variables into *l (launch_env_slurm.cc).
Status ReadSlurm(const EnvLookup& env, LaunchEnv* l);

}  // namespace launch_env_internal
}  // namespace hora

#endif  // HORA_RUNTIME_LAUNCH_ENV_UTIL_H_
