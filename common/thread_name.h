// Names the calling thread ("hora-control"), so that a diagnosis (/proc/self/task), top -H,
// gdb and perf show which of a process's threads are Hora's and what each is for. Linux keeps
// 15 bytes of it.
#ifndef HORA_COMMON_THREAD_NAME_H_
#define HORA_COMMON_THREAD_NAME_H_

#include <pthread.h>

namespace hora {

inline void SetThreadName(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace hora

#endif  // HORA_COMMON_THREAD_NAME_H_
