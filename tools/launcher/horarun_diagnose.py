"""horarun --diagnose [PID]: a report of every rank of a running job, the job left as it was.

The running horarun (PID) forwards SIGUSR1 to its rank 0 (horarun_job.Job; else to the first
rank on this host: any rank can ask); that rank's Hora asks the coordinator for a diagnosis
(HORA_DIAGNOSE_SIGNAL, runtime/diagnose_signal.h), and rank 0 appends the report to the job's
diagnosis file (HORA_DIAGNOSE_FILE; horarun sets it to default_file(its pid) unless given).
This command waits for a new complete report in that file and prints it. Linux only (/proc).
Standard library only."""

import os
import signal
import sys
import time

DIAGNOSE_FILE_VAR = "HORA_DIAGNOSE_FILE"  # runtime/options.h kEnvDiagnoseFile
WAIT_S = 30.0  # the diagnosis itself waits HORA_DIAGNOSE_SECONDS (3 s by default)
END = "=== end of hora diagnosis "


def default_file(horarun_pid):
    return "/tmp/hora-diagnosis-%d.txt" % horarun_pid


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def _is_horarun(args):
    return bool(args) and any(os.path.basename(a) == "horarun" for a in args[:2]) and \
        "--diagnose" not in args


def _running_horaruns():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and _is_horarun(_cmdline(int(name))):
            found.append(int(name))
    return sorted(found)


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            pairs = [e.partition(b"=") for e in f.read().split(b"\0") if e]
        return {k.decode(): v.decode("utf-8", "replace") for k, _, v in pairs}
    except OSError:
        return {}


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def report_file(pid):
    """The diagnosis file of horarun PID's job: what its ranks were given."""
    for child in _children(pid):
        path = _environ(child).get(DIAGNOSE_FILE_VAR)
        if path:
            return path
    return _environ(pid).get(DIAGNOSE_FILE_VAR) or default_file(pid)


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def main(which):
    if which == "auto":
        pids = _running_horaruns()
        if not pids:
            sys.stderr.write("horarun: error: --diagnose: no running horarun on this host\n")
            return 1
        if len(pids) > 1:
            sys.stderr.write("horarun: error: --diagnose: %d horaruns are running (pids %s); "
                             "give one: horarun --diagnose PID\n"
                             % (len(pids), ", ".join(map(str, pids))))
            return 1
        pid = pids[0]
    else:
        pid = int(which)
        if not _is_horarun(_cmdline(pid)):
            sys.stderr.write("horarun: error: --diagnose %d: no horarun runs with that process "
                             "id\n" % pid)
            return 1
    path = report_file(pid)
    start = _size(path)
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as e:
        sys.stderr.write("horarun: error: --diagnose %d: %s\n" % (pid, e))
        return 1
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if _size(path) > start:
            with open(path, "rb") as f:
                f.seek(start)
                text = f.read().decode("utf-8", "replace")
            if END in text:
                sys.stdout.write(text[:text.index(END)] + text[text.index(END):].split("\n")[0]
                                 + "\n")
                return 0
        time.sleep(0.1)
    sys.stderr.write("horarun: error: --diagnose %d: no report in %s within %.0f s (is rank 0 "
                     "of that job on this host, and HORA_DIAGNOSE_SECONDS not 0?)\n"
                     % (pid, path, WAIT_S))
    return 1
