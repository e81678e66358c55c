"""The Work objects of the "hora" torch.distributed backend (distributed.py).

A Work holds the hora.torch handles of one torch.distributed call and a `finish` that turns
their results into what torch expects (the output tensors). wait() without a timeout finishes
the Work on the caller's thread. One completer thread per process finishes Works in the order
they were started, so that get_future() completes without anybody calling wait() (DDP's reducer
only waits on the future); it is woken only when a future is asked for or when many Works are
queued (it keeps an unwaited Work's tensors alive until the Work is done), so a call that is
waited for (dist.send, dist.all_reduce, ...) costs no thread hop. Whoever comes first finishes
a Work, under the Work's lock.
"""

import collections
import datetime
import threading
import time

import torch
import torch.distributed as dist

from .. import errors
from . import mpi_ops, p2p

# torch 2.x names the error of a failed collective; older torch has only RuntimeError.
DistBackendError = getattr(dist, "DistBackendError", RuntimeError)


def _seconds(timeout):
    """torch's timeout (a timedelta, 0 meaning none) as seconds, or None for no timeout."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    return float(timeout) if timeout > 0 else None


class Work(dist.Work):
    """One call: `handles` (hora.torch handles), `finish(results)` -> the call's outputs."""

    def __init__(self, what, handles, finish):
        super().__init__()
        self._what = what
        self._handles = handles
        self._finish = finish
        self._finished = False  # set once, under _future_lock, after outputs/error
        self._lock = threading.Lock()
        self._outputs = None
        self._error = None
        self._future = None  # made by get_future(): most calls are waited for, not futured
        _completer.add(self)

    def _complete(self):
        with self._lock:
            if not self._finished:
                self._finish_now()

    def _collect(self):
        """Waits for every handle: (their results, the first error or None)."""
        results, error = [], None
        for h in self._handles:
            try:
                results.append(mpi_ops.synchronize(h))
            except BaseException as e:  # noqa: B902 - reported through wait() / the future
                if error is None:
                    error = e
                results.append(None)
        return results, error

    def _handles_done(self):
        """True when waiting for the handles would not block."""
        return all(mpi_ops.poll(h) for h in self._handles)

    def _finish_now(self):
        results, error = self._collect()
        if error is None:
            try:
                self._outputs = self._finish(results)
            except BaseException as e:  # noqa: B902
                error = e
        if error is not None:
            text = str(error) if isinstance(error, errors.HoraError) else repr(error)
            self._error = DistBackendError("hora: %s failed: %s" % (self._what, text))
        with _future_lock:
            self._finished = True
            future = self._future
        if future is not None:
            self._settle(future)

    def wait(self, timeout=None):
        seconds = _seconds(timeout)
        if seconds is None:
            self._complete()
        elif not self._wait_for(seconds):
            raise DistBackendError("hora: %s did not complete within %.3f s (wait timeout)"
                                   % (self._what, seconds))
        if self._error is not None:
            raise self._error
        return True

    def _try_complete(self):
        """Finishes the Work here if its handles are done and nobody is finishing it now;
        never blocks (the completer may hold the lock while it waits for the handles)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self._finished and self._handles_done():
                self._finish_now()
        finally:
            self._lock.release()

    def _wait_for(self, seconds):
        """Waits up to `seconds`, finishing the Work here once its handles are done (the
        completer may be busy with an older Work that is still running)."""
        deadline = time.monotonic() + seconds
        while not self._finished:
            self._try_complete()
            left = deadline - time.monotonic()
            if self._finished or left <= 0:
                break
            time.sleep(min(left, 0.0005))
        return self._finished

    def is_completed(self):
        self._try_complete()
        return self._finished

    def is_success(self):
        return self._finished and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def get_future(self):
        with _future_lock:
            future, fresh = self._future, self._future is None
            if fresh:
                future = self._future = torch.futures.Future()
            done = self._finished
        if not done:
            _completer.wake()
        elif fresh:  # finished before anybody asked: settle it here
            self._settle(future)
        return future

    def _settle(self, future):
        if self._error is not None:
            future.set_exception(self._error)
        else:
            future.set_result(self._outputs)

    def synchronize(self):
        self.wait()

    def source_rank(self):
        return -1


class PeerWork(Work):
    """A send's or a recv's Work: the runtime's handles of p2p.submit, waited for and
    released directly rather than through hora.torch's handle table (p2p.submit)."""

    def _collect(self):
        error = None
        for h in self._handles:
            try:
                p2p.finished(h)
            except BaseException as e:  # noqa: B902
                if error is None:
                    error = e
        return None, error

    def _handles_done(self):
        return all(h.poll() for h in self._handles)


# Orders a Work's finishing against the creation of its future, so the future is settled once.
_future_lock = threading.Lock()


def done(what, outputs):
    """A Work with nothing to wait for (an empty call)."""
    return Work(what, [], lambda _: outputs)


class _Completer(object):
    """Finishes Works in start order on one daemon thread (started when first woken). Works
    queue without waking it: it runs when a future is asked for (wake) or when more than
    _BACKLOG Works wait, and then finishes every queued Work (those already finished by their
    wait() cost a lock each)."""

    _BACKLOG = 64

    def __init__(self):
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._thread = None
        self._woken = False

    def add(self, work):
        self._queue.append(work)  # deque.append is atomic: no lock on the hot path
        if len(self._queue) > self._BACKLOG:
            self.wake()

    def wake(self):
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hora-c10d-completer",
                                                daemon=True)
                self._thread.start()
            self._woken = True
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._woken:
                    self._cv.wait()
                if not self._queue:
                    self._woken = False
                    continue
                work = self._queue.popleft()
            work._complete()


_completer = _Completer()
