"""horarun's command line: the options, their checks, and the parsed arguments (hosts
resolved, -x pairs). horarun_lib.py turns them into a launch plan. Standard library only."""

import argparse
import difflib
import os
import sys

import horarun_horovod as horovod_flags
import horarun_hosts as hosts_mod

CPU_BACKEND_VAR = "HORA_CPU_OPERATIONS"  # runtime/options.h kEnvCpuOperations
START_TIMEOUT_VAR = "HORA_START_TIMEOUT_SECONDS"
LOG_LEVELS = ("trace", "debug", "info", "warning", "warn", "error", "fatal", "critical", "off")

USAGE = ("horarun -np N [-H host:slots,... | --hostfile FILE] [options] command [args...]\n"
         "       horarun --diagnose [PID]")

DESCRIPTION = """\
Launch a Hora job: start N ranks of COMMAND (on this host directly, on other hosts over
ssh, or all through mpirun with --mpi), give each its HORA_* variables, prefix every
output line with the rank, and stop the whole job when one rank fails."""

EPILOG = """\
Each rank gets HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_CROSS_RANK,
HORA_CROSS_SIZE, HORA_COORDINATOR_ADDR, HORA_JOB_TOKEN and HORA_HOSTNAME, plus the options
above, the same under Horovod's names (HOROVOD_RANK, ...) and torchrun's (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT: a port of its own for
torch.distributed's store; -x overrides them). Exit status: 0 when every rank exits 0; otherwise the code of the first rank that
failed (128+N for a rank killed by signal N), 130/143 when horarun itself is interrupted,
2 for a bad command line, 127 when the command cannot be found, 255 when a host cannot be
reached.

Examples:
  horarun -np 2 --log-level info /usr/bin/python3 train.py
  horarun -np 4 -H a:2,b:2 --ssh-config-file ~/.ssh/cluster /usr/bin/python3 train.py
  horarun -np 4 --hostfile hosts --mpi /usr/bin/python3 train.py"""



class UsageError(Exception):
    """A bad command line; the message is printed as `horarun: error: ...`."""


def _positive_int(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("%r must be at least 1" % text)
    return value


def _number(minimum, strict):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a number" % text)
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError("%r is not a finite number" % text)
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(
                "%r must be %s %s" % (text, "greater than" if strict else "at least", minimum))
        return value
    return parse


def _log_level(text):
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            "%r is not a log level (one of %s)" % (text, ", ".join(LOG_LEVELS)))
    return text.lower()


def _nics(text):
    nics = [n.strip() for n in text.split(",")]
    if not all(nics):
        raise argparse.ArgumentTypeError("%r: empty interface name" % text)
    return nics


class _Parser(argparse.ArgumentParser):
    """argparse, and a misspelled option gets the closest real one: "unrecognized arguments:
    --fusion-threshhold-mb (did you mean --fusion-threshold-mb?)"."""

    def error(self, message):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            words = []
            for word in message[len(prefix):].split(" "):
                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.75) \
                    if word.startswith("--") else []
                words.append("%s (did you mean %s?)" % (word, close[0]) if close else word)
            message = prefix + " ".join(words)
        argparse.ArgumentParser.error(self, message)


