"""A rank for the multi-host launcher tests (tests/multihost/test_multihost.py).

    rank_prog.py env                 print one JSON line: host, cwd, stdin, HORA_* and TEST_*
    rank_prog.py hold DIR [FAIL]     write DIR/pid.RANK ("HOST PID CHILD"), start a child that
                                     sleeps; rank FAIL exits 3 once every rank wrote its file;
                                     the others (rank 1 ignoring SIGTERM) wait for DIR/go
    rank_prog.py token DIR MARK      print the job token, write DIR/pid.RANK, wait for DIR/go
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time


def write_pid(d, extra):
    r = os.environ["HORA_RANK"]
    tmp = os.path.join(d, "pid.%s.tmp" % r)
    with open(tmp, "w") as f:
        f.write(" ".join([socket.gethostname(), str(os.getpid())] + [str(x) for x in extra]))
    os.rename(tmp, os.path.join(d, "pid." + r))


def wait_for(path, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(path):
        time.sleep(0.05)


def main():
    mode = sys.argv[1]
    if mode == "env":
        st0, null = os.fstat(0), os.stat("/dev/null")
        print(json.dumps({
            "host": socket.gethostname(), "cwd": os.getcwd(),
            "cpus": sorted(os.sched_getaffinity(0)),
            "stdin_null": st0.st_rdev == null.st_rdev and sys.stdin.read() == "",
            "env": {k: v for k, v in os.environ.items()
                    if k.startswith(("HORA_", "TEST_")) or k in ("HOME", "PATH")}}))
        return 0
    d = sys.argv[2]
    size = int(os.environ["HORA_SIZE"])
    if mode == "hold":
        fail = int(sys.argv[3]) if len(sys.argv) > 3 else -1
        rank = int(os.environ["HORA_RANK"])
        child = subprocess.Popen(["sleep", "300"])
        if rank == 1:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        write_pid(d, [child.pid])
        if rank == fail:
            while len([f for f in os.listdir(d) if f.startswith("pid.") and
                       not f.endswith(".tmp")]) < size:
                time.sleep(0.02)
            return 3
        wait_for(os.path.join(d, "go"), 300)
        return 0
    if mode == "token":
        print("TOKEN " + os.environ["HORA_JOB_TOKEN"], flush=True)
        write_pid(d, [])
        wait_for(os.path.join(d, "go"), 120)
        return 0
    raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    sys.exit(main())
