# Run by tests/gpu/test_torch_cuda.py as `horarun -np N python torch_cuda_worker.py`.
"""hora.torch on CUDA tensors, at world size 1 (NCCL) or with several ranks sharing the GPU
(HORA_GPU_OPERATIONS=shm|gloo|mpi: the staged data plane): every collective against the same
call on CPU tensors, fused buckets with prescale and postscale, CPU and GPU tensors in flight
together, the framework's stream ordering (an input written after a long kernel; results read
at once on a busy stream and on a side stream), int16 on CUDA, DistributedOptimizer training on
CUDA matching the same training on the CPU, and the staged plane's busbw beside the CPU's.
Prints `CASE <name> PASS|FAIL|SKIP <why>` per case (the test reads them)."""

import os
import sys
import time
import traceback

import torch

import hora.torch as hvd

CASES = []
DEV = torch.device("cuda", 0)
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
          torch.uint8, torch.int8]


def case(fn):
    CASES.append(fn)
    return fn


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def same(gpu, cpu, what, atol=0.0):
    check(gpu.device.type == "cuda", "%s: result on %s, not CUDA" % (what, gpu.device))
    g = gpu.cpu()
    check(g.shape == cpu.shape and g.dtype == cpu.dtype,
          "%s: %s %s vs %s %s" % (what, g.shape, g.dtype, cpu.shape, cpu.dtype))
    if g.dtype.is_floating_point:
        ok = torch.allclose(g.double(), cpu.double(), atol=atol, rtol=1e-3 if atol else 0)
    else:
        ok = torch.equal(g, cpu)
    check(ok, "%s: %s vs %s" % (what, g.flatten()[:6].tolist(), cpu.flatten()[:6].tolist()))


def sample(dtype, n=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-5, 6, (n,), generator=g)
    if dtype == torch.uint8:
        x = x.abs()
    return x.to(dtype)


@case
def build_facts():
    check(hvd.nccl_built() >= 21400, "nccl_built %r" % hvd.nccl_built())
    check(hvd.cuda_built(), "cuda_built")
    check(hvd.gpu_available(), "gpu_available")


@case
def allreduce_every_dtype_and_op_matches_cpu():
    for dtype in DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            if op == hvd.Average and not dtype.is_floating_point:
                continue
            x = sample(dtype)
            name = "ar.%s.%s" % (dtype, op)
            g = hvd.allreduce(x.to(DEV), op=op, name=name + ".gpu")
            c = hvd.allreduce(x, op=op, name=name + ".cpu")
            same(g, c, name)


@case
def allreduce_with_prescale_and_postscale_matches_cpu():
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        x = sample(dtype, 4097)
        g = hvd.allreduce(x.to(DEV), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                          name="scaled.gpu.%s" % dtype)
        c = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                          name="scaled.cpu.%s" % dtype)
        same(g, c, "scaled %s" % dtype, atol=1e-2)


@case
def fused_grouped_allreduce_with_scales_matches_cpu():
    sizes = [1, 3, 1000, 17, 65536, 5]
    for dtype in (torch.float32, torch.float16, torch.float64):
        xs = [sample(dtype, n, seed=i) for i, n in enumerate(sizes)]
        gs = hvd.grouped_allreduce([x.to(DEV) for x in xs], op=hvd.Sum, prescale_factor=2.0,
                                   postscale_factor=0.25, name="fused.gpu.%s" % dtype)
        cs = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                                   name="fused.cpu.%s" % dtype)
        for i, (g, c) in enumerate(zip(gs, cs)):
            same(g, c, "fused %s #%d" % (dtype, i), atol=1e-2)


