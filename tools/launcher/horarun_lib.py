"""horarun: the launch plan and the per-rank environment (the command line is
horarun_args.py).

`horarun -np N [-H host:slots,...] [options] command args...` starts N ranks of `command`:
those of this host directly, those of other hosts over ssh, or all of them through mpirun
(--mpi). This module turns the command line into a plan (where each rank runs, its
environment, which launcher starts it); horarun_job.py watches and stops the parts the
launchers started. Standard library only, so the launcher runs under any python3 >= 3.8.
"""

import os
import re
import secrets
import socket
import sys

import horarun_agent as agent
import horarun_diagnose
import horarun_hosts as hosts_mod
import horarun_job
from horarun_args import (CPU_BACKEND_VAR, START_TIMEOUT_VAR, USAGE, UsageError,
                          parse_args, parse_env_pairs)
from horarun_diagnose import DIAGNOSE_FILE_VAR
from horarun_launchers import LocalLauncher, RankSpec
from horarun_mpi import MpiLauncher
from horarun_ssh import SshError, SshLauncher, SshOptions, probe_hosts

__version__ = "0.2.0"

DEFAULT_START_TIMEOUT_S = 120.0          # runtime/options.h's default for the same variable

# Variables of horarun's environment that describe this host or this login session, not
# the job: not given to ranks on other hosts (unless named with -x).
NOT_FORWARDED = re.compile(
    r"^(HOSTNAME|HOST|PWD|OLDPWD|SHLVL|_|HOME|USER|LOGNAME|MAIL|SHELL|TERM|TERMCAP|DISPLAY"
    r"|XAUTHORITY|STY|WINDOW|DBUS_SESSION_BUS_ADDRESS|SSH_.*|XDG_.*|TMUX.*|BASH_FUNC_.*"
    r"|OMPI_.*|PMIX_.*|PMI_.*|SLURM_.*)$")


# The per-rank variables that are also given under Horovod's names (HOROVOD_RANK, ...).
HOROVOD_ALIASES = ("HORA_RANK", "HORA_SIZE", "HORA_LOCAL_RANK", "HORA_LOCAL_SIZE",
                   "HORA_CROSS_RANK", "HORA_CROSS_SIZE")


# torchrun's per-rank variables, given under horarun too (torch_env).
TORCH_ALIASES = (("RANK", "HORA_RANK"), ("WORLD_SIZE", "HORA_SIZE"),
                 ("LOCAL_RANK", "HORA_LOCAL_RANK"), ("LOCAL_WORLD_SIZE", "HORA_LOCAL_SIZE"),
                 ("GROUP_RANK", "HORA_CROSS_RANK"))


class LaunchError(Exception):
    """The job cannot start (a host cannot be reached, ...); horarun exits with `code`."""

    def __init__(self, message, code=255):
        Exception.__init__(self, message)
        self.code = code


