"""Detects the CUDA toolkit and NCCL; generates @local_cuda with empty targets when absent."""

def _impl(ctx):
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    wanted = ctx.os.environ.get("HORA_WITH_CUDA", "1") != "0"
    found = wanted and ctx.path(cuda_path + "/include/cuda_runtime.h").exists and \
            ctx.path(cuda_path + "/include/nccl.h").exists and ctx.path(cuda_path + "/bin/nvcc").exists
    if found:
        ctx.symlink(cuda_path + "/include", "include")
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers", hdrs = glob(["include/**"]), includes = ["include"])
cc_library(name = "cuda_runtime", deps = [":cuda_headers"],
           linkopts = ["-L{p}/lib64", "-Wl,-rpath,{p}/lib64", "-lcudart"])
cc_library(name = "nccl", deps = [":cuda_runtime"], linkopts = ["-L{p}/lib64", "-lnccl"])
# The CUDA runtime linked statically: libhora.so then needs only the driver (libcuda.so.1,
# loaded by the runtime on first use), so it loads on machines without CUDA or a GPU.
cc_library(name = "cudart_static", deps = [":cuda_headers"],
           linkopts = ["{p}/lib64/libcudart_static.a", "-ldl", "-lrt", "-lpthread"])
""".format(p = cuda_path))
    else:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cuda_runtime")
cc_library(name = "nccl")
cc_library(name = "cudart_static")
""")
    ctx.file("defs.bzl", """
CUDA_ENABLED = {enabled}
CUDA_PATH = "{p}"
NVCC = "{p}/bin/nvcc"
def if_cuda(a, b = []):
    return a if CUDA_ENABLED else b
def cuda_compat():
    return [] if CUDA_ENABLED else ["@//third_party:incompatible"]
""".format(enabled = "True" if found else "False", p = cuda_path))

cuda_configure = repository_rule(
    implementation = _impl,
    environ = ["CUDA_PATH", "HORA_WITH_CUDA"],
    local = True,
    configure = True,
)
