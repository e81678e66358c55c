"""Writes Hora's wheel, hora-VERSION-py3-none-linux_x86_64.whl (tools/wheel/BUILD.bazel runs it;
tools/build_wheel.sh copies the result to dist/). Standard library only, no network.

The wheel holds, under site-packages:
  hora/                      the Python package (bindings/python/hora), hora.torch included
  hora/libhora.so            where hora/_lib.py looks first; RUNPATH $ORIGIN/_libs
  hora/_libs/                every non-system library libhora.so needs (bundle_libs.py)
  hora_launcher/             horarun (tools/launcher), for the `horarun` console script: a
                             package of its own, since `import hora` needs numpy and horarun
                             needs only the standard library
  hora/include/hora.h        the C API's header
  hora/_bundle.json          what was bundled from where, and the glibc / GLIBCXX floor
  hora-VERSION.dist-info/    METADATA, WHEEL, entry_points.txt, RECORD (sha256 of each file)
One wheel serves every CPython 3 (the package loads libhora.so with ctypes): tag py3-none.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bundle_libs  # noqa: E402

TAG = "py3-none-linux_x86_64"
# Entries carry this fixed time, so the same inputs give the same bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def launcher_version(launcher_files):
    """horarun's __version__ (tools/launcher/horarun_lib.py), Hora's release number."""
    lib = [f for f in launcher_files if os.path.basename(f) == "horarun_lib.py"]
    text = open(lib[0]).read() if lib else ""
    m = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        raise SystemExit("make_wheel: no __version__ in horarun_lib.py among the launcher files")
    return m.group(1)


def stage(args, package_dir, root):
    """Lays the wheel's files out under `root`; returns the bundle manifest."""
    pkg = os.path.join(root, "hora")
    for src in args.package_files:
        rel = os.path.relpath(src, package_dir)
        if rel.startswith(".."):
            raise SystemExit("make_wheel: %s is outside the package %s" % (src, package_dir))
        dst = os.path.join(pkg, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
    launcher = os.path.join(root, "hora_launcher")
    os.makedirs(launcher)
    for src in args.launcher_files:
        if src.endswith(".py"):
            shutil.copyfile(src, os.path.join(launcher, os.path.basename(src)))
    if not os.path.exists(os.path.join(launcher, "__init__.py")):
        raise SystemExit("make_wheel: tools/launcher/__init__.py is not among the launcher files")
    # hora-timeline: its script as a module (it imports its two neighbours by path), for the
    # console script.
    timeline = os.path.join(root, "hora_timeline_cli")
    os.makedirs(timeline)
    for src in args.timeline_files:
        name = os.path.basename(src)
        shutil.copyfile(src, os.path.join(timeline, "cli.py" if name == "hora-timeline" else name))
    if not os.path.exists(os.path.join(timeline, "cli.py")):
        raise SystemExit("make_wheel: tools/timeline/hora-timeline is not among the timeline files")
    with open(os.path.join(timeline, "__init__.py"), "w") as f:
        f.write('"""The hora-timeline command (tools/timeline), for the wheel\'s console script."""\n\n'
                "import sys\n\n\ndef main():\n    from . import cli\n"
                "    sys.exit(cli.main(sys.argv[1:]))\n")
    os.makedirs(os.path.join(pkg, "include"))
    shutil.copyfile(args.header, os.path.join(pkg, "include", "hora.h"))
    manifest = bundle_libs.bundle([(args.libhora, os.path.join(pkg, "libhora.so"))],
                                  os.path.join(pkg, "_libs"))
    with open(os.path.join(pkg, "_bundle.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return manifest


def metadata(version, manifest):
    fl = manifest["floor"]
    floor = ", ".join("%s_%s" % (k, fl[k][0]) for k in sorted(fl))
    return "\n".join([
        "Metadata-Version: 2.1",
        "Name: hora",
        "Version: " + version,
        "Summary: Collective communication runtime for distributed training "
        "(Horovod-like), with horarun",
        "Requires-Python: >=3.8",
        "Platform: linux_x86_64",
        "",
        "Hora's C API library (libhora.so) with the shared libraries it needs, the Python "
        "package `hora` (numpy) and `hora.torch` (torch, from the environment), and `horarun`.",
        "numpy and torch are not dependencies of the wheel: they come from the environment.",
        "The system must provide glibc, libstdc++ and libgcc_s: " + floor + ".",
        "NCCL and the CUDA driver come from the environment (torch's nvidia wheels or CUDA).",
        "",
    ])


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def write_wheel(root, out, version, manifest):
    info = "hora-%s.dist-info" % version
    meta = {
        "METADATA": metadata(version, manifest),
        "WHEEL": "Wheel-Version: 1.0\nGenerator: hora tools/wheel/make_wheel.py\n"
                 "Root-Is-Purelib: false\nTag: %s\n" % TAG,
        "entry_points.txt": "[console_scripts]\nhorarun = hora_launcher:main\n"
                            "hora-timeline = hora_timeline_cli:main\n",
        "top_level.txt": "hora\nhora_launcher\nhora_timeline_cli\n",
    }
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            entries.append((os.path.relpath(path, root), open(path, "rb").read(),
                            os.access(path, os.X_OK)))
    entries += [(info + "/" + k, v.encode(), False) for k, v in sorted(meta.items())]
    record = "".join("%s,%s,%d\n" % (n, _digest(d), len(d)) for n, d, _ in entries)
    record += info + "/RECORD,,\n"
    entries.append((info + "/RECORD", record.encode(), False))
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data, executable in entries:
            zi = zipfile.ZipInfo(name, _EPOCH)
            zi.external_attr = (0o755 if executable else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", required=True, help="must equal horarun --version")
    p.add_argument("--out", required=True, help="the .whl to write")
    p.add_argument("--libhora", required=True)
    p.add_argument("--header", required=True, help="bindings/c/hora.h")
    p.add_argument("--package-files", nargs="+", required=True,
                   help="bindings/python/hora/**.py")
    p.add_argument("--launcher-files", nargs="+", required=True, help="tools/launcher/*")
    p.add_argument("--timeline-files", nargs="+", required=True,
                   help="tools/timeline: hora-timeline and its modules")
    args = p.parse_args()
    init = [f for f in args.package_files if f.endswith(os.path.join("hora", "__init__.py"))]
    if len(init) != 1:
        raise SystemExit("make_wheel: hora/__init__.py is not among the package files")
    package_dir = os.path.dirname(init[0])
    found = launcher_version(args.launcher_files)
    if found != args.version:
        raise SystemExit("make_wheel: --version %s differs from horarun's __version__ %s "
                         "(update HORA_VERSION in tools/wheel/BUILD.bazel)" % (args.version, found))
    expected = "hora-%s-%s.whl" % (args.version, TAG)
    if os.path.basename(args.out) != expected:
        raise SystemExit("make_wheel: --out must be named %s" % expected)
    root = tempfile.mkdtemp(prefix="hora-wheel.")
    try:
        manifest = stage(args, package_dir, root)
        write_wheel(root, args.out, args.version, manifest)
    except bundle_libs.BundleError as e:
        raise SystemExit("make_wheel: %s" % e)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fl = manifest["floor"]
    print("make_wheel: %s, %.1f MiB, %d bundled libraries, needs %s" % (
        args.out, os.path.getsize(args.out) / 2.0**20, len(manifest["libraries"]),
        ", ".join("%s_%s (%s)" % (k, v[0], v[1]) for k, v in sorted(fl.items()))))


if __name__ == "__main__":
    main()
