"""horovodrun's flags that horarun accepts beside its own (a command line written for
horovodrun keeps working): those that apply become the Hora variables they mean, those that
have no meaning in Hora are accepted and named on stderr with the reason, and the elastic
ones switch horarun to its elastic driver (horarun_elastic.py)."""

import argparse

# flag -> (variable, value or None for the flag's argument)
_APPLY = {
    "--hierarchical-allreduce": ("HORA_HIERARCHICAL_ALLREDUCE", "1"),
    "--no-hierarchical-allreduce": ("HORA_HIERARCHICAL_ALLREDUCE", "0"),
    "--no-stall-check": ("HORA_STALL_WARNING_SECONDS", "10000000"),
    "--stall-check-warning-time-seconds": ("HORA_STALL_WARNING_SECONDS", None),
    "--stall-check-shutdown-time-seconds": ("HORA_STALL_TIMEOUT_SECONDS", None),
    "--gloo-timeout-seconds": ("HORA_COLLECTIVE_TIMEOUT_SECONDS", None),
    "--timeline-mark-cycles": ("HORA_TIMELINE_MARK_CYCLES", "1"),
    "--no-timeline-mark-cycles": ("HORA_TIMELINE_MARK_CYCLES", "0"),
}

# flag -> (takes a value, why it has no effect)
_IGNORED = {
    "--cache-capacity": (True, "Hora has no response cache to size"),
    "--hierarchical-allgather": (False, "only allreduce is hierarchical in Hora"),
    "--no-hierarchical-allgather": (False, "only allreduce is hierarchical in Hora"),
    "--num-nccl-streams": (True, "this build has no NCCL data plane"),
    "--thread-affinity": (True, "Hora does not pin its threads"),
    "--mpi-threads-disable": (False, "Hora's MPI backend always asks for MPI_THREAD_MULTIPLE"),
    "--tcp": (False, "Hora's control plane is always TCP (gRPC)"),
    "--binding-args": (True, "pass mpirun's binding options with --mpi-args"),
    "--prefix-output-with-timestamp": (False, "horarun prefixes lines with the rank only"),
    "--torus-allreduce": (False, "NCCL's torus allreduce is not built; across hosts Hora's "
                          "allreduce is hierarchical (--hierarchical-allreduce)"),
    "--no-torus-allreduce": (False, "Hora has no torus allreduce"),
    "--no-autotune": (False, "Hora tunes only with --autotune"),
    "--autotune-bayes-opt-max-samples": (True, "Hora's autotuner searches a fixed grid "
                                         "(docs/autotune.md)"),
    "--autotune-gaussian-process-noise": (True, "Hora's autotuner searches a fixed grid "
                                          "(docs/autotune.md)"),
    "--stall-check": (False, "the stall check is on unless --no-stall-check"),
    "--no-mpi-threads-disable": (False, "Hora's MPI backend always asks for "
                                 "MPI_THREAD_MULTIPLE"),
    "--log-with-timestamp": (False, "Hora's log lines carry no timestamp"),
    "--log-without-timestamp": (False, "Hora's log lines carry no timestamp"),
    "--log-hide-timestamp": (False, "Hora's log lines carry no timestamp"),
    "--no-log-hide-timestamp": (False, "Hora's log lines carry no timestamp"),
}

# flag -> (takes a value, why horarun refuses it: a usage error naming the flag, rather than
# a job that runs otherwise than the command line says)
_REFUSED = {
    "--config-file": (True, "Horovod's YAML settings file is not read; give the settings as "
                            "horarun flags or HORA_* variables (docs/options.md)"),
    "--jsrun": (False, "jsrun (LSF) does not start Hora jobs; use --mpi, -H or --hostfile"),
}

# horovodrun's other spellings of the flags above
_ALIASES = {
    "--min-np": ["--min-num-proc"],
    "--max-np": ["--max-num-proc"],
    "--prefix-output-with-timestamp": ["-prefix-timestamp"],
}

# flag -> (dest, type, nargs, help)
_ELASTIC = {
    "--min-np": ("min_np", int, None, "elastic: fewest workers the job goes on with "
                 "(default -np)"),
    "--max-np": ("max_np", int, None, "elastic: most workers (default: every slot offered)"),
    "--host-discovery-script": ("discovery_script", str, None, "elastic: a program that "
                                "prints the usable hosts, `host` or `host:slots` per line; "
                                "run every second"),
    "--slots-per-host": ("slots", int, None, "elastic: slots of a host printed without "
                         "them (default 1)"),
    "--reset-limit": ("reset_limit", int, None, "elastic: most times the job re-forms "
                      "(default: no limit; %s)" % "HORA_ELASTIC_RESET_LIMIT"),
    "--blacklist-cooldown-range": ("cooldown", int, 2, "elastic: a failed host's time out, "
                                   "LO*2^(n-1) seconds after its n-th failure, at most HI "
                                   "(default: for good)"),
    "--elastic-timeout": ("timeout", float, None, "elastic: how long the job waits "
                          "for --min-np workers (default 600; HORA_ELASTIC_TIMEOUT, "
                          "HOROVOD_ELASTIC_TIMEOUT)"),
}
ELASTIC_TIMEOUT_VARS = ("HORA_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT")
RESET_LIMIT_VAR = "HORA_ELASTIC_RESET_LIMIT"
DEFAULT_ELASTIC_TIMEOUT_S = 600.0


