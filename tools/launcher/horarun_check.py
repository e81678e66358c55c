"""horarun --check-build: which backends this build of Hora has, whether CUDA and NCCL are
in it, and which launchers this host can use.

The list of backends comes, in this order of preference, from the Python package
(`hora.built_backends()`), from libhora.so's `hora_built_backends()` (comma-separated), or
is reported as unavailable; CUDA and NCCL (and each known backend) from `hora_built(name)`.
"""

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys

KNOWN = ("gloo", "mpi", "nccl", "cuda")
HERE = os.path.dirname(os.path.realpath(__file__))
TREE = os.path.normpath(os.path.join(HERE, "..", ".."))


def _import_hora():
    """The `hora` package, from this python's path, else from the source tree; or None."""
    for extra in (None, os.path.join(TREE, "bindings", "python")):
        if extra is not None:
            if not os.path.isdir(os.path.join(extra, "hora")):
                continue
            sys.path.insert(0, extra)
        try:
            import hora
            return hora
        except Exception:  # any failure means "not usable", never a crash of --check-build
            if extra is not None:
                sys.path.remove(extra)
    return None


def _library_paths():
    if os.environ.get("HORA_LIBRARY"):
        return [os.environ["HORA_LIBRARY"]]  # as the package does: only that one
    paths = []
    paths.append(os.path.join(TREE, "bazel-bin", "bindings", "c", "libhora.so"))
    paths.append(os.path.normpath(os.path.join(HERE, "..", "..", "libhora.so")))  # PREFIX/lib
    found = ctypes.util.find_library("hora")
    if found:
        paths.append(found)
    paths.append("/usr/local/lib/libhora.so")
    return paths


def _load_library(hora):
    """(ctypes library, path) or (None, why)."""
    if hora is not None:
        try:
            return hora._lib.lib(), hora._lib.lib_path()
        except Exception:
            pass  # e.g. a library older or newer than the package: load it plainly below
    tried = []
    for path in _library_paths():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (not found)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    return None, "libhora.so not found; tried " + "; ".join(tried)


def _c_string(lib, name):
    fn = getattr(lib, name, None)
    if fn is None:
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    value = fn()
    return value.decode("utf-8", "replace") if value is not None else None


def _c_built(lib, name):
    fn = getattr(lib, "hora_built", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p]
    return bool(fn(name.encode()))


def _nccl(lib):
    """(version code, detail) from hora_nccl_version, or None for a libhora without it."""
    fn = getattr(lib, "hora_nccl_version", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    detail = ctypes.c_char_p()
    code = fn(ctypes.byref(detail))
    return int(code), (detail.value or b"").decode("utf-8", "replace")


def _nccl_text(code):
    major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
    return "%d.%d.%d" % (major, rest // 100, rest % 100)


def facts():
    """What --check-build reports, as a dict (tests read it through the printed text)."""
    hora = _import_hora()
    lib, where = _load_library(hora)
    result = {"library": where if lib is not None else None,
              "error": None if lib is not None else where,
              "version": None, "backends": None, "source": None, "built": {}}
    if hora is not None and callable(getattr(hora, "built_backends", None)):
        try:
            result["backends"] = [str(b) for b in hora.built_backends()]
            result["source"] = "hora.built_backends()"
        except Exception as e:
            result["error"] = "hora.built_backends() failed: %s" % e
    if lib is None:
        return result
    result["version"] = _c_string(lib, "hora_version")
    if result["backends"] is None:
        listed = _c_string(lib, "hora_built_backends")
        if listed is not None:
            result["backends"] = [b.strip() for b in listed.split(",") if b.strip()]
            result["source"] = "hora_built_backends()"
    for name in KNOWN + tuple(result["backends"] or ()):
        result["built"][name] = _c_built(lib, name)
    result["nccl"] = _nccl(lib)
    result["cuda_info"] = _c_string(lib, "hora_cuda_info")
    return result


def _mpirun_version():
    if shutil.which("mpirun") is None:
        return None
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, timeout=10,
                             stdin=subprocess.DEVNULL).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return "found"
    return (out.strip().splitlines() or ["found"])[0]


def _mark(value):
    return {True: "[X]", False: "[ ]", None: "[?]"}[value]


def main():
    f = facts()
    w = sys.stdout.write
    if f["library"] is None:
        w("Hora: build information unavailable: %s\n" % f["error"])
    else:
        w("Hora %s (%s)\n" % (f["version"] or "(version unknown)", f["library"]))
    w("\nBackends built in:\n")
    if f["backends"] is not None:
        w("    %s    (from %s)\n" % (", ".join(f["backends"]) or "(none)", f["source"]))
    else:
        w("    the list of backends is unavailable (this build has neither "
          "hora.built_backends() nor hora_built_backends())\n")
    built = f["built"]
    listed = f["backends"]

    def has(name):
        """The list decides where there is one (cuda is no backend: hora_built says); else
        hora_built(name)."""
        if name == "cuda" and built.get("cuda") is not None:
            return built["cuda"]
        return (name in listed) if listed is not None else built.get(name)

    for name in sorted(set(KNOWN) | set(listed or ())):
        w("    %s %s\n" % (_mark(has(name)), name))
    words = {True: "yes", False: "no", None: "unknown"}
    cuda, nccl = built.get("cuda"), built.get("nccl")  # hora_built() first: it knows CUDA
    cuda_word = words[has("cuda") if cuda is None else cuda]
    nccl_word = words[has("nccl") if nccl is None else nccl]
    if f.get("cuda_info"):
        cuda_word += ": " + f["cuda_info"]
    loaded = f.get("nccl")
    if loaded is not None and nccl_word == "yes":
        code, detail = loaded
        if code > 0:
            nccl_word += ": version %s (%d), loaded from %s" % (_nccl_text(code), code, detail)
        else:
            nccl_word += ", but it cannot be loaded here: %s" % detail
    w("\nCUDA: %s\nNCCL: %s\n" % (cuda_word, nccl_word))
    mpirun = _mpirun_version()
    w("\nLaunchers on this host:\n")
    w("    [X] local\n")
    w("    %s ssh (-H with other hosts)\n" % _mark(shutil.which("ssh") is not None))
    w("    %s mpirun (--mpi)%s\n" % (_mark(mpirun is not None),
                                     ": " + mpirun if mpirun else ""))
    return 0 if f["library"] is not None else 1
