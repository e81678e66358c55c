"""horarun --mpi: the whole job through Open MPI's mpirun.

One mpirun starts every rank on every host (`-H` with the slots each host uses, ranks
filled in host order by `--map-by slot`, exactly horarun's own placement). The job's
environment reaches the ranks through `-x NAME` (names only: the values, the job token
among them, travel in mpirun's environment, never on a command line). Each rank runs
through a small shell shim that sets HORA_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE from Open MPI's
OMPI_COMM_WORLD_* and HORA_CROSS_RANK from horarun's placement table, then execs the
command. mpirun's `--tag-output` prefixes ("[1,3]<stdout>:") are rewritten to horarun's
("[3]<stdout>: ").

Stopping: SIGINT/SIGTERM go to mpirun, which stops the ranks on every host; SIGKILL goes to
every process of mpirun's session on this host (mpirun gives each local rank its own
process group, but they stay in its session); the remote orteds end their ranks when they
lose mpirun.
"""

import os
import re
import shlex
import signal
import time

import horarun_agent as agent
from horarun_job import StartError, pump
from horarun_launchers import Launcher, PopenPart

TAG = re.compile(rb"\[\d+,(\d+)\]<(stdout|stderr)>:")
# Open MPI's own report of the first rank that failed ("Exit code:    7" in its "mpirun
# detected that one or more processes exited with non-zero status" block, or "exited on
# signal 9" in its "mpirun noticed that process rank 1 ..." line).
REPORTED_EXIT = re.compile(rb"^\s*Exit code:\s+(\d+)\s*$")
REPORTED_SIGNAL = re.compile(rb"process rank (\d+) with PID \d+ .*exited on signal (\d+)")
# How long horarun waits for mpirun's last lines once mpirun exited with 0.
LAST_LINES_S = 5.0

SHIM = """export HORA_RANK="$OMPI_COMM_WORLD_RANK" HORA_SIZE="$OMPI_COMM_WORLD_SIZE"
export HORA_LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" HORA_LOCAL_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"
i=0
for c in $HORARUN_CROSS_RANKS; do
  [ "$i" = "$HORA_RANK" ] && HORA_CROSS_RANK=$c
  i=$((i + 1))
done
export HORA_CROSS_RANK
export HOROVOD_RANK="$HORA_RANK" HOROVOD_SIZE="$HORA_SIZE" HOROVOD_LOCAL_RANK="$HORA_LOCAL_RANK"
export HOROVOD_LOCAL_SIZE="$HORA_LOCAL_SIZE" HOROVOD_CROSS_RANK="$HORA_CROSS_RANK"
export HOROVOD_CROSS_SIZE="$HORA_CROSS_SIZE"
export RANK="$HORA_RANK" WORLD_SIZE="$HORA_SIZE" LOCAL_RANK="$HORA_LOCAL_RANK"
export LOCAL_WORLD_SIZE="$HORA_LOCAL_SIZE" GROUP_RANK="$HORA_CROSS_RANK"
unset HORARUN_CROSS_RANKS
exec "$@"
"""

# Variables never passed with -x: those of an outer launcher, and those the shim sets.
NOT_PASSED = re.compile(r"^(OMPI_|PMIX_|PMI_|HORA_RANK$|HORA_SIZE$|HORA_LOCAL_|HORA_HOSTNAME$"
                        r"|HORA_CROSS_RANK$|HOROVOD_(RANK|SIZE|LOCAL_|CROSS_RANK$|HOSTNAME$)"
                        r"|RANK$|WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$)")


def split_tagged(line):
    """mpirun --tag-output line -> [(rank or None, stream or None, text)]; text before the
    first tag is mpirun's own. mpirun tags every write of a rank, so a line a rank wrote in
    pieces (`printf "a "; printf "b\\n"`, or print() under PYTHONUNBUFFERED) arrives as several
    tagged pieces, and pieces of several ranks may share one line: the text of a piece keeps
    its own ending (TaggedLines joins them)."""
    pieces = TAG.split(line)
    result = []
    if pieces[0].strip():
        result.append((None, None, pieces[0]))
    for i in range(1, len(pieces) - 2, 3):
        result.append((int(pieces[i]), pieces[i + 1].decode(), pieces[i + 2]))
    return result


