"""horovodrun's flags that horarun accepts beside its own (a command line written for
horovodrun keeps working): those that apply become the Hora variables they mean, those that
have no meaning in Hora are accepted and named on stderr with the reason, elastic ones are
refused (Hora has no elastic membership;
hvd.elastic scripts run at the job's fixed size)."""

import argparse

# flag -> (variable, value or None for the flag's argument)
_APPLY = {
    "--hierarchical-allreduce": ("HORA_HIERARCHICAL_ALLREDUCE", "1"),
    "--no-hierarchical-allreduce": ("HORA_HIERARCHICAL_ALLREDUCE", "0"),
    "--no-stall-check": ("HORA_STALL_WARNING_SECONDS", "10000000"),
    "--stall-check-warning-time-seconds": ("HORA_STALL_WARNING_SECONDS", None),
    "--stall-check-shutdown-time-seconds": ("HORA_STALL_TIMEOUT_SECONDS", None),
    "--gloo-timeout-seconds": ("HORA_COLLECTIVE_TIMEOUT_SECONDS", None),
}

# flag -> (takes a value, why it has no effect)
_IGNORED = {
    "--cache-capacity": (True, "Hora has no response cache to size"),
    "--hierarchical-allgather": (False, "only allreduce is hierarchical in Hora"),
    "--no-hierarchical-allgather": (False, "only allreduce is hierarchical in Hora"),
    "--timeline-mark-cycles": (False, "Hora's timeline has no cycle marks"),
    "--num-nccl-streams": (True, "this build has no NCCL data plane"),
    "--thread-affinity": (True, "Hora does not pin its threads"),
    "--mpi-threads-disable": (False, "Hora's MPI backend always asks for MPI_THREAD_MULTIPLE"),
    "--tcp": (False, "Hora's control plane is always TCP (gRPC)"),
    "--binding-args": (True, "pass mpirun's binding options with --mpi-args"),
    "--prefix-output-with-timestamp": (False, "horarun prefixes lines with the rank only"),
}

_ELASTIC = ("--min-np", "--max-np", "--host-discovery-script", "--slots-per-host",
            "--reset-limit", "--blacklist-cooldown-range", "--elastic-timeout")


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
        if takes_value:
            g.add_argument(flag, dest=_dest(flag), metavar="VALUE")
        else:
            g.add_argument(flag, dest=_dest(flag), action="store_true")
    for flag in _ELASTIC:
        g.add_argument(flag, dest=_dest(flag), metavar="VALUE", help=argparse.SUPPRESS)


def _dest(flag):
    return "horovod_" + flag.lstrip("-").replace("-", "_")


def flag_env(args):
    """(the HORA_* variables of the horovodrun flags given, notes for stderr); raises
    ValueError for an elastic flag or a bad value."""
    for flag in _ELASTIC:
        if getattr(args, _dest(flag)) is not None:
            raise ValueError("%s: Hora has no elastic mode (a job has a fixed number of ranks; "
                             "see docs/launching.md)" % flag)
    env, notes = {}, []
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
