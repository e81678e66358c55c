"""horarun: the Launcher interface, the Part interface the Job watches, and the local
launcher. The ssh launcher is in horarun_ssh.py, the mpirun launcher in horarun_mpi.py.

A launcher is given the ranks it is responsible for (RankSpec: rank, host, environment) and
starts them; what it returns are Parts. Which launchers a job uses is decided once, in
horarun_lib.make_launchers: this host's ranks -> LocalLauncher, each other host's ranks ->
an SshLauncher, or with --mpi every rank -> one MpiLauncher.
"""

import signal

import horarun_agent as agent
from horarun_job import StartError, pump


class RankSpec:
    """One rank to start: its number, its host's name (as given to -H) and whether that
    is this host, its hostname (HORA_HOSTNAME), and its whole environment."""

    def __init__(self, rank, host, local, hostname, env):
        self.rank = rank
        self.host = host
        self.local = local
        self.hostname = hostname
        self.env = env


class Launcher:
    """Starts some of a job's ranks. Interface."""

    def start(self, output):
        """Starts this launcher's ranks; returns their Parts, whose output goes to `output`
        (horarun_job.Output). Raises StartError (with .parts: those already started) when
        one cannot start; a rank that fails later is reported by its Part."""
        raise NotImplementedError


class Part:
    """What the Job watches: started by a Launcher. Interface.

    After poll() returns True, `code` is the exit code horarun reports (128+N for a signal)
    and `how` says it in words ("exited with code 3"). `threads` are the output threads.
    """

    code = None
    how = ""
    threads = ()

    def label(self):
        """'rank 2 (pid 42)', 'rank 3 on b (pid 77)', 'mpirun (pid 9)'."""
        raise NotImplementedError

    def poll(self):
        """True once it exited (not reaped yet)."""
        raise NotImplementedError

    def send(self, sig):
        """Asks every process of the part to stop: SIGINT, SIGTERM or SIGKILL."""
        raise NotImplementedError

    def busy(self):
        """True while any process it started (also ones a rank left behind) is alive."""
        raise NotImplementedError

    def reap(self):
        """Reaps what poll() saw exit."""
        raise NotImplementedError

    def force_kill(self):
        """SIGKILL to whatever of it may still run on this host; for the very end."""
        raise NotImplementedError


class PopenPart(Part):
    """A Part that is one child process of horarun, leader of its own process group."""

    def __init__(self, proc):
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: it leads its own group
        self.threads = []

    def _exited(self):
        """(code, how) once the child exited, else None."""
        return agent.exited(self.proc.pid)

    def poll(self):
        if self.code is None:
            result = self._exited()
            if result is not None:
                self.code, self.how = self._describe(*result)
        return self.code is not None

    def _describe(self, code, how):
        return code, how

    def send(self, sig):
        agent.signal_group(self.pgid, sig)

    def busy(self):
        return agent.group_alive(self.pgid)

    def reap(self):
        if self.poll() and self.proc.returncode is None:
            self.proc.wait()

    def force_kill(self):
        if self.proc.returncode is None:
            agent.signal_group(self.pgid, signal.SIGKILL)


class LocalRank(PopenPart):
    def __init__(self, rank, proc, output):
        PopenPart.__init__(self, proc)
        self.rank = rank
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            self.threads.append(pump(
                stream, lambda line, n=name: output.rank_line(rank, n, line),
                "horarun-%d-%s" % (rank, name)))

    def label(self):
        return "rank %d (pid %d)" % (self.rank, self.proc.pid)


class LocalLauncher(Launcher):
    """Starts ranks on this host directly: each in its own session (so its own process
    group), stdin from /dev/null, stdout/stderr through horarun."""

    def __init__(self, command, specs):
        self.command = list(command)
        self.specs = specs

    def start(self, output):
        parts = []
        for spec in self.specs:
            proc, error = agent.start_command(self.command, spec.env)
            if error:
                e = StartError("cannot start rank %d: %s" % (spec.rank, error[1]), error[0])
                e.parts = parts
                raise e
            parts.append(LocalRank(spec.rank, proc, output))
        return parts
