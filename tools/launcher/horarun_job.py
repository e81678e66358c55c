"""horarun: start, watch and stop the ranks of one job on this host.

Every rank runs in its own session (so its own process group), with stdin from /dev/null
and stdout/stderr on pipes. One thread per pipe forwards each line to horarun's stdout or
stderr as `[RANK]<stdout>: line`, writing bytes as they came (binary output is not decoded)
and flushing per line.

The main thread polls the ranks every 50 ms with waitid(WNOWAIT): it learns that a rank
exited without reaping it, so the rank's pid, which is also its process group id, stays
taken until horarun is done and killpg() can never hit an unrelated group. When a rank
fails, or horarun gets SIGINT/SIGTERM, every group gets SIGTERM (or the forwarded signal),
then SIGKILL once the grace period is over. Groups of ranks that already exited are
signalled too, so helper processes a rank left behind do not outlive the job. A second
SIGINT/SIGTERM during the grace period sends SIGKILL at once. Every wait is bounded.
"""

import os
import signal
import subprocess
import sys
import threading
import time

POLL_S = 0.05
KILL_WAIT_S = 5.0      # after SIGKILL, how long to wait for the kernel to finish the ranks
DRAIN_S = 2.0          # after the ranks are gone, how long to wait for their last output
LINE_LIMIT = 1 << 16   # longer lines are forwarded in pieces of this size

_write_lock = threading.Lock()


