// Whether Open MPI can find its components (plugins) before MPI_Init is called.
//
// Open MPI's libmpi loads its components (mca_*.so: transports, PMIx glue, ...) from the
// install prefix it was built for (Debian: /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3),
// or from $OPAL_PREFIX. A libmpi copied elsewhere (Hora's wheel bundles it, since libhora.so
// links it) on a machine without that Open MPI finds none, and MPI_Init_thread then aborts
// the process (MPI_ERRORS_ARE_FATAL) instead of returning an error. CheckMpiComponents asks
// the MPI tool interface (usable before MPI_Init) for mca_base_component_path and turns that
// case into a Status.
//
// Thread safety: call under MpiEnvironment's lock (it initializes and finalizes MPI_T).
#ifndef HORA_COLLECTIVES_MPI_MPI_COMPONENTS_H_
#define HORA_COLLECTIVES_MPI_MPI_COMPONENTS_H_

#include <string>

#include "common/status.h"

namespace hora {

// OK when some directory of `component_path` (':'-separated) holds an mca_*.so file; else
// FAILED_PRECONDITION naming the directories, what the mpi backend needs, and the way out.
// `library` names the MPI library in the message (MPI_Get_library_version's first line).
Status CheckComponentDirs(const std::string& component_path, const std::string& library);

// CheckComponentDirs over the loaded libmpi's mca_base_component_path. OK (nothing checked)
// when the MPI tool interface does not answer, e.g. an MPI that is not Open MPI.
Status CheckMpiComponents();

}  // namespace hora

#endif  // HORA_COLLECTIVES_MPI_MPI_COMPONENTS_H_
