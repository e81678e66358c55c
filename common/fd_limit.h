// The process's limit on open files (RLIMIT_NOFILE) against what a job of N ranks needs.
//
// Rank 0's coordinator holds a connection per rank, and every rank holds its data plane's
// connections (gloo pairs, the steady path's mailbox: up to one per member of each set). A
// soft limit of 1024, common on Linux, is exhausted by a 1,024-rank job at rank 0 (gRPC's
// accept fails with EMFILE and clients wait out their start timeout). The soft limit may be
// raised up to the hard one without privileges, as Go's runtime and many servers do at start.
#ifndef HORA_COMMON_FD_LIMIT_H_
#define HORA_COMMON_FD_LIMIT_H_

#include <cstdint>
#include <string>

namespace hora {

// The open files a rank of a job of `ranks` ranks may need: a few per other rank (control,
// data plane, mailbox) plus what the process itself uses.
int64_t OpenFilesWanted(int ranks);

// How far beyond `wanted` RaiseOpenFileLimit goes. Headroom, not need: CI once saw rank 0's
// accept fail with EMFILE at 1,024 ranks with the soft limit at 5,120, beside the netns tests,
// where an idle run holds about 1,040 descriptors (not reproduced; probably clients whose
// connection attempts timed out under load connecting again while rank 0 still held the
// abandoned sockets). With Debian's gRPC the first EMFILE stops the listener for good: every
// rank still to join then waits out its start timeout.
constexpr int64_t kOpenFilesHeadroom = 4;

// Raises the soft RLIMIT_NOFILE toward kOpenFilesHeadroom x `wanted` where the hard limit
// allows (never lowers it). Returns "" when the soft limit now covers `wanted`, else a
// sentence naming both limits and `ulimit -n` (the caller logs it).
std::string RaiseOpenFileLimit(int64_t wanted);

}  // namespace hora

#endif  // HORA_COMMON_FD_LIMIT_H_
