"""horarun: command line, host list and per-rank environment.

`horarun -np N [options] command args...` starts N ranks of `command` on this host. This
module turns the command line into a plan (which hosts, how many ranks, the environment of
each rank); horarun_job.py starts, watches and stops the ranks. Standard library only, so
the launcher runs under any python3 >= 3.8.
"""

import argparse
import os
import secrets
import socket
import sys

import horarun_job

__version__ = "0.1.0"

LOG_LEVELS = ("trace", "debug", "info", "warning", "warn", "error", "fatal", "critical", "off")
LOCAL_NAMES = ("localhost", "127.0.0.1")

USAGE = "horarun -np N [-H host:slots,...] [options] command [args...]"

DESCRIPTION = """\
Launch a Hora job: start N ranks of COMMAND, give each its HORA_* variables, prefix every
output line with the rank, and stop the whole job when one rank fails."""

EPILOG = """\
Each rank gets HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_CROSS_RANK,
HORA_CROSS_SIZE, HORA_COORDINATOR_ADDR, HORA_JOB_TOKEN and HORA_HOSTNAME, plus the options
above. Exit status: 0 when every rank exits 0; otherwise the code of the first rank that
failed (128+N for a rank killed by signal N), 130/143 when horarun itself is interrupted,
2 for a bad command line, 127 when the command cannot be found.

Example: horarun -np 2 --log-level info /usr/bin/python3 train.py"""


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


def _format_number(value):
    """120.0 -> '120', 2.5 -> '2.5': what strtod and strtoll on the C++ side accept."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def build_parser():
    p = argparse.ArgumentParser(
        prog="horarun", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-np", "--num-proc", dest="np", type=_positive_int, metavar="N",
                   help="number of ranks to start (required)")
    p.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                   help="hosts and their slots; only this host for now "
                        "(localhost, 127.0.0.1 or its hostname)")
    p.add_argument("-x", dest="env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set NAME=VALUE, or pass NAME from this environment, in every rank "
                        "(repeatable)")
    p.add_argument("--start-timeout", type=_number(0, True), metavar="SECONDS",
                   help="HORA_START_TIMEOUT_SECONDS: how long ranks wait for each other at init")
    p.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                   help="HORA_LOG_LEVEL: " + ", ".join(LOG_LEVELS))
    p.add_argument("--fusion-threshold-mb", type=_number(0, False), metavar="MB",
                   help="HORA_FUSION_THRESHOLD in bytes (MB * 1048576; 0 = no fusion)")
    p.add_argument("--cycle-time-ms", type=_number(0, True), metavar="MS",
                   help="HORA_CYCLE_TIME_MS: longest wait to fill a fusion bucket")
    p.add_argument("--heartbeat-timeout", type=_number(0, True), metavar="SECONDS",
                   help="HORA_HEARTBEAT_TIMEOUT_SECONDS: silence after which a rank is dead")
    p.add_argument("--grace", type=_number(0, False), default=5.0, metavar="SECONDS",
                   help="after SIGTERM, how long ranks get before SIGKILL (default 5)")
    p.add_argument("--keep-going", action="store_true",
                   help="when a rank fails, let the others run to their end (fault tests); "
                        "exit with the first failed rank's code")
    p.add_argument("--verbose", action="store_true",
                   help="print the launch plan and each rank's pid to stderr")
    p.add_argument("--version", action="version", version="horarun (Hora) " + __version__)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="command [args...]",
                   help="the program every rank runs")
    return p


def local_names():
    names = set(LOCAL_NAMES)
    for getter in (socket.gethostname, socket.getfqdn):
        try:
            name = getter()
        except OSError:
            continue
        if name:
            names.add(name)
            names.add(name.split(".")[0])
    return names


def parse_hosts(text):
    """'a:2,b' -> [('a', 2), ('b', 1)]. Raises UsageError on a malformed entry."""
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise UsageError("-H %r: empty host entry" % text)
        name, sep, slots = entry.rpartition(":")
        if not sep:
            name, slots = entry, "1"
        if not name:
            raise UsageError("-H %r: missing host name in %r" % (text, entry))
        try:
            count = int(slots, 10)
        except ValueError:
            raise UsageError("-H %r: slots %r of host %s is not an integer" % (text, slots, name))
        if count < 1:
            raise UsageError("-H %r: host %s must have at least 1 slot" % (text, name))
        hosts.append((name, count))
    return hosts


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


def parse_args(argv):
    """Returns the argparse namespace; raises UsageError for what argparse cannot check."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.np is None:
        raise UsageError("the number of ranks is required: -np N")
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        raise UsageError("missing the command to run: horarun -np N command [args...]")
    args.host_list = [("localhost", args.np)]
    if args.hosts is not None:
        hosts = parse_hosts(args.hosts)
        names = local_names()
        for name, _ in hosts:
            if name not in names:
                raise UsageError("remote hosts are not supported yet: %s" % name)
        total = sum(slots for _, slots in hosts)
        if total < args.np:
            raise UsageError("-np %d needs %d slots, but -H %s has only %d"
                             % (args.np, args.np, args.hosts, total))
        args.host_list = hosts
    return args


