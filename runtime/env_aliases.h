// Horovod's environment variables as aliases of Hora's, and a check of HORA_* names.
//
// A script tuned for Horovod keeps working: HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME,
// HOROVOD_STALL_CHECK_TIME_SECONDS, ... are read as the Hora option they mean (values
// converted where the spelling differs: HOROVOD_CPU_OPERATIONS=MPI -> "mpi"). Hora's name wins
// when both are set. Each alias read is reported once (ParseOptions puts the lines in
// Options::notes; the engine logs them at info). A HORA_* variable that Hora does not know
// gets a warning naming the closest known one, so a typo does not go unnoticed.
#ifndef HORA_RUNTIME_ENV_ALIASES_H_
#define HORA_RUNTIME_ENV_ALIASES_H_

#include <string>
#include <vector>

#include "runtime/launch_env.h"

namespace hora {

// `env` with Horovod's names behind Hora's. Notes ("HOROVOD_CYCLE_TIME=2 read as
// HORA_CYCLE_TIME_MS=2", "HOROVOD_CACHE_CAPACITY=1024 has no effect: ...") are appended to
// *notes once per variable, when the wrapped lookup is first asked for it.
EnvLookup WithHorovodAliases(const EnvLookup& env, std::vector<std::string>* notes);

// One warning per name in `names` (the environment's variable names) that starts with HORA_
// and is not a variable Hora or its tools read: "HORA_FUSION_TRESHOLD is not a Hora variable
// (did you mean HORA_FUSION_THRESHOLD?)".
std::vector<std::string> UnknownHoraVariables(const std::vector<std::string>& names);

}  // namespace hora

#endif  // HORA_RUNTIME_ENV_ALIASES_H_