class TaggedLines:
    """Joins each rank's tagged pieces into whole lines: feed(line) returns the
    (rank or None, stream or None, text) lines completed so far (text ends with a newline;
    mpirun's own text as it came), flush() what is left of unfinished ones at the end."""

    def __init__(self):
        self.partial = {}  # (rank, stream) -> bytes without a newline yet

    def feed(self, line):
        done = []
        for rank, stream, text in split_tagged(line):
            if rank is None:
                done.append((None, None, text if text.endswith(b"\n") else text + b"\n"))
                continue
            parts = (self.partial.pop((rank, stream), b"") + text).split(b"\n")
            done.extend((rank, stream, p + b"\n") for p in parts[:-1])
            if parts[-1]:
                self.partial[(rank, stream)] = parts[-1]
        return done

    def flush(self):
        done = [(r, s, t + b"\n") for (r, s), t in sorted(self.partial.items())]
        self.partial.clear()
        return done


def reported_failure(line):
    """The exit code (128+N for signal N) mpirun's own message line reports for a failed
    rank, else None."""
    m = REPORTED_EXIT.match(line)
    if m:
        return int(m.group(1))
    m = REPORTED_SIGNAL.search(line)
    if m:
        return 128 + int(m.group(2))
    return None


class MpiJob(PopenPart):
    def __init__(self, proc, output):
        PopenPart.__init__(self, proc)
        self.reported = None  # first failed rank's code, as mpirun's own messages say it
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            joined = TaggedLines()  # one per mpirun stream: each is read by its own thread
            self.threads.append(pump(
                stream, lambda line, n=name, j=joined: self._lines(output, n, j.feed(line)),
                "horarun-mpirun-%s" % name,
                on_eof=lambda n=name, j=joined: self._lines(output, n, j.flush())))

    def _lines(self, output, stream, lines):
        for rank, tagged_stream, text in lines:
            if rank is None:
                output.plain_line(stream, text)
                code = reported_failure(text)
                if code and self.reported is None:
                    self.reported = code
            else:
                output.rank_line(rank, tagged_stream, text)

    def _describe(self, code, how):
        """Open MPI 4.1 now and then exits with 0 although it has just printed that a rank
        failed (seen under load: "Exit code: 7", then status 0); the job failed, so horarun
        reports the code mpirun printed."""
        if code != 0:
            return code, how
        deadline = time.monotonic() + LAST_LINES_S
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self.reported is None:
            return code, how
        return self.reported, ("exited with code 0 although it reported a rank that "
                               "exited with code %d" % self.reported)

    def label(self):
        return "mpirun (pid %d)" % self.proc.pid

    def send(self, sig):
        if sig != signal.SIGKILL:
            agent.signal_group(self.pgid, sig)
            return
        for pid in agent.session_members(self.pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def busy(self):
        return bool(agent.session_members(self.pgid))

    def force_kill(self):
        self.send(signal.SIGKILL)


class MpiLauncher(Launcher):
    """Every rank of the job through one mpirun."""

    def __init__(self, command, hosts, np, env, passed, ssh=None, nics=(), mpi_args="",
                 bind="none"):
        """hosts: [(name, ranks on it)] in placement order; env: mpirun's environment
        (the job's, with HORA_COORDINATOR_ADDR, HORA_JOB_TOKEN, HORARUN_CROSS_RANKS);
        passed: the names of env that reach the ranks (-x NAME)."""
        self.command = list(command)
        self.hosts = hosts
        self.np = np
        self.env = env
        self.passed = passed
        self.ssh = ssh
        self.nics = list(nics)
        self.mpi_args = mpi_args
        self.bind = bind

    def argv(self):
        argv = ["mpirun"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += ["--tag-output", "-np", str(self.np),
                 "-H", ",".join("%s:%d" % h for h in self.hosts),
                 "--bind-to", self.bind, "--map-by", "slot"]
        if self.ssh is not None:
            argv += ["--mca", "plm_rsh_agent", " ".join(["ssh"] + self.ssh.options())]
        if self.nics:
            argv += ["--mca", "btl_tcp_if_include", ",".join(self.nics),
                     "--mca", "oob_tcp_if_include", ",".join(self.nics)]
        for name in sorted(self.passed):
            if not NOT_PASSED.match(name):
                argv += ["-x", name]
        argv += shlex.split(self.mpi_args or "")
        return argv + ["/bin/sh", "-c", SHIM, "horarun-rank"] + self.command

    def start(self, output):
        proc, error = agent.start_command(self.argv(), self.env)
        if error:
            raise StartError("cannot start %s" % error[1], error[0])
        return [MpiJob(proc, output)]