@case
def broadcast_allgather_alltoall_reducescatter_match_cpu():
    for dtype in DTYPES + [torch.bool]:
        x = sample(dtype, 120).reshape(12, 10) if dtype != torch.bool else \
            (sample(torch.int32, 120) > 0).reshape(12, 10)
        tag = str(dtype)
        same(hvd.broadcast(x.to(DEV), 0, name="bc.g." + tag), hvd.broadcast(x, 0, name="bc.c." + tag),
             "broadcast " + tag)
        same(hvd.allgather(x.to(DEV), name="ag.g." + tag), hvd.allgather(x, name="ag.c." + tag),
             "allgather " + tag)
        same(hvd.alltoall(x.to(DEV), name="a2a.g." + tag), hvd.alltoall(x, name="a2a.c." + tag),
             "alltoall " + tag)
        if dtype != torch.bool:
            same(hvd.reducescatter(x.to(DEV), op=hvd.Sum, name="rs.g." + tag),
                 hvd.reducescatter(x, op=hvd.Sum, name="rs.c." + tag), "reducescatter " + tag)


@case
def bool_allreduce_is_logical():
    x = torch.tensor([True, False, True, False])
    same(hvd.allreduce(x.to(DEV), op=hvd.Sum, name="bool.sum.g"),
         hvd.allreduce(x, op=hvd.Sum, name="bool.sum.c"), "bool sum")
    same(hvd.allreduce(x.to(DEV), op=hvd.Min, name="bool.min.g"),
         hvd.allreduce(x, op=hvd.Min, name="bool.min.c"), "bool min")


@case
def input_written_by_the_framework_stream_just_before_is_read_after_it():
    # A long kernel chain on torch's stream writes the input right before the enqueue: Hora's
    # stream must wait for it (the event recorded at enqueue time).
    for i in range(5):
        x = torch.zeros(1 << 22, device=DEV)
        for _ in range(20):
            x.add_(1.0)
        y = hvd.allreduce(x, op=hvd.Sum, name="order.%d" % i)
        check(torch.all(y == 20.0 * hvd.size()).item(), "saw a stale input: %r" % y[:4].tolist())


def _sleep_ms(ms):
    # torch.cuda._sleep spins for a number of GPU cycles: about ms milliseconds at ~2 GHz
    torch.cuda._sleep(int(ms * 2e6))


@case
def input_written_after_a_long_kernel_is_read_after_it():
    # The input is written by a kernel queued behind a 50 ms one: an enqueue that read it
    # without waiting for the framework's stream would see the zeros.
    for i in range(3):
        x = torch.zeros(1 << 20, device=DEV)
        _sleep_ms(50)
        x.fill_(hvd.rank() + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name="sleep.%d" % i)
        want = hvd.size() * (hvd.size() + 1) / 2
        check(torch.all(y == want).item(), "saw a stale input: %r, want %r" % (y[:4].tolist(), want))


def _gathered_at_once(stream_ctx, tag):
    # Many allgathers whose results (copied out of the runtime's buffer, which is then freed
    # and reused) are read at once, while the reading stream is busy with a long kernel.
    want, got = [], []
    with stream_ctx:
        for i in range(12):
            x = torch.full((4096,), float(i * 10 + hvd.rank()), device=DEV)
            _sleep_ms(5)
            y = hvd.allgather(x, name="%s.%d" % (tag, i))
            got.append(y.clone())
            want.append(torch.cat([torch.full((4096,), float(i * 10 + r)) for r in range(hvd.size())]))
    torch.cuda.synchronize()
    for i, (g, w) in enumerate(zip(got, want)):
        check(torch.equal(g.cpu(), w), "%s #%d: %r" % (tag, i, g.cpu()[::4096].tolist()))


@case
def results_read_at_once_on_a_busy_stream_are_final():
    _gathered_at_once(torch.cuda.stream(torch.cuda.current_stream()), "busy")


@case
def results_read_at_once_on_a_side_stream_are_final():
    _gathered_at_once(torch.cuda.stream(torch.cuda.Stream()), "side")


