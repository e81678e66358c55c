"""One rank of a job run by //tests/package:wheel_test on Python 3.12 without numpy or torch:
the installed package's own ctypes layer (hora._lib, hora.core) over libhora.so's C API.
`import hora` needs numpy, so the package is entered without running hora/__init__.py.
Prints `CASE <name> PASS|FAIL <why>`; writes OUT_DIR/rank<R>.json (where things came from).
"""

import ctypes
import importlib.util
import json
import os
import sys


def load_hora_core():
    spec = importlib.util.find_spec("hora")  # finds the package without executing it
    shell = importlib.util.module_from_spec(spec)
    sys.modules["hora"] = shell  # a package with no attributes: hora.core and hora._lib load
    import hora.core
    import hora._lib
    return hora.core, hora._lib, spec.submodule_search_locations[0]


def case(name, ok, why=""):
    print("CASE %s %s%s" % (name, "PASS" if ok else "FAIL", "" if ok else " " + why), flush=True)


def tensor(lib_mod, buf, count, dtype):
    shape = (ctypes.c_int64 * 1)(count)
    t = lib_mod.HoraTensor()
    t.data, t.shape, t.ndim, t.dtype = ctypes.addressof(buf), shape, 1, dtype
    t.device, t.device_index, t.stream = 0, 0, None
    return t, shape


def wait(lib_mod, lib, handle, what):
    lib_mod.check(lib.hora_wait(handle, 60.0), what)


def main():
    core, _lib, pkg = load_hora_core()
    core.init()
    r, n = core.rank(), core.size()
    lib = _lib.lib()
    f32, sum_op = 6, 0  # HORA_FLOAT32, HORA_SUM (bindings/c/hora.h)
    buf = (ctypes.c_float * 8)(*[float((r + 1) * i) for i in range(8)])
    t, shape = tensor(_lib, buf, 8, f32)
    h = _lib.c_handle()
    _lib.check(lib.hora_allreduce_async(b"sum", ctypes.byref(t), ctypes.addressof(buf), sum_op,
                                        1.0, 1.0, 0, ctypes.byref(h)), "allreduce")
    wait(_lib, lib, h, "allreduce")
    lib.hora_release(h)
    want = [float(i * sum(k + 1 for k in range(n))) for i in range(8)]
    case("capi_allreduce_sum", list(buf) == want, "%s != %s" % (list(buf), want))

    root = n - 1
    bb = (ctypes.c_float * 4)(*([float(r)] * 4))
    t, shape = tensor(_lib, bb, 4, f32)
    _lib.check(lib.hora_broadcast_async(b"bcast", ctypes.byref(t), root, 0, ctypes.byref(h)),
               "broadcast")
    wait(_lib, lib, h, "broadcast")
    lib.hora_release(h)
    case("capi_broadcast", list(bb) == [float(root)] * 4, str(list(bb)))

    gb = (ctypes.c_float * (r + 1))(*([float(r)] * (r + 1)))
    t, shape = tensor(_lib, gb, r + 1, f32)
    _lib.check(lib.hora_allgather_async(b"gather", ctypes.byref(t), 0, ctypes.byref(h)),
               "allgather")
    wait(_lib, lib, h, "allgather")
    out_shape, ndim = (ctypes.c_int64 * 4)(), ctypes.c_int32()
    _lib.check(lib.hora_result_shape(h, out_shape, 4, ctypes.byref(ndim)), "result_shape")
    total = sum(k + 1 for k in range(n))
    out = (ctypes.c_float * total)()
    _lib.check(lib.hora_result_copy(h, ctypes.addressof(out), ctypes.sizeof(out)), "result_copy")
    lib.hora_release(h)
    want = [float(k) for k in range(n) for _ in range(k + 1)]
    case("capi_allgather_uneven", ndim.value == 1 and out_shape[0] == total and list(out) == want,
         "shape %s, %s" % (out_shape[0], list(out)))
    with open(os.path.join(sys.argv[1], "rank%d.json" % r), "w") as f:
        json.dump({"package": pkg, "library": _lib.lib_path(), "python": sys.version}, f)
    core.shutdown()


if __name__ == "__main__":
    main()
