"""cuda_library: compiles .cu files with nvcc into a cc_library (CUDA code for sm_80 and sm_90).

    load("//third_party/cuda:cuda_library.bzl", "cuda_library")
    cuda_library(
        name = "kernels",
        cu_srcs = ["kernels.cu"],          # each becomes kernels.pic.o
        cu_hdrs = ["kernels.h"],           # this package's headers the .cu files include
        srcs = ["host.cc"], hdrs = ["api.h"], deps = [...],  # as for cc_library
    )

Each .cu is compiled once (-Xcompiler -fPIC), as SASS for sm_80 and sm_90 plus compute_90 PTX
(so newer GPUs JIT it), -O3, C++17, with the host compiler Bazel uses (-ccbin). Floating
point is exact IEEE: no contraction into fused multiply-adds (--fmad=false), denormals kept
(-ftz=false), so results can match the CPU bit for bit. The object carries its fat binary and
registers it through the CUDA runtime's constructors: link the CUDA runtime
(@local_cuda//:cudart_static) with it. No relocatable device code (-rdc): device functions are
not called across .cu files.

Without CUDA (HORA_WITH_CUDA=0, or no toolkit) the library is incompatible with the platform:
`bazel build //...` skips it and everything that depends on it.
"""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "NVCC", "cuda_compat")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@rules_cc//cc:defs.bzl", "cc_library")

# The architectures of CUDA_GENCODE, as BuiltArchitectures() reports them.
CUDA_ARCHITECTURES = "sm_80 sm_90 compute_90"

CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

CUDA_NVCC_FLAGS = CUDA_GENCODE + [
    "-std=c++17",
    "-O3",
    "--fmad=false",
    "-ftz=false",
    "-prec-div=true",
    "-prec-sqrt=true",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-Wall",
    "-Werror=all-warnings",
]

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps]).compilation_context
    headers = depset(ctx.files.hdrs, transitive = [cc.headers])
    include_flags = ["-I."]
    for d in cc.includes.to_list() + cc.quote_includes.to_list() + cc.system_includes.to_list():
        include_flags.append("-I" + d)
    include_flags.append("-I" + ctx.genfiles_dir.path)
    defines = ["-D" + d for d in cc.defines.to_list()]
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu")]
        pic = ctx.actions.declare_file("_cuda_%s/%s.pic.o" % (ctx.label.name, stem))
        args = [NVCC, "-ccbin", cc_toolchain.compiler_executable] + include_flags + defines + \
               CUDA_NVCC_FLAGS + ["-DHORA_CUDA_ARCHITECTURES='\"%s\"'" % CUDA_ARCHITECTURES] + \
               ctx.attr.nvcc_flags + ["-c", src.path, "-o", pic.path]
        ctx.actions.run_shell(
            outputs = [pic],
            inputs = depset([src], transitive = [headers]),
            tools = cc_toolchain.all_files,
            command = " ".join(args),
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(pic)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "nvcc_flags": attr.string_list(),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def cuda_library(name, cu_srcs, cu_hdrs = [], nvcc_flags = [], srcs = [], deps = [], **kwargs):
    """A cc_library whose srcs also include nvcc's objects of cu_srcs.

    cu_hdrs: headers of this package the .cu files include; the headers of deps (and their
    include paths) are seen too.
    """
    compat = kwargs.pop("target_compatible_with", []) + cuda_compat()
    all_deps = deps + ["@local_cuda//:cudart_static", "@local_cuda//:cuda_headers"]
    objs = []
    if CUDA_ENABLED:
        _cuda_objects(
            name = name + "_cuda_objects",
            srcs = cu_srcs,
            hdrs = cu_hdrs,
            deps = all_deps,
            nvcc_flags = nvcc_flags,
            target_compatible_with = compat,
            visibility = ["//visibility:private"],
        )
        objs = [":%s_cuda_objects" % name]
    # linkstatic: the objects go into the binary that links them, next to libcudart_static.a,
    # never into a test's private .so (which would need the runtime's symbols from the
    # executable).
    cc_library(
        name = name,
        srcs = srcs + objs,
        deps = all_deps,
        target_compatible_with = compat,
        linkstatic = kwargs.pop("linkstatic", True),
        **kwargs
    )
