"""Makes ELF files relocatable: copies each with every non-system shared library it needs
(as `ldd` resolves them, which is recursive) into one folder, strips them, and sets rpaths so
that they find each other there and nowhere else; measures the glibc / libstdc++ floor.

Used by tools/wheel/make_wheel.py (libhora.so in the wheel) and tools/build_gpu_bundle.sh (the
gpu-tagged test binaries). Standard library only; needs ldd, strip, readelf and patchelf.

What is never copied:
  - SYSTEM: the glibc family, libstdc++ and libgcc_s. Every Linux has them; their versions
    set the floor (`floor()`): the newest GLIBC_ / GLIBCXX_ / CXXABI_ symbol version needed.
  - FROM_ENVIRONMENT: NVIDIA's libraries (the driver's libcuda, NCCL, the CUDA runtime and
    libraries). They come from the machine: the driver, torch's nvidia-* wheels or the CUDA
    toolkit. Hora links the CUDA runtime statically and loads NCCL at run time.
Everything else (gRPC, protobuf, abseil, Gloo, spdlog, fmt, Open MPI, PMIx, OpenSSL, ...) is.
"""

import json
import os
import re
import shutil
import subprocess
import sys

SYSTEM = re.compile(r"^(linux-vdso|linux-gate|ld-linux[-\w]*|libc|libm|libdl|libpthread|librt|"
                    r"libresolv|libutil|libanl|libnsl|libmvec|libstdc\+\+|libgcc_s)\.so(\.|$)")
FROM_ENVIRONMENT = re.compile(r"^lib(cuda|cudart|nccl|nvidia-ml|nvrtc|nvJitLink|cublas\w*|"
                              r"cufft|curand|cusolver|cusparse)\.so(\.|$)")
_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(.*?)\s+\(0x[0-9a-f]+\)\s*$")
_LDD_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_VERSION = re.compile(r"Name:\s+(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)")


class BundleError(Exception):
    pass


def _run(cmd):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # resolve as a fresh process would, by rpath and cache
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       universal_newlines=True)
    if p.returncode != 0:
        raise BundleError("%s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return p.stdout


def ldd(path):
    """{soname: resolved path or None (not found)} of every library `path` loads."""
    out = {}
    for line in _run(["ldd", path]).splitlines():
        m = _LDD_LINE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
            continue
        m = _LDD_NOT_FOUND.match(line)
        if m:
            out[m.group(1)] = None
    return out


def is_system(soname):
    return SYSTEM.match(soname) is not None


def from_environment(soname):
    return FROM_ENVIRONMENT.match(soname) is not None


def dependencies(paths):
    """(to_bundle {soname: path}, from_environment set) over every ELF in `paths`.
    A library ldd does not find is an error, unless it comes from the environment."""
    bundle, environment, missing = {}, set(), []
    for path in paths:
        for soname, where in ldd(path).items():
            if is_system(soname):
                continue
            if from_environment(soname):
                environment.add(soname)
                continue
            if where is None:
                missing.append("%s (needed by %s)" % (soname, path))
                continue
            bundle[soname] = os.path.realpath(where)
    if missing:
        raise BundleError("ldd does not find: " + ", ".join(sorted(missing)))
    return bundle, environment


def _strip_and_rpath(path, rpath):
    os.chmod(path, 0o755)
    _run(["strip", "--strip-unneeded", path])
    _run(["patchelf", "--set-rpath", rpath, path])


def bundle(mains, libdir):
    """Copies every (source, destination) ELF in `mains` and the libraries they need into
    `libdir`, rpath'd ($ORIGIN for the libraries, $ORIGIN/<path to libdir> for each main),
    stripped. Returns the manifest (what was copied from where, what the environment must
    provide, the floor) and checks with ldd that every copy resolves inside the bundle."""
    libs, environment = dependencies([src for src, _ in mains])
    os.makedirs(libdir, exist_ok=True)
    copied = []
    for soname in sorted(libs):
        dst = os.path.join(libdir, soname)
        shutil.copyfile(libs[soname], dst)
        _strip_and_rpath(dst, "$ORIGIN")
        copied.append({"name": soname, "from": libs[soname], "bytes": os.path.getsize(dst)})
    outputs = []
    for src, dst in mains:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        rel = os.path.relpath(libdir, os.path.dirname(dst))
        _strip_and_rpath(dst, "$ORIGIN" if rel == "." else "$ORIGIN/" + rel)
        outputs.append(dst)
    files = outputs + [os.path.join(libdir, c["name"]) for c in copied]
    check_resolves_inside(files, os.path.commonpath([os.path.dirname(f) for f in files]))
    return {"libraries": copied, "from_environment": sorted(environment),
            "floor": floor(files)}


def check_resolves_inside(files, root):
    """Every library each file loads is a system one, one from the environment, or a file
    under `root`; else BundleError naming the file, the library and where it resolved."""
    root = os.path.realpath(root)
    bad = []
    for f in files:
        for soname, where in ldd(f).items():
            if is_system(soname) or from_environment(soname):
                continue
            if where is None or not os.path.realpath(where).startswith(root + os.sep):
                bad.append("%s: %s => %s" % (f, soname, where or "not found"))
    if bad:
        raise BundleError("libraries resolve outside %s:\n  %s" % (root, "\n  ".join(bad)))


def _key(version):
    return tuple(int(x) for x in version.split("."))


def floor(files):
    """{"GLIBC": ["2.36", "libevent_core-2.1.so.7"], "GLIBCXX": [...], "CXXABI": [...]}: the
    newest symbol version of each system library family that any of `files` needs
    (readelf's version-needs section), and the first file that needs it."""
    best = {}
    for f in files:
        for family, version in _VERSION.findall(_run(["readelf", "--version-info", "-W", f])):
            if family not in best or _key(version) > _key(best[family][0]):
                best[family] = [version, os.path.basename(f)]
    return best


def main(argv):
    """bundle_libs.py OUT LIBDIR [NAME=]ELF... : copies each ELF to OUT/NAME (default: its
    file name) and the libraries they need to OUT/LIBDIR; writes OUT/bundle.json (the
    manifest, with "files": the NAMEs) and prints it."""
    if len(argv) < 4:
        sys.stderr.write("usage: bundle_libs.py OUT LIBDIR [NAME=]ELF...\n")
        return 2
    out, libdir = argv[1], os.path.join(argv[1], argv[2])
    mains, names = [], []
    for arg in argv[3:]:
        name, _, src = arg.rpartition("=")
        name = name or os.path.basename(src)
        mains.append((src, os.path.join(out, name)))
        names.append(name)
    try:
        manifest = bundle(mains, libdir)
    except BundleError as e:
        sys.stderr.write("bundle_libs: %s\n" % e)
        return 1
    manifest["files"] = names
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    with open(os.path.join(out, "bundle.json"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