def _format_number(value):
    """120.0 -> '120', 2.5 -> '2.5': what strtod and strtoll on the C++ side accept."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def option_env(args):
    """The HORA_* (and HORARUN_BIND_TO) variables that come from command-line options."""
    env = {}
    if args.start_timeout is not None:
        env[START_TIMEOUT_VAR] = _format_number(args.start_timeout)
    if args.log_level is not None:
        env["HORA_LOG_LEVEL"] = args.log_level
    if args.fusion_threshold_mb is not None:
        env["HORA_FUSION_THRESHOLD"] = str(int(round(args.fusion_threshold_mb * 1024 * 1024)))
    if args.cycle_time_ms is not None:
        env["HORA_CYCLE_TIME_MS"] = _format_number(args.cycle_time_ms)
    if args.heartbeat_timeout is not None:
        env["HORA_HEARTBEAT_TIMEOUT_SECONDS"] = _format_number(args.heartbeat_timeout)
    if args.timeline_filename:
        env["HORA_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.autotune or args.autotune_log_file:
        env["HORA_AUTOTUNE"] = "1"
    if args.autotune_log_file:
        env["HORA_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    for flag, var in (("autotune_warmup_samples", "HORA_AUTOTUNE_WARMUP_SAMPLES"),
                      ("autotune_steps_per_sample", "HORA_AUTOTUNE_STEPS_PER_SAMPLE"),
                      ("autotune_samples_per_trial", "HORA_AUTOTUNE_SAMPLES_PER_TRIAL")):
        if getattr(args, flag) is not None:
            env[var] = str(getattr(args, flag))
    if args.gloo:
        env[CPU_BACKEND_VAR] = "gloo"
    if args.bind_to != "none" and not args.mpi:
        env[agent.BIND_VAR] = args.bind_to
    env.update(getattr(args, "horovod_env", {}))
    return env


def start_timeout(args, environ):
    """The bound for reaching the other hosts: --start-timeout, else the variable."""
    if args.start_timeout is not None:
        return args.start_timeout
    try:
        value = float(environ.get(START_TIMEOUT_VAR, ""))
        if value > 0:
            return value
    except ValueError:
        pass
    return DEFAULT_START_TIMEOUT_S


class Plan:
    """Where every rank runs and with which environment. Built by make_plan."""

    def __init__(self):
        self.specs = []          # RankSpec per rank
        self.hosts = []          # [(host, ranks on it)] in placement order
        self.local = {}          # host -> is this host
        self.coordinator = None  # "addr:port"
        self.token = None
        self.forwarded = set()   # names given to ranks on other hosts
        self.common = {}         # -x and option variables, for every rank
        self.ssh = None          # SshOptions


def make_plan(args, environ, cwd):
    """Probes the other hosts and builds the Plan; raises LaunchError."""
    placement = hosts_mod.assign(args.np, args.host_list)
    used = []
    for index in placement:
        name = args.host_list[index][0]
        if not used or used[-1][0] != name:
            used.append((name, 0))
        used[-1] = (name, used[-1][1] + 1)
    names = hosts_mod.local_names()
    local = {name: hosts_mod.is_local(name, names) for name, _ in used}
    remote = [name for name, _ in used if not local[name]]
    first = used[0][0]
    ssh = SshOptions(args.ssh_port, args.ssh_identity_file, args.ssh_config_file)
    nics = args.nics or []
    probes = {}
    if remote:
        try:
            probes = probe_hosts(remote, ssh, cwd, nics, None if local[first] else first,
                                 start_timeout(args, environ))
        except SshError as e:
            raise LaunchError(str(e))
    this_host = socket.gethostname()
    mine = agent.first_nic_address(nics) if nics else None
    if nics and any(local.values()) and mine is None:
        raise LaunchError("this host (%s) has none of the network interfaces %s"
                          % (this_host, ",".join(nics)))

    if local[first]:
        if mine:
            addr = mine[1]
        elif remote:
            addr = probes[remote[0]].get("client_addr")
            if not addr:
                raise LaunchError("host %s did not say which address of this host it reached "
                                  "(no SSH_CONNECTION); use --network-interface" % remote[0])
        else:
            addr = "127.0.0.1"
        port, store_port = agent.free_ports(addr, 2)
    else:
        addr, port, store_port = probes[first]["coordinator"]
    plan = Plan()
    plan.hosts, plan.local = used, local
    plan.coordinator = "%s:%d" % (addr, port)
    plan.torch_store = (addr, store_port)
    plan.token = secrets.token_hex(16)

    common = parse_env_pairs(args.env, environ)
    common.update(option_env(args))
    if DIAGNOSE_FILE_VAR not in common and DIAGNOSE_FILE_VAR not in environ:
        # One diagnosis file per job, where `horarun --diagnose PID` looks for it.
        common[DIAGNOSE_FILE_VAR] = horarun_diagnose.default_file(os.getpid())
    local_base = dict(environ)
    local_base.update(common)
    remote_base = {k: v for k, v in environ.items() if not NOT_FORWARDED.match(k)}
    remote_base.update(common)
    plan.forwarded = set(remote_base)
    plan.common = common

    hostnames = []
    for index in placement:
        name = args.host_list[index][0]
        hostnames.append(this_host if local[name] else probes[name]["hostname"])
    for rank, (lr, ls, cr, cs) in enumerate(hosts_mod.topology(hostnames)):
        name = args.host_list[placement[rank]][0]
        env = dict(local_base if local[name] else remote_base)
        if nics:
            env["HORA_GLOO_IFACE"] = mine[1] if local[name] else probes[name]["nic"][1]
        env.update({
            "HORA_RANK": str(rank), "HORA_SIZE": str(args.np),
            "HORA_LOCAL_RANK": str(lr), "HORA_LOCAL_SIZE": str(ls),
            "HORA_CROSS_RANK": str(cr), "HORA_CROSS_SIZE": str(cs),
            "HORA_COORDINATOR_ADDR": plan.coordinator, "HORA_JOB_TOKEN": plan.token,
            "HORA_HOSTNAME": hostnames[rank],
        })
        # Horovod's names too (horovodrun sets them; scripts and Horovod's tests read them);
        # HOROVOD_HOSTNAME is the host as the host list names it, as horovodrun gives it.
        env.update({"HOROVOD_" + k[5:]: env[k] for k in HOROVOD_ALIASES})
        env["HOROVOD_HOSTNAME"] = name
        env.update(torch_env(env, plan, common))
        plan.specs.append(RankSpec(rank, name, local[name], hostnames[rank], env))
    plan.ssh = ssh
    return plan


def torch_env(env, plan, explicit):
    """torchrun's variables for a rank (RANK, WORLD_SIZE, LOCAL_RANK, ..., MASTER_ADDR and
    MASTER_PORT, a port of its own beside the coordinator's), so that
    torch.distributed.init_process_group works under horarun as under torchrun. A variable
    given with -x is left as given."""
    values = {"MASTER_ADDR": plan.torch_store[0], "MASTER_PORT": str(plan.torch_store[1])}
    for torch_name, hora_name in TORCH_ALIASES:
        if hora_name in env:
            values[torch_name] = env[hora_name]
    return {k: v for k, v in values.items() if k not in explicit}


def make_launchers(args, plan, environ, cwd):
    """The launchers of the job: one interface, picked here once."""
    if args.mpi:
        env = dict(environ)
        env.update(plan.common)
        env.update(torch_env({}, plan, plan.common))
        env.update({"HORA_COORDINATOR_ADDR": plan.coordinator, "HORA_JOB_TOKEN": plan.token,
                    "HORA_CROSS_SIZE": plan.specs[0].env["HORA_CROSS_SIZE"],
                    "HORARUN_CROSS_RANKS": " ".join(s.env["HORA_CROSS_RANK"]
                                                    for s in plan.specs)})
        passed = plan.forwarded | {"HORA_COORDINATOR_ADDR", "HORA_JOB_TOKEN", "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "HORA_CROSS_SIZE", "HORARUN_CROSS_RANKS"}
        remote = not all(plan.local.values())
        return [MpiLauncher(args.command, plan.hosts, args.np, env, passed,
                            ssh=plan.ssh if remote else None, nics=args.nics or (),
                            mpi_args=args.mpi_args, bind=args.bind_to)]
    launchers = []
    local_specs = [s for s in plan.specs if s.local]
    if local_specs:
        launchers.append(LocalLauncher(args.command, local_specs))
    for host, _ in plan.hosts:
        specs = [s for s in plan.specs if s.host == host and not s.local]
        if specs:
            launchers.append(SshLauncher(host, plan.ssh, args.command, specs, cwd, args.grace))
    return launchers


def _describe(args, plan):
    how = "mpirun" if args.mpi else "horarun"
    horarun_job.say("%d rank(s) through %s, coordinator %s, token %s..., command: %s"
                    % (args.np, how, plan.coordinator, plan.token[:4], " ".join(args.command)))
    for s in plan.specs:
        e = s.env
        horarun_job.say("rank %d: host %s (%s, %s), local %s/%s, cross %s/%s"
                        % (s.rank, s.host, s.hostname, "this host" if s.local else "ssh",
                           e["HORA_LOCAL_RANK"], e["HORA_LOCAL_SIZE"], e["HORA_CROSS_RANK"],
                           e["HORA_CROSS_SIZE"]))
    extra = option_env(args)
    if extra:
        horarun_job.say("options: %s" % " ".join("%s=%s" % kv for kv in sorted(extra.items())))


def _run_elastic(args, cwd):
    """horarun's elastic mode (horarun_elastic.py): workers, a rendezvous, generations."""
    import horarun_elastic
    common = parse_env_pairs(args.env, os.environ)
    common.update(option_env(args))
    base, remote = horarun_elastic.env_bases(os.environ, common, NOT_FORWARDED)
    ssh = SshOptions(args.ssh_port, args.ssh_identity_file, args.ssh_config_file)
    driver = horarun_elastic.Driver(args, args.elastic, base, remote, common, ssh, cwd,
                                    horarun_job.Output(args.output_filename))
    return driver.run()


def _usage_error(message):
    sys.stderr.write("usage: %s\n" % USAGE)
    sys.stderr.write("horarun: error: %s (see horarun --help)\n" % message)
    return 2


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv, __version__)
        if args.diagnose is not None:
            return horarun_diagnose.main(args.diagnose)
        if args.check_build:
            import horarun_check
            return horarun_check.main()
        cwd = os.getcwd()
        if args.elastic is not None:
            return _run_elastic(args, cwd)
        plan = make_plan(args, os.environ, cwd)
        launchers = make_launchers(args, plan, os.environ, cwd)
    except UsageError as e:
        return _usage_error(e)
    except LaunchError as e:
        horarun_job.say("error: %s" % e)
        return e.code
    if args.verbose:
        _describe(args, plan)
    output = horarun_job.Output(args.output_filename)
    job = horarun_job.Job(launchers, output, grace=args.grace, verbose=args.verbose,
                          keep_going=args.keep_going)
    return job.run()
