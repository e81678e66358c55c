#ifndef HORA_RUNTIME_SIGPIPE_H_
#define HORA_RUNTIME_SIGPIPE_H_

#include <pthread.h>
#include <signal.h>

namespace hora {

// Blocks SIGPIPE in the calling thread for its lifetime, so that every thread started
// meanwhile (the backends', gRPC's, Hora's own) inherits the block: a write to a socket
// whose peer died then fails with EPIPE (the backend reports it) instead of killing the
// process, which is SIGPIPE's default. The caller's own mask is restored; the process-wide
// disposition is left alone. Held where the engine starts threads: Init, and a process set
// added later (its executor, steady path and backend threads start in the caller's thread).
class ScopedBlockSigpipe {
 public:
  ScopedBlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedBlockSigpipe() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  ScopedBlockSigpipe(const ScopedBlockSigpipe&) = delete;
  ScopedBlockSigpipe& operator=(const ScopedBlockSigpipe&) = delete;

 private:
  sigset_t old_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_SIGPIPE_H_
