#include "runtime/diagnose_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "common/logging.h"
#include "common/thread_name.h"

namespace hora {
namespace {

// The write end of the watcher's pipe, -1 when none (see the header).
std::atomic<int> g_signal_fd{-1};

void OnSignal(int) {
  const int saved = errno;
  const int fd = g_signal_fd.load();
  if (fd >= 0) {
    const char b = 'd';
    (void)!write(fd, &b, 1);  // a full pipe already holds a request
  }
  errno = saved;
}

}  // namespace

DiagnoseSignal::DiagnoseSignal(int signo, std::function<void(const std::string&)> ask)
    : signo_(signo), ask_(std::move(ask)) {
  if (signo_ == 0) return;
  struct sigaction old {};
  if (sigaction(signo_, nullptr, &old) != 0) return;
  if ((old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) ||
      (old.sa_flags & SA_SIGINFO) != 0) {
    HORA_LOG_INFO("diagnosis: signal {} has a handler already; HORA_DIAGNOSE_SIGNAL left off",
                  signo_);
    return;
  }
  if (pipe2(pipe_, O_CLOEXEC) != 0) return;
  (void)fcntl(pipe_[1], F_SETFL, O_NONBLOCK);
  int expected = -1;
  if (!g_signal_fd.compare_exchange_strong(expected, pipe_[1])) {  // another watcher is on
    close(pipe_[0]);
    close(pipe_[1]);
    pipe_[0] = pipe_[1] = -1;
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(signo_, &sa, nullptr) != 0) {
    g_signal_fd.store(-1);
    close(pipe_[0]);
    close(pipe_[1]);
    pipe_[0] = pipe_[1] = -1;
    return;
  }
  installed_ = true;
  previous_ = old.sa_handler;
  thread_ = std::thread([this] {
    SetThreadName("hora-signal");
    Loop();
  });
}

DiagnoseSignal::~DiagnoseSignal() {
  if (!installed_) return;
  signal(signo_, previous_);
  g_signal_fd.store(-1);
  const char quit = 'q';
  (void)!write(pipe_[1], &quit, 1);
  thread_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

void DiagnoseSignal::Loop() {
  // Waits for the next byte: a signal ('d'), or the destructor ('q'). No deadline: the
  // destructor's byte always ends it.
  char b = 0;
  while (true) {
    const ssize_t n = read(pipe_[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || b == 'q') return;
    ask_(signo_ == SIGUSR2 ? "signal SIGUSR2" : signo_ == SIGUSR1 ? "signal SIGUSR1" : "a signal");
  }
}

}  // namespace hora