def add_flags(parser):
    """Adds horovodrun's flags to horarun's parser, in a group of their own in --help (the
    elastic ones hidden)."""
    g = parser.add_argument_group("horovodrun's flags (accepted for compatibility)")
    for flag, (_, value) in _APPLY.items():
        if value is None:
            g.add_argument(flag, dest=_dest(flag), type=float, metavar="SECONDS")
        else:
            g.add_argument(flag, dest=_dest(flag), action="store_true")
    for flag, (takes_value, _) in _IGNORED.items():
        names = [flag] + _ALIASES.get(flag, [])
        if takes_value:
            g.add_argument(*names, dest=_dest(flag), metavar="VALUE")
        else:
            g.add_argument(*names, dest=_dest(flag), action="store_true")
    for flag, (takes_value, _) in _REFUSED.items():
        if takes_value:
            g.add_argument(flag, dest=_dest(flag), help=argparse.SUPPRESS)
        else:
            g.add_argument(flag, dest=_dest(flag), action="store_true", help=argparse.SUPPRESS)
    e = parser.add_argument_group("elastic mode (horovodrun's elastic flags)")
    for flag, (dest, kind, nargs, text) in _ELASTIC.items():
        e.add_argument(flag, *_ALIASES.get(flag, []), dest="elastic_" + dest, type=kind,
                       nargs=nargs, help=text, metavar=("LO", "HI") if nargs == 2 else "VALUE")
    e.add_argument("--slots", dest="elastic_slots", type=int, help=argparse.SUPPRESS)


def _dest(flag):
    return "horovod_" + flag.lstrip("-").replace("-", "_")


def flag_env(args):
    """(the HORA_* variables of the horovodrun flags given, notes for stderr); raises
    ValueError for a bad value."""
    env, notes = {}, []
    for flag, (_, why) in _REFUSED.items():
        given = getattr(args, _dest(flag))
        if given is not None and given is not False:
            raise ValueError("%s is not supported: %s" % (flag, why))
    for flag, (var, value) in _APPLY.items():
        given = getattr(args, _dest(flag))
        if given is None or given is False:
            continue
        if value is None:
            if given < 0:
                raise ValueError("%s %s: must not be negative" % (flag, given))
            value = "%g" % given
        env[var] = value
    for flag, (_, why) in _IGNORED.items():
        given = getattr(args, _dest(flag))
        if given is not None and given is not False:
            notes.append("horarun: %s has no effect: %s" % (flag, why))
    return env, notes


def is_elastic(args):
    return any(getattr(args, "elastic_" + d) is not None
               for d in ("min_np", "max_np", "discovery_script"))


def elastic_settings(args, environ):
    """The elastic flags (and their variables) checked: a horarun_elastic.Settings; raises
    ValueError naming the flag or variable."""
    from horarun_elastic import Settings
    np, lo, hi = args.np, args.elastic_min_np, args.elastic_max_np
    for flag, v in (("-np", np), ("--min-np", lo), ("--max-np", hi),
                    ("--slots-per-host", args.elastic_slots)):
        if v is not None and v < 1:
            raise ValueError("%s %d: must be at least 1" % (flag, v))
    if np is None and lo is None:
        raise ValueError("elastic mode needs -np or --min-np")
    np = np if np is not None else lo
    lo = lo if lo is not None else np
    if lo > np or (hi is not None and hi < np):
        raise ValueError("need --min-np (%d) <= -np (%d) <= --max-np (%s)" % (lo, np, hi))
    limit = args.elastic_reset_limit
    if limit is None and environ.get(RESET_LIMIT_VAR):
        try:
            limit = int(environ[RESET_LIMIT_VAR])
        except ValueError:
            limit = -1
        if limit < 0:
            raise ValueError("%s=%r: must be a whole number >= 0" % (
                RESET_LIMIT_VAR, environ[RESET_LIMIT_VAR]))
    if limit is not None and limit < 0:
        raise ValueError("--reset-limit %d: must not be negative" % limit)
    cooldown = args.elastic_cooldown
    if cooldown is not None and not 0 < cooldown[0] <= cooldown[1]:
        raise ValueError("--blacklist-cooldown-range %d %d: need 0 < LO <= HI" % tuple(cooldown))
    timeout = args.elastic_timeout
    for var in ELASTIC_TIMEOUT_VARS:
        if timeout is None and environ.get(var):
            try:
                timeout = float(environ[var])
            except ValueError:
                raise ValueError("%s=%r is not a number of seconds" % (var, environ[var]))
    timeout = DEFAULT_ELASTIC_TIMEOUT_S if timeout is None else timeout
    if timeout <= 0:
        raise ValueError("--elastic-timeout %g: must be positive" % timeout)
    if args.mpi:
        raise ValueError("elastic mode starts its workers itself (local and ssh), not --mpi")
    return Settings(np, lo, hi, args.elastic_slots or 1, limit, cooldown, timeout,
                    args.elastic_discovery_script)
