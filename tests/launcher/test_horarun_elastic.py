"""horarun's elastic mode on one host (tools/launcher/horarun_elastic.py): bad combinations of
the elastic flags are usage errors that start nothing; workers run to their end; every worker
failing ends the job with the first failure's code, and so does a failure that blacklists the
only host (the driver stops its other workers). Across hosts:
tests/multihost/test_elastic_hosts.py."""

from test_horarun import PY, horarun, rank_lines


def test_bad_elastic_flags_are_usage_errors():
    for bad, message in ((["-np", "2", "--min-np", "3"], "need --min-np (3) <= -np (2)"),
                         (["-np", "2", "--max-np", "1"], "<= --max-np (1)"),
                         (["-np", "2", "--min-np", "1", "--mpi"], "not --mpi"),
                         (["-np", "2", "--min-np", "1", "--reset-limit", "-1"],
                          "--reset-limit -1: must not be negative"),
                         (["-np", "2", "--min-np", "1", "--elastic-timeout", "0"],
                          "must be positive"),
                         (["--max-np", "2"], "needs -np or --min-np")):
        rc, out, err, _ = horarun(*(bad + [PY, "-c", "print('ran')"]))
        assert rc == 2 and message in err and "ran" not in out, (bad, err)


def test_elastic_mode_on_one_host_runs_the_workers_to_their_end():
    # Workers that never call hvd.init: the driver starts them, they finish, exit 0.
    # HOROVOD_HOSTNAME is the host as the host list names it (Horovod's scripts key on it).
    # Horovod's rank variables are set at launch, for the generation the worker will join.
    rc, out, err, _ = horarun("-np", "2", "--min-np", "1", "--elastic-timeout", "30", PY, "-c",
                              "import os; print('worker', os.environ['HORARUN_WORKER'], "
                              "os.environ['HOROVOD_HOSTNAME'], *(os.environ['HOROVOD_' + k] "
                              "for k in ('RANK', 'SIZE', 'LOCAL_RANK', 'LOCAL_SIZE', "
                              "'CROSS_RANK', 'CROSS_SIZE')))")
    assert rc == 0, err
    assert rank_lines(out) == {0: ["worker 0 localhost 0 2 0 2 0 1"],
                               1: ["worker 1 localhost 1 2 1 2 0 1"]}, out
    assert "elastic: generation 0: 2 rank(s) on localhost" in err, err
    # Every worker failing: the first failure's code.
    rc, out, err, _ = horarun("-np", "2", "--min-np", "1", PY, "-c", "raise SystemExit(5)")
    assert rc == 5 and "the first failure's code is 5" in err, err
    # A failure blacklists its host: the driver stops the other worker there (Horovod's rule),
    # and the end names both.
    rc, out, err, _ = horarun("-np", "2", "--min-np", "1", PY, "-c",
                              "import os, time\n"
                              "if os.environ['HORARUN_WORKER'] == '0': raise SystemExit(3)\n"
                              "time.sleep(60)")
    assert rc == 3, err
    assert "host localhost blacklisted" in err, err
    assert ("no worker is left: 1 failed, 1 stopped by the driver (their host was blacklisted "
            "or is no longer offered); the first failure's code is 3") in err, err
