"""CUDA tensors on a machine without a usable GPU: every rank gets a clear error naming
cudaGetDeviceCount's answer, and the job goes on (CPU operations after it work). The CUDA
tensors are made through the C API's hora_tensor_t (no torch CUDA tensor can exist here); the
runtime refuses them at enqueue, before touching the pointer."""

import ctypes

import numpy as np

import hora
from hora import core
import cases
from cases import case, check, raises


def _cuda_tensor(n=4):
    # A device pointer that is never dereferenced: the refusal comes first.
    return core.make_tensor(0x1000, (n,), core.FLOAT32,
                            core.DEVICE_CUDA, 0, None)


def _healthy(tag):
    y = hora.allreduce(np.ones(3, dtype=np.float32), name="healthy." + tag, op=hora.Sum)
    check(np.allclose(y, hora.size()), "cpu allreduce after the refusal: %r" % (y,))


def _refused(fn, tag):
    e = raises(hora.HoraError, fn)
    text = str(e)
    check("cudaGetDeviceCount" in text, "names cudaGetDeviceCount: %r" % text)
    check("no usable CUDA device" in text, "says there is no usable device: %r" % text)
    _healthy(tag)


@case
def cuda_allreduce_is_refused_and_the_job_goes_on():
    t = _cuda_tensor()

    def go():
        h = core.allreduce_async("cuda.ar", t, 0x1000, hora.Sum)
        h.wait()
    _refused(go, "ar")


@case
def cuda_broadcast_and_allgather_are_refused():
    t = _cuda_tensor()
    _refused(lambda: core.broadcast_async("cuda.bc", t, 0).wait(), "bc")
    _refused(lambda: core.allgather_async("cuda.ag", t).wait(), "ag")


@case
def build_facts_seen_from_every_rank():
    code, detail = hora.nccl_version()
    check(code >= 21400 and "libnccl.so" in detail, "nccl_version: %r" % ((code, detail),))
    check(hora.built("cuda") and hora.built("nccl"), "built cuda/nccl")
    check("cudaGetDeviceCount" in hora.cuda_info(), hora.cuda_info())


if __name__ == "__main__":
    cases.run_all(hora.init, hora.shutdown)
