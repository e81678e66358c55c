"""The Python hook of Hora's diagnosis (docs/failure-model.md "Diagnosis").

A daemon thread waits in hora_diagnosis_wait; when a diagnosis asks for this rank's state, it
answers with the stacks of every Python thread (sys._current_frames) and, in one line, where
the main thread is, innermost frame first, leaving out Hora's own frames. When Python cannot
run (a C call that holds the GIL), this thread cannot either: the C library then answers
without it after half of HORA_DIAGNOSE_SECONDS and says so.
"""

import ctypes
import os
import signal
import sys
import threading
import traceback

from . import _lib

_HORA_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_FRAMES = 6
_lock = threading.Lock()
_thread = None

# HORA_DIAGNOSE_SIGNAL (SIGUSR1 by default) asks for a diagnosis once Hora runs; until then its
# default action would end the process (horarun --diagnose during a rank's start). "Ignore"
# until init, where Hora's handler replaces it (runtime/diagnose_signal.h); a handler of the
# program's own is left alone.
try:
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
except (ValueError, OSError):  # not the main thread, or no such signal here
    pass


def _ours(filename):
    return os.path.abspath(filename).startswith(_HORA_DIR)


def where(frame):
    """'f (a.py:3) <- g (a.py:9)': the innermost frames outside the hora package."""
    parts = []
    while frame is not None and len(parts) < _MAX_FRAMES:
        code = frame.f_code
        if not _ours(code.co_filename):
            parts.append("%s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename),
                                         frame.f_lineno))
        frame = frame.f_back
    return " <- ".join(parts)


def stacks(skip_ident=None):
    """(where of the main thread, every thread's stack as text)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    frames = sys._current_frames()
    text = []
    for ident, frame in sorted(frames.items(), key=lambda kv: kv[0] != main):
        if ident == skip_ident:
            continue
        text.append("thread %s (%d)%s:\n%s" % (names.get(ident, "?"), ident,
                                               " [main]" if ident == main else "",
                                               "".join(traceback.format_stack(frame))))
    return (where(frames[main]) if main in frames else ""), "\n".join(text)


def _loop(lib):
    global _thread
    me = threading.get_ident()
    request = ctypes.c_int64()
    while True:
        status = lib.hora_diagnosis_wait(1.0, ctypes.byref(request))
        if status == 0:
            try:
                w, s = stacks(skip_ident=me)
            except Exception as e:  # never let the hook die on a strange frame
                w, s = "", "the stacks could not be read: %r" % (e,)
            lib.hora_diagnosis_answer(request.value, w.encode("utf-8", "replace"),
                                      s.encode("utf-8", "replace"))
        elif status == 5:  # HORA_ERR_DEADLINE_EXCEEDED: no request yet
            continue
        else:  # shut down: end, unless a new runtime started meanwhile
            with _lock:
                if not lib.hora_is_initialized():
                    _thread = None
                    return


def start():
    """Starts the hook's thread once per running runtime (hora.init calls it)."""
    global _thread
    lib = _lib.lib()
    with _lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_loop, args=(lib,), name="hora-diagnosis",
                                   daemon=True)
        _thread.start()