def _say(text):
    with _write_lock:
        try:
            sys.stderr.write("horarun: %s\n" % text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _exit_code(status):
    """waitid siginfo -> (code as a shell reports it, description)."""
    if status.si_code == os.CLD_EXITED:
        return status.si_status, "exited with code %d" % status.si_status
    try:
        name = signal.Signals(status.si_status).name
    except ValueError:
        name = "signal %d" % status.si_status
    return 128 + status.si_status, "was killed by %s (exit code %d)" % (
        name, 128 + status.si_status)


def _pump(stream, out, prefix):
    """Forwards one pipe line by line until EOF; never raises."""
    broken = False
    try:
        while True:
            line = stream.readline(LINE_LIMIT)
            if not line:
                break
            if broken:
                continue
            if not line.endswith(b"\n"):
                line += b"\n"
            with _write_lock:
                try:
                    out.write(prefix + line)
                    out.flush()
                except (OSError, ValueError):
                    broken = True  # our reader went away: keep draining the rank's pipe
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _group_alive(pgid):
    """True while any process of the group is alive (zombies do not count)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = None
    if entries is None:
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


class Rank:
    def __init__(self, rank, proc):
        self.rank = rank
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the rank leads its own group
        self.code = None      # set once it exited (still unreaped)
        self.how = ""         # "exited with code 3", "was killed by SIGKILL (exit code 137)"
        self.threads = []

    def poll(self):
        """Records the exit status without reaping; True once exited."""
        if self.code is None:
            try:
                status = os.waitid(os.P_PID, self.proc.pid,
                                   os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                status = None
                self.code, self.how = 255, "disappeared"
            if status is not None and status.si_pid == self.proc.pid:
                self.code, self.how = _exit_code(status)
        return self.code is not None

    def signal_group(self, sig):
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Job:
    def __init__(self, command, envs, grace=5.0, verbose=False, keep_going=False):
        self.command = list(command)
        self.envs = envs
        self.grace = grace
        self.verbose = verbose
        self.keep_going = keep_going
        self.first_failure = None  # (rank, code) of the first rank that failed, with keep_going
        self.ranks = []
        self.signals = []  # signals horarun received, oldest first

    # -- signals -------------------------------------------------------------------------

    def _on_signal(self, signum, frame):
        self.signals.append(signum)

    def _install_handlers(self):
        self._old = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._on_signal)

    def _restore_handlers(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    # -- start ---------------------------------------------------------------------------

    def _start(self):
        """Starts every rank; returns an exit code if one could not start, else None."""
        for rank, env in enumerate(self.envs):
            try:
                proc = subprocess.Popen(
                    self.command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
            except OSError as e:
                code = 127 if isinstance(e, FileNotFoundError) else 126
                why = "command not found" if code == 127 else (e.strerror or str(e))
                _say("cannot start rank %d: %s: %s" % (rank, self.command[0], why))
                return code
            self.ranks.append(Rank(rank, proc))
            if self.verbose:
                _say("rank %d started, pid %d" % (rank, proc.pid))
            if self.signals:
                return None
        return None

    def _start_output_threads(self):
        out = getattr(sys.stdout, "buffer", sys.stdout)
        err = getattr(sys.stderr, "buffer", sys.stderr)
        for r in self.ranks:
            for stream, dest, name in ((r.proc.stdout, out, "stdout"),
                                       (r.proc.stderr, err, "stderr")):
                prefix = ("[%d]<%s>: " % (r.rank, name)).encode()
                t = threading.Thread(target=_pump, args=(stream, dest, prefix),
                                     name="horarun-%d-%s" % (r.rank, name), daemon=True)
                t.start()
                r.threads.append(t)

    # -- stop ----------------------------------------------------------------------------

    def _stop(self, sig):
        """Sends sig to every group, SIGKILL after the grace period; waits bounded."""
        for r in self.ranks:
            r.signal_group(sig)
        deadline = time.monotonic() + self.grace
        seen = len(self.signals)
        while time.monotonic() < deadline:
            if len(self.signals) > seen:
                _say("second signal: killing every rank now")
                break
            exited = all(r.poll() for r in self.ranks)
            if exited and not any(_group_alive(r.pgid) for r in self.ranks):
                return
            time.sleep(POLL_S)
        alive = [r for r in self.ranks if not r.poll() or _group_alive(r.pgid)]
        if alive and len(self.signals) <= seen:
            _say("rank(s) %s still running after %gs; sending SIGKILL"
                 % (",".join(str(r.rank) for r in alive), self.grace))
        for r in self.ranks:
            r.signal_group(signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and not all(r.poll() for r in self.ranks):
            time.sleep(POLL_S)

    def _reap_and_drain(self):
        for r in self.ranks:
            if r.poll():
                r.proc.wait()
        deadline = time.monotonic() + DRAIN_S
        for r in self.ranks:
            for t in r.threads:
                t.join(max(0.0, deadline - time.monotonic()))

    def _clean_leftovers(self):
        """Stops processes that ranks left behind in their groups after exiting."""
        if any(_group_alive(r.pgid) for r in self.ranks):
            if self.verbose:
                _say("stopping processes the ranks left behind")
            self._stop(signal.SIGTERM)

    # -- run -----------------------------------------------------------------------------

    def run(self):
        """Runs the job to the end; returns horarun's exit code."""
        self._install_handlers()
        try:
            code = self._start()
            self._start_output_threads()
            if code is not None:
                self._stop(signal.SIGTERM)
                self._reap_and_drain()
                return code
            code = self._watch()
            self._reap_and_drain()
            return code
        finally:
            # Never leave a rank behind, whatever happened above.
            for r in self.ranks:
                if r.proc.returncode is None:
                    r.signal_group(signal.SIGKILL)
            self._restore_handlers()

    def _watch(self):
        while True:
            if self.signals:
                sig = self.signals[0]
                forward = signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM
                _say("got %s; stopping every rank" % signal.Signals(sig).name)
                self._stop(forward)
                return 128 + sig
            for r in self.ranks:
                if r.poll() and r.code != 0:
                    if self.keep_going:
                        if self.first_failure is None:
                            self.first_failure = (r.rank, r.code)
                            _say("rank %d (pid %d) %s; --keep-going: waiting for the other ranks"
                                 % (r.rank, r.proc.pid, r.how))
                        continue
                    _say("rank %d (pid %d) %s; stopping the other ranks"
                         % (r.rank, r.proc.pid, r.how))
                    self._stop(signal.SIGTERM)
                    return r.code
            if all(r.poll() for r in self.ranks):
                self._clean_leftovers()
                if self.first_failure is not None:
                    return self.first_failure[1]
                if self.verbose:
                    _say("all %d rank(s) exited with code 0" % len(self.ranks))
                return 0
            time.sleep(POLL_S)