def free_port(host="127.0.0.1"):
    """A port that was free a moment ago (bind port 0, read it back, close)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def option_env(args):
    """The HORA_* variables that come from command-line options."""
    env = {}
    if args.start_timeout is not None:
        env["HORA_START_TIMEOUT_SECONDS"] = _format_number(args.start_timeout)
    if args.log_level is not None:
        env["HORA_LOG_LEVEL"] = args.log_level
    if args.fusion_threshold_mb is not None:
        env["HORA_FUSION_THRESHOLD"] = str(int(round(args.fusion_threshold_mb * 1024 * 1024)))
    if args.cycle_time_ms is not None:
        env["HORA_CYCLE_TIME_MS"] = _format_number(args.cycle_time_ms)
    if args.heartbeat_timeout is not None:
        env["HORA_HEARTBEAT_TIMEOUT_SECONDS"] = _format_number(args.heartbeat_timeout)
    return env


def rank_environments(args, environ, coordinator_addr, token, hostname):
    """One environment per rank, in rank order.

    Precedence, lowest first: horarun's own environment, -x, the options above, and the
    identity variables (HORA_RANK ...), which nothing overrides. All ranks are on this host
    for now, so local rank = rank and cross rank = 0.
    """
    base = dict(environ)
    base.update(parse_env_pairs(args.env, environ))
    base.update(option_env(args))
    envs = []
    for rank in range(args.np):
        env = dict(base)
        env.update({
            "HORA_RANK": str(rank),
            "HORA_SIZE": str(args.np),
            "HORA_LOCAL_RANK": str(rank),
            "HORA_LOCAL_SIZE": str(args.np),
            "HORA_CROSS_RANK": "0",
            "HORA_CROSS_SIZE": "1",
            "HORA_COORDINATOR_ADDR": coordinator_addr,
            "HORA_JOB_TOKEN": token,
            "HORA_HOSTNAME": hostname,
        })
        envs.append(env)
    return envs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        coordinator_addr = "127.0.0.1:%d" % free_port()
        token = secrets.token_hex(16)
        envs = rank_environments(args, os.environ, coordinator_addr, token,
                                 socket.gethostname())
    except UsageError as e:
        sys.stderr.write("usage: %s\n" % USAGE)
        sys.stderr.write("horarun: error: %s (see horarun --help)\n" % e)
        return 2
    if args.verbose:
        sys.stderr.write("horarun: %d rank(s) on %s, coordinator %s, token %s..., command: %s\n"
                         % (args.np, socket.gethostname(), coordinator_addr, token[:4],
                            " ".join(args.command)))
        extra = option_env(args)
        if extra:
            sys.stderr.write("horarun: options: %s\n"
                             % " ".join("%s=%s" % kv for kv in sorted(extra.items())))
    job = horarun_job.Job(args.command, envs, grace=args.grace, verbose=args.verbose,
                          keep_going=args.keep_going)
    return job.run()
