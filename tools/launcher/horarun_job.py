"""horarun: watch and stop the parts of one job, and forward their output.

A part is what one launcher started (horarun_launchers.py): a local rank, a remote rank
(its ssh), or the whole job under mpirun. The Job sees only the Part interface, so the
failure rules below hold the same way on every host and under every launcher.

The main thread polls the parts every 50 ms without reaping them (waitid WNOWAIT, see
horarun_agent.exited). When a part fails, or horarun gets SIGINT/SIGTERM/SIGHUP, every part
is asked to stop (SIGTERM, or SIGINT forwarded as SIGINT), then SIGKILL once the grace
period is over; a second signal sends SIGKILL at once. Parts that already exited are asked
too, so helper processes a rank left behind do not outlive the job. Every wait is bounded.

Output: one thread per pipe reads lines (longer ones in pieces of LINE_LIMIT) and hands them
to the part, which gives them to Output.rank_line with the rank they belong to: horarun's
stdout/stderr get `[RANK]<stdout>: line` (bytes as they came, flushed per line) and, with
--output-filename DIR, DIR/rank.RANK/stdout and stderr get the bare lines.
"""

import os
import signal
import sys
import threading
import time

POLL_S = 0.05
KILL_WAIT_S = 5.0      # after SIGKILL, how long to wait for the parts to end
DRAIN_S = 2.0          # after the parts are gone, how long to wait for their last output
LINE_LIMIT = 1 << 16   # longer lines are forwarded in pieces of this size

_write_lock = threading.Lock()


