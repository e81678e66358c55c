// A mutex, its scoped lock and a condition variable that clang's thread-safety analysis
// checks (-Wthread-safety, `--config=clang-tsa` in .bazelrc, tools/check_tsa.sh).
//
//   class Queue {
//    public:
//     void Push(int v) EXCLUDES(mu_) {
//       MutexLock lock(&mu_);
//       items_.push_back(v);
//       cv_.NotifyAll();
//     }
//     bool PopUntil(TimePoint deadline, int* out) EXCLUDES(mu_) {
//       MutexLock lock(&mu_);
//       if (!cv_.WaitUntil(&mu_, deadline, [this] {
//             mu_.AssertHeld();  // a lambda is analyzed on its own: say it runs under mu_
//             return !items_.empty();
//           }))
//         return false;
//       ...
//     }
//    private:
//     void DropLocked() REQUIRES(mu_);
//     Mutex mu_;
//     CondVar cv_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//   };
//
// Under gcc the macros expand to nothing; the types cost what std::mutex and
// std::condition_variable cost (they are thin wrappers over them).
#ifndef HORA_COMMON_MUTEX_H_
#define HORA_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#if defined(__clang__)
#define HORA_TSA(x) __attribute__((x))
#else
#define HORA_TSA(x)
#endif

// Guarded: abseil's internal thread_annotations.h (included by gRPC) defines some of these
// names with the same meaning.
#ifndef CAPABILITY
#define CAPABILITY(x) HORA_TSA(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY HORA_TSA(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) HORA_TSA(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) HORA_TSA(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) HORA_TSA(acquired_after(__VA_ARGS__))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) HORA_TSA(acquired_before(__VA_ARGS__))
#endif
#ifndef REQUIRES
#define REQUIRES(...) HORA_TSA(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) HORA_TSA(locks_excluded(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) HORA_TSA(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) HORA_TSA(release_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) HORA_TSA(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) HORA_TSA(assert_capability(x))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) HORA_TSA(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS HORA_TSA(no_thread_safety_analysis)
#endif

namespace hora {

class CondVar;

// A non-recursive exclusive lock (std::mutex). Prefer MutexLock to Lock/Unlock.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tries to take the lock until `timeout` has passed; true when it is held. It polls
  // try_lock (every 1 ms at most) instead of using std::timed_mutex: timed_mutex's
  // try_lock_for is pthread_mutex_clocklock, which gcc 12's ThreadSanitizer does not
  // intercept, so it would see the unlock of a lock it never saw taken. For rare,
  // short waits (a shutdown path), not for a hot lock.
  template <class Rep, class Period>
  bool TryLockFor(std::chrono::duration<Rep, Period> timeout) TRY_ACQUIRE(true) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!mu_.try_lock()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // Tells the analysis that the calling thread holds the lock (a callback run under it).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope. Unlock()/Lock() release and retake it inside the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable used with a Mutex the caller holds. Each wait takes the Mutex it
// waits under, so the analysis checks that the caller holds it. The predicate runs with it
// held; a lambda predicate that reads guarded fields starts with mu.AssertHeld() (the
// analysis sees a lambda as a function of its own).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Waits until notified (or a spurious wake-up). Prefer the deadline forms.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  template <class Pred>
  void Wait(Mutex* mu, Pred pred) REQUIRES(mu) {
    while (!pred()) Wait(mu);
  }

  // Waits until notified or `deadline`; false when the deadline passed.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woke = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woke;
  }
  // Waits until pred() or `deadline`; returns pred() at the end.
  template <class Clock, class Duration, class Pred>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline, Pred pred)
      REQUIRES(mu) {
    while (!pred()) {
      if (!WaitUntil(mu, deadline)) return pred();
    }
    return true;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  template <class Rep, class Period, class Pred>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Pred pred) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, std::move(pred));
  }

 private:
  std::condition_variable cv_;
};

}  // namespace hora

#endif  // HORA_COMMON_MUTEX_H_
