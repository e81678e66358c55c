// HORA_DIAGNOSE_SIGNAL (SIGUSR1 by default): a signal to any rank asks the coordinator for a
// diagnosis of every rank (horarun --diagnose sends it to rank 0).
//
// The handler only writes one byte to a pipe (async-signal-safe, so it works whatever the
// thread it lands on is doing, Python or not); this object's thread reads the pipe and calls
// `ask`. The pipe's descriptor is the one process-wide variable this needs (a signal handler
// has no other way to find it); one watcher may exist at a time. The handler is installed only
// where the signal's disposition is the default one or "ignore" (the hora Python package sets
// "ignore" at import, so that a signal before init does not kill the rank), so a handler of
// the program's own (or Python's signal module's) is never replaced; the destructor puts the
// disposition back.
//
// Thread safety: constructed and destroyed by the engine; `ask` runs on this object's thread.
#ifndef HORA_RUNTIME_DIAGNOSE_SIGNAL_H_
#define HORA_RUNTIME_DIAGNOSE_SIGNAL_H_

#include <signal.h>

#include <functional>
#include <string>
#include <thread>

namespace hora {

class DiagnoseSignal {
 public:
  // signo 0: does nothing. A signal whose handler is not the default is left alone (logged).
  DiagnoseSignal(int signo, std::function<void(const std::string& why)> ask);
  ~DiagnoseSignal();
  DiagnoseSignal(const DiagnoseSignal&) = delete;
  DiagnoseSignal& operator=(const DiagnoseSignal&) = delete;

  bool installed() const { return installed_; }

 private:
  void Loop();

  const int signo_;
  const std::function<void(const std::string&)> ask_;
  bool installed_ = false;
  sighandler_t previous_ = SIG_DFL;
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_DIAGNOSE_SIGNAL_H_