def say(text):
    """horarun's own messages: `horarun: ...` on stderr."""
    with _write_lock:
        try:
            sys.stderr.write("horarun: %s\n" % text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


class StartError(Exception):
    """A part could not start; `code` is horarun's exit code (127: command not found)."""

    def __init__(self, message, code):
        Exception.__init__(self, message)
        self.code = code


class Output:
    """Where ranks' lines go. Thread-safe."""

    def __init__(self, directory=None):
        self.directory = directory
        self.out = getattr(sys.stdout, "buffer", sys.stdout)
        self.err = getattr(sys.stderr, "buffer", sys.stderr)
        self.files = {}
        self.broken = set()

    def _console(self, stream, data):
        if stream in self.broken:
            return
        dest = self.out if stream == "stdout" else self.err
        try:
            dest.write(data)
            dest.flush()
        except (OSError, ValueError):
            self.broken.add(stream)  # our reader went away: keep draining the ranks

    def _file(self, rank, stream):
        key = (rank, stream)
        if key not in self.files:
            path = os.path.join(self.directory, "rank.%d" % rank)
            try:
                os.makedirs(path, exist_ok=True)
                self.files[key] = open(os.path.join(path, stream), "ab")
            except OSError as e:
                say("cannot write %s: %s" % (os.path.join(path, stream), e.strerror or e))
                self.files[key] = None
        return self.files[key]

    def rank_line(self, rank, stream, line):
        """line: bytes ending with a newline."""
        with _write_lock:
            self._console(stream, b"[%d]<%s>: " % (rank, stream.encode()) + line)
            if self.directory is not None:
                f = self._file(rank, stream)
                if f is not None:
                    try:
                        f.write(line)
                        f.flush()
                    except OSError:
                        pass

    def plain_line(self, stream, line):
        """A line that belongs to no rank (mpirun's own messages)."""
        with _write_lock:
            self._console(stream, line)

    def close(self):
        with _write_lock:
            for f in self.files.values():
                if f is not None:
                    f.close()
            self.files = {}


def pump(stream, on_line, name, on_eof=None):
    """Starts a thread that reads `stream` line by line until EOF and calls on_line(line)
    (a newline is added to a last line without one), then on_eof(); never raises."""
    def run():
        try:
            while True:
                line = stream.readline(LINE_LIMIT)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    line += b"\n"
                on_line(line)
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass
            if on_eof is not None:
                on_eof()
    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


class Job:
    def __init__(self, launchers, output, grace=5.0, verbose=False, keep_going=False):
        self.launchers = launchers
        self.output = output
        self.grace = grace
        self.verbose = verbose
        self.keep_going = keep_going
        self.first_failure = None  # code of the first part that failed, with keep_going
        self.parts = []
        self.signals = []  # signals horarun received, oldest first

    # -- signals -------------------------------------------------------------------------

    def _on_signal(self, signum, frame):
        self.signals.append(signum)

    def _on_diagnose(self, signum, frame):
        """horarun --diagnose: SIGUSR1 goes on to rank 0 (else the first rank on this host),
        whose Hora asks the coordinator for a diagnosis (horarun_diagnose.py)."""
        ranks = sorted((p for p in self.parts if getattr(p, "rank", None) is not None),
                       key=lambda p: p.rank)
        for p in ranks:
            if not p.poll():
                try:
                    os.kill(p.proc.pid, signal.SIGUSR1)
                except OSError:
                    continue
                return

    def _install_handlers(self):
        self._old = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._on_signal)
        self._old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._on_diagnose)

    def _restore_handlers(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    # -- start ---------------------------------------------------------------------------

    def _start(self):
        """Starts every part; returns an exit code if one could not start, else None."""
        for launcher in self.launchers:
            try:
                for part in launcher.start(self.output):
                    self.parts.append(part)
                    if self.verbose:
                        say("%s started" % part.label())
                    if self.signals:
                        return None
            except StartError as e:
                self.parts += getattr(e, "parts", [])
                say(str(e))
                return e.code
        return None

    # -- stop ----------------------------------------------------------------------------

    def _done(self):
        return all(p.poll() for p in self.parts) and not any(p.busy() for p in self.parts)

    def _stop(self, sig):
        """Sends sig to every part, SIGKILL after the grace period; waits bounded."""
        for p in self.parts:
            p.send(sig)
        deadline = time.monotonic() + self.grace
        seen = len(self.signals)
        while time.monotonic() < deadline:
            if len(self.signals) > seen:
                say("second signal: killing every rank now")
                break
            if self._done():
                return
            time.sleep(POLL_S)
        alive = [p for p in self.parts if not p.poll() or p.busy()]
        if alive and len(self.signals) <= seen:
            say("%s still running after %gs; sending SIGKILL"
                % (", ".join(p.label() for p in alive), self.grace))
        for p in self.parts:
            p.send(signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and not self._done():
            time.sleep(POLL_S)

    def _reap_and_drain(self):
        for p in self.parts:
            p.reap()
        deadline = time.monotonic() + DRAIN_S
        for p in self.parts:
            for t in p.threads:
                t.join(max(0.0, deadline - time.monotonic()))

    def _clean_leftovers(self):
        """Stops processes that ranks left behind after exiting."""
        if any(p.busy() for p in self.parts):
            if self.verbose:
                say("stopping processes the ranks left behind")
            self._stop(signal.SIGTERM)

    # -- run -----------------------------------------------------------------------------

    def run(self):
        """Runs the job to the end; returns horarun's exit code."""
        self._install_handlers()
        try:
            code = self._start()
            if code is not None:
                self._stop(signal.SIGTERM)
                self._reap_and_drain()
                return code
            code = self._watch()
            self._reap_and_drain()
            return code
        finally:
            # Never leave a part behind, whatever happened above.
            for p in self.parts:
                p.force_kill()
            self.output.close()
            self._restore_handlers()

    def _watch(self):
        while True:
            if self.signals:
                sig = self.signals[0]
                forward = signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM
                say("got %s; stopping every rank" % signal.Signals(sig).name)
                self._stop(forward)
                return 128 + sig
            for p in self.parts:
                if p.poll() and p.code != 0:
                    if self.keep_going:
                        if self.first_failure is None:
                            self.first_failure = p.code
                            say("%s %s; --keep-going: waiting for the other ranks"
                                % (p.label(), p.how))
                        continue
                    say("%s %s; stopping the other ranks" % (p.label(), p.how))
                    self._stop(signal.SIGTERM)
                    return p.code
            if all(p.poll() for p in self.parts):
                self._clean_leftovers()
                if self.first_failure is not None:
                    return self.first_failure
                if self.verbose:
                    say("all %d part(s) exited with code 0" % len(self.parts))
                return 0
            time.sleep(POLL_S)