def build_parser(version):
    p = _Parser(
        prog="horarun", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-np", "--num-proc", dest="np", type=_positive_int, metavar="N",
                   help="number of ranks to start (required)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="hosts and their slots (default: this host, N slots); ranks "
                            "fill them in order")
    where.add_argument("-hostfile", "--hostfile", dest="hostfile", metavar="FILE",
                       help="hosts from a file: `host slots=N` (Open MPI) or `host:N` lines")
    p.add_argument("-p", "--ssh-port", type=_positive_int, metavar="PORT",
                   help="ssh port of the other hosts")
    p.add_argument("-i", "--ssh-identity-file", metavar="FILE", help="ssh's -i")
    p.add_argument("--ssh-config-file", metavar="FILE", help="ssh's -F")
    p.add_argument("--network-interface", "--network-interfaces", dest="nics", type=_nics, metavar="NIC[,NIC]",
                   help="interfaces for the coordinator and the data plane (the first one "
                        "a host has)")
    p.add_argument("--output-filename", metavar="DIR",
                   help="also write each rank's output to DIR/rank.R/stdout and stderr")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--mpi", action="store_true",
                     help="run the whole job through Open MPI's mpirun")
    how.add_argument("--gloo", action="store_true",
                     help="start ranks with horarun itself (local and ssh) and use Gloo "
                          "for CPU tensors (%s=gloo)" % CPU_BACKEND_VAR)
    p.add_argument("--mpi-args", default="", metavar="ARGS",
                   help="extra mpirun arguments, with --mpi (one string)")
    p.add_argument("--disable-cache", action="store_true",
                   help="accepted for horovodrun compatibility; Hora has no response-cache "
                        "knob yet, so it changes nothing")
    p.add_argument("--bind-to", choices=("none", "core"), default="none",
                   help="core: bind each rank to an equal share of its host's CPUs (local "
                        "rank k of L gets the k-th of L contiguous slices; nothing is bound "
                        "on a host with fewer CPUs than ranks); with --mpi, mpirun's own "
                        "--bind-to core. Default none")
    p.add_argument("-cb", "--check-build", action="store_true",
                   help="print the backends, CUDA and NCCL this build has, and exit")
    p.add_argument("-x", dest="env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set NAME=VALUE, or pass NAME from this environment, in every rank "
                        "(repeatable)")
    p.add_argument("--start-timeout", type=_number(0, True), metavar="SECONDS",
                   help="%s: how long ranks wait for each other at init; also the bound "
                        "for reaching the other hosts" % START_TIMEOUT_VAR)
    p.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                   help="HORA_LOG_LEVEL: " + ", ".join(LOG_LEVELS))
    p.add_argument("--fusion-threshold-mb", type=_number(0, False), metavar="MB",
                   help="HORA_FUSION_THRESHOLD in bytes (MB * 1048576; 0 = no fusion)")
    p.add_argument("--cycle-time-ms", type=_number(0, True), metavar="MS",
                   help="HORA_CYCLE_TIME_MS: longest wait to fill a fusion bucket")
    p.add_argument("--timeline-filename", metavar="FILE",
                   help="HORA_TIMELINE: every rank writes its timeline (rank 0 FILE, rank "
                        "N FILE with .rankN before .json); `hora-timeline merge FILE` joins "
                        "them")
    p.add_argument("--autotune", action="store_true",
                   help="HORA_AUTOTUNE=1: rank 0 tunes the fusion threshold and cycle time "
                        "during the first steps (docs/autotune.md)")
    p.add_argument("--autotune-log-file", metavar="FILE",
                   help="HORA_AUTOTUNE_LOG: rank 0 writes one CSV row per trial to FILE")
    p.add_argument("--autotune-warmup-samples", type=int, metavar="N",
                   help="HORA_AUTOTUNE_WARMUP_SAMPLES: samples thrown away first (default 3)")
    p.add_argument("--autotune-steps-per-sample", type=int, metavar="N",
                   help="HORA_AUTOTUNE_STEPS_PER_SAMPLE: training steps per sample (default 10)")
    p.add_argument("--autotune-samples-per-trial", type=int, metavar="N",
                   help="HORA_AUTOTUNE_SAMPLES_PER_TRIAL: samples whose median scores a trial "
                        "(default 5)")
    p.add_argument("--heartbeat-timeout", type=_number(0, True), metavar="SECONDS",
                   help="HORA_HEARTBEAT_TIMEOUT_SECONDS: silence after which a rank is dead")
    p.add_argument("--grace", type=_number(0, False), default=5.0, metavar="SECONDS",
                   help="after SIGTERM, how long ranks get before SIGKILL (default 5)")
    p.add_argument("--keep-going", action="store_true",
                   help="when a rank fails, let the others run to their end (fault tests); "
                        "exit with the first failed rank's code")
    p.add_argument("--verbose", action="store_true",
                   help="print the launch plan and each rank's pid to stderr")
    p.add_argument("--diagnose", nargs="?", const="auto", metavar="PID",
                   help="diagnose a running job: ask the horarun with process id PID (the only "
                        "one running, if left out) for a report of every rank (what it waits "
                        "for, its last operation, its Python stacks), print it and exit; the "
                        "job goes on (docs/failure-model.md, Diagnosis)")
    p.add_argument("-v", "--version", action="version", version="horarun (Hora) " + version)
    horovod_flags.add_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="command [args...]",
                   help="the program every rank runs")
    return p


def parse_env_pairs(items, environ):
    """-x NAME=VALUE / -x NAME -> {NAME: VALUE}; NAME alone takes environ's value."""
    result = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name or "\0" in item or not (name[0].isalpha() or name[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in name):
            raise UsageError("-x %r: expected NAME or NAME=VALUE with NAME a variable name" % item)
        if sep:
            result[name] = value
        elif name in environ:
            result[name] = environ[name]
        else:
            sys.stderr.write("horarun: warning: -x %s: not set in this environment; "
                             "not passed\n" % name)
    return result


def parse_args(argv, version):
    """Returns the argparse namespace; raises UsageError for what argparse cannot check.
    `version`: what --version prints."""
    args = build_parser(version).parse_args(argv)
    if args.check_build:
        return args
    if args.diagnose is not None:
        if args.command or args.np is not None:
            raise UsageError("--diagnose takes a running job's horarun PID, not -np or a command")
        if args.diagnose != "auto" and not args.diagnose.isdigit():
            raise UsageError("--diagnose %r: expected the process id of a running horarun"
                             % args.diagnose)
        return args
    args.elastic = None
    if horovod_flags.is_elastic(args):
        try:
            args.elastic = horovod_flags.elastic_settings(args, os.environ)
        except ValueError as e:
            raise UsageError(str(e))
        if args.elastic_discovery_script and (args.hosts or args.hostfile):
            raise UsageError("--host-discovery-script replaces -H and --hostfile")
        args.np = args.elastic.np
    if args.np is None:
        raise UsageError("the number of ranks is required: -np N")
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        raise UsageError("missing the command to run: horarun -np N command [args...]")
    if args.mpi_args and not args.mpi:
        raise UsageError("--mpi-args needs --mpi")
    try:
        args.horovod_env, notes = horovod_flags.flag_env(args)
    except ValueError as e:
        raise UsageError(str(e))
    for note in notes:
        sys.stderr.write(note + "\n")
    for flag, path in (("--ssh-config-file", args.ssh_config_file),
                       ("--ssh-identity-file", args.ssh_identity_file),
                       ("--hostfile", args.hostfile)):
        if path is not None and not os.path.exists(path):
            raise UsageError("%s %s: no such file" % (flag, path))
    try:
        if args.hostfile is not None:
            args.host_list, source = hosts_mod.parse_hostfile(args.hostfile), args.hostfile
            source = "--hostfile " + source
        elif args.hosts is not None:
            args.host_list, source = hosts_mod.parse_hosts(args.hosts), "-H " + args.hosts
        else:
            args.host_list, source = [("localhost", args.np)], None
    except hosts_mod.HostError as e:
        raise UsageError(str(e))
    total = sum(slots for _, slots in args.host_list)
    if total < args.np and (args.elastic is None or args.elastic.script is None):
        raise UsageError("-np %d needs %d slots, but %s has only %d"
                         % (args.np, args.np, source, total))
    return args