@case
def int16_on_cuda():
    # NCCL has no 16-bit integers: refused at enqueue, naming the dtype, and the job goes on.
    # The staged plane reduces them on the CPU.
    x = torch.arange(-50, 50, dtype=torch.int16)
    if os.environ.get("HORA_GPU_OPERATIONS", "auto") in ("auto", "nccl"):
        try:
            hvd.allreduce(x.to(DEV), op=hvd.Sum, name="i16.gpu")
        except Exception as e:  # noqa: BLE001: the message is what is checked
            check("int16" in str(e), "the refusal does not name int16: %s" % e)
        else:
            raise AssertionError("an int16 CUDA allreduce was not refused")
        y = hvd.allreduce(torch.ones(8, device=DEV), op=hvd.Sum, name="after.i16")
        check(torch.all(y == hvd.size()).item(), "the job did not go on: %r" % y.tolist())
        same(hvd.broadcast(x.to(DEV), 0, name="i16.bc.g"), x, "int16 broadcast")
    else:
        same(hvd.allreduce(x.to(DEV), op=hvd.Sum, name="i16.gpu"),
             hvd.allreduce(x, op=hvd.Sum, name="i16.cpu"), "int16 allreduce")


@case
def staged_busbw_beside_the_cpu():
    if hvd.size() == 1:
        raise Skip("world size 1")
    n = 16 << 20  # 64 MiB of float32
    out = []
    for dev in (DEV, torch.device("cpu")):
        x = torch.ones(n, device=dev)
        hvd.allreduce_(x, op=hvd.Sum, name="bw.%s" % dev.type)
        times = []
        for i in range(5):
            hvd.barrier()
            t0 = time.perf_counter()
            hvd.allreduce_(x, op=hvd.Sum, name="bw.%s" % dev.type)
            times.append(time.perf_counter() - t0)
        times.sort()
        out.append(2.0 * (hvd.size() - 1) / hvd.size() * n * 4 / times[len(times) // 2] / 1e9)
        check(torch.all(x == hvd.size() ** 6).item(), "busbw result %r" % x[:2].tolist())
    if hvd.rank() == 0:
        print("STAGED_BUSBW np=%d 64MiB cuda(%s)=%.2f GB/s cpu(%s)=%.2f GB/s cuda/cpu=%.2f" % (
            hvd.size(), os.environ.get("HORA_GPU_OPERATIONS"), out[0],
            os.environ.get("HORA_CPU_OPERATIONS", "auto"), out[1], out[0] / out[1]), flush=True)


class Skip(Exception):
    pass


@case
def cpu_and_gpu_tensors_in_flight_together():
    xs = [sample(torch.float32, 257, seed=i) for i in range(6)]
    handles = []
    for i, x in enumerate(xs):
        t = x.to(DEV) if i % 2 else x
        handles.append(hvd.allreduce_async(t, op=hvd.Sum, name="mixed.%d" % i))
    for i, (x, h) in enumerate(zip(xs, handles)):
        y = hvd.synchronize(h)
        check(y.device.type == ("cuda" if i % 2 else "cpu"), "device of #%d: %s" % (i, y.device))
        check(torch.equal(y.cpu(), x * hvd.size()), "mixed #%d" % i)


def _train(device, steps=20):
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)).double().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=[
        ("%s.%s" % (device.type, n), p) for n, p in model.named_parameters()])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    g = torch.Generator().manual_seed(99)
    for step in range(steps):
        x = torch.randn(64, 16, generator=g, dtype=torch.float64).to(device)
        y = torch.randn(64, 4, generator=g, dtype=torch.float64).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], float(loss)


@case
def distributed_optimizer_on_cuda_matches_the_cpu_run():
    gpu, gpu_loss = _train(DEV)
    cpu, cpu_loss = _train(torch.device("cpu"))
    for i, (a, b) in enumerate(zip(gpu, cpu)):
        check(torch.allclose(a, b, atol=1e-9, rtol=1e-7),
              "parameter %d differs by %g" % (i, (a - b).abs().max()))
    check(abs(gpu_loss - cpu_loss) < 1e-9, "loss %r vs %r" % (gpu_loss, cpu_loss))


def main():
    hvd.init()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    failed = 0
    for fn in CASES:
        try:
            fn()
            print("CASE %s PASS" % fn.__name__, flush=True)
        except Skip as e:
            print("CASE %s SKIP %s" % (fn.__name__, e), flush=True)
        except Exception as e:
            failed += 1
            print("CASE %s FAIL %s" % (fn.__name__, str(e).replace("\n", " | ")[:2000]),
                  flush=True)
            traceback.print_exc()
    hvd.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
