"""The Python side alone (no job): library loading, argument checks, pure helpers."""

import os
import subprocess

import harness


def run_py(code, env_extra=None):
    env = harness.job_env(env_extra)
    p = subprocess.run([harness.PYTHON, "-c", code], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    return p.returncode, p.stdout


def test_import_without_library():
    rc, out = run_py("import hora, hora.torch as hvd; print(hvd.is_initialized())",
                     {"HORA_LIBRARY": "/nonexistent/libhora.so"})
    assert rc == 0 and out.strip().endswith("False"), out


def test_missing_library_message():
    rc, out = run_py("import hora; hora.rank()", {"HORA_LIBRARY": "/nonexistent/libhora.so"})
    assert rc != 0 and "HORA_LIBRARY=/nonexistent/libhora.so" in out, out


def test_use_before_init_names_the_python_call():
    rc, out = run_py("import torch, hora, hora.torch as hvd\n"
                     "try:\n    hvd.allreduce(torch.ones(2))\n"
                     "except hora.HoraError as e:\n    print('ERROR', e)\n"
                     "hvd.init(); hvd.shutdown()\n"
                     "try:\n    hvd.rank()\n"
                     "except hora.HoraError as e:\n    print('ERROR', e)\n")
    assert rc == 0, out
    errors = [l for l in out.splitlines() if l.startswith("ERROR")]
    assert len(errors) == 2, out
    assert "call hvd.init() (hora.init()) first" in errors[0], errors[0]
    assert "call hvd.init() (hora.init()) again" in errors[1], errors[1]
    assert "hora_init" not in out, out


def test_every_c_function_declared():
    import re
    header = open(os.path.join(harness.REPO, "bindings", "c", "hora.h")).read()
    declared = set(re.findall(r"HORA_API\s+[\w\s\*]+?\b(hora_\w+)\s*\(", header))
    rc, out = run_py("import hora._lib as l; print(' '.join(sorted(l._PROTOTYPES)))")
    assert rc == 0, out
    assert declared == set(out.split()), declared ^ set(out.split())


def test_library_loads_and_answers():
    # The Bazel target depends on libhora.so and run_pytest.sh points HORA_LIBRARY at it: a
    # library that is not found is a failure here, not a reason to skip.
    rc, out = run_py("import hora; print(hora.version()); print(hora.is_initialized())")
    assert rc == 0 and out.split()[-1] == "False", out


def test_argument_checks():
    code = r'''
import torch, hora.torch as hvd
def expect(exc, fn, *a, **k):
    try:
        fn(*a, **k)
    except exc as e:
        return str(e)
    raise SystemExit("no %s from %s" % (exc.__name__, fn))
print(expect(TypeError, hvd.allreduce, torch.zeros(2, dtype=torch.complex64)))
print(expect(ValueError, hvd.allreduce, torch.zeros(2), op=12345))
print(expect(ValueError, hvd.allreduce, torch.zeros(2), average=True, op=hvd.Sum))
m = torch.nn.Linear(2, 2)
print(expect(ValueError, hvd.DistributedOptimizer, torch.optim.SGD(m.parameters(), lr=1),
             named_parameters=[("w", m.weight), ("w", m.bias)]))
print(expect(ValueError, hvd.DistributedOptimizer, torch.optim.SGD(m.parameters(), lr=1),
             named_parameters=[("w", m.weight)]))
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1, momentum=0.5))
assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
assert opt.defaults["momentum"] == 0.5
c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=torch.float64))
assert c.dtype == torch.float16 and hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float64
print("OK")
'''
    rc, out = run_py(code, {"HORA_LIBRARY": "/nonexistent/libhora.so"})
    assert rc == 0 and out.strip().endswith("OK"), out
    assert "int16" in out and "unknown reduce op" in out and "unique" in out and \
        "not named" in out


def test_horovod_names_present():
    names = """init shutdown is_initialized rank size local_rank local_size cross_rank
    cross_size allreduce allreduce_ allreduce_async allreduce_async_ grouped_allreduce
    grouped_allreduce_ grouped_allreduce_async grouped_allreduce_async_ allgather
    allgather_async broadcast broadcast_ broadcast_async broadcast_async_ alltoall
    reducescatter barrier join poll synchronize allgather_object broadcast_object
    Compression Average Sum Min Max Product Adasum mpi_built gloo_built nccl_built
    cuda_built mpi_enabled gloo_enabled ccl_built ddl_built rocm_built start_timeline
    stop_timeline HorovodInternalError ProcessSet global_process_set DistributedOptimizer
    broadcast_parameters broadcast_optimizer_state""".split()
    rc, out = run_py("import hora.torch as hvd; print(' '.join(n for n in %r "
                     "if not hasattr(hvd, n)))" % names)
    assert rc == 0 and out.strip() == "", "missing: " + out


def test_horovod_common_helpers():
    """horovod.common's helpers that scripts and Horovod's tests import, under hora.common:
    env() sets and restores variables (unset ones unset again); the exceptions are hora's;
    horovod.torch.elastic's modules (sampler, state) have their hora.torch.elastic twins."""
    code = '''
import os
import hora.torch as hvd
from hora.common.util import env
from hora.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.elastic.state import ObjectState, TorchState
assert (ElasticSampler, TorchState, ObjectState) == (
    hvd.elastic.ElasticSampler, hvd.elastic.TorchState, hvd.elastic.ObjectState)
os.environ["HORA_T_KEPT"] = "a"
os.environ.pop("HORA_T_NEW", None)
with env(HORA_T_KEPT="b", HORA_T_NEW=3):
    inside = (os.environ["HORA_T_KEPT"], os.environ["HORA_T_NEW"])
after = (os.environ.get("HORA_T_KEPT"), os.environ.get("HORA_T_NEW"))
same = HorovodInternalError is hvd.HorovodInternalError and \\
    HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt
print(inside, after, same, HostsUpdatedInterrupt(skip_sync=True).skip_sync)
'''
    rc, out = run_py(code)
    assert rc == 0 and out.strip() == "('b', '3') ('a', None) True True", out
