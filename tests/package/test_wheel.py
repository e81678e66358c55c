"""The wheel (//tools/wheel:wheel, tools/build_wheel.sh) installed into fresh virtual
environments, used from a directory outside the repository with nothing of the repository or of
Bazel on any path (no PYTHONPATH, HORA_LIBRARY or LD_LIBRARY_PATH):
  - its contents: RECORD's hashes, the console script, rpaths, nothing of the system set or of
    NVIDIA bundled, under the size limit;
  - Debian's torch 1.13 (a venv over /usr/bin/python3 with --system-site-packages), torch 2.x
    (a venv that sees /opt/hora/torch2's site-packages through a .pth) and Python 3.12 (no
    numpy, no torch: the package's ctypes layer): hora and libhora.so are the venv's, ldd of
    every installed library resolves inside the venv or to the system set;
  - `horarun -np 2` jobs of hora.torch (collectives and DistributedOptimizer against
    references), `horarun --check-build`, the README's main job (examples/gpt_char_lm.py), the
    mpi backend through `horarun --mpi`, and its clear error where Open MPI is missing.
The wheel: $HORA_WHEEL, else the Bazel target's output in the runfiles, else dist/.
"""

import base64
import csv
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "wheel"))
import bundle_libs  # noqa: E402  (the system set and the NVIDIA set, as the packer uses them)

ROOT = os.getcwd()  # run_pytest.sh runs from the repository root (or the runfiles root)
TORCH2_VENV = os.environ.get("HORA_TORCH2", "/opt/hora/torch2")
MAX_WHEEL_MIB = 60
JOB_TIMEOUT = 240


def find_wheel():
    env = os.environ.get("HORA_WHEEL")
    if env:
        return env
    for pattern in ("tools/wheel/hora-*.whl", "dist/hora-*.whl"):
        found = sorted(glob.glob(os.path.join(ROOT, pattern)))
        if found:
            return found[-1]
    raise RuntimeError("no wheel: build //tools/wheel:wheel or run tools/build_wheel.sh "
                       "(or set HORA_WHEEL)")


def python312():
    for path in [os.environ.get("HORA_PYTHON312", "")] + sorted(
            glob.glob("/root/.pyenv/versions/3.12*/bin/python3")):
        if path and os.path.exists(path):
            return path
    return None


def clean_env(venv):
    """A fresh process's environment: the venv first on PATH, nothing of the repository."""
    env = {"PATH": os.path.join(venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
           "PIP_NO_CACHE_DIR": "1", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "TMPDIR": "/tmp"}
    if os.environ.get("USER"):
        env["USER"] = os.environ["USER"]
    return env


def run(cmd, cwd, env, timeout=JOB_TIMEOUT):
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, universal_newlines=True, timeout=timeout)
    return p.returncode, p.stdout


@pytest.fixture(scope="module")
def wheel():
    return find_wheel()


@pytest.fixture(scope="module")
def outside():
    """A working directory under /tmp, outside the repository and Bazel's trees."""
    d = tempfile.mkdtemp(prefix="hora-wheel-test.", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_venv(outside, wheel, name, base_python, system_site=False, extra_site=None):
    venv = os.path.join(outside, name)
    cmd = [base_python, "-m", "venv", venv] + (["--system-site-packages"] if system_site else [])
    rc, out = run(cmd, outside, clean_env(venv))
    assert rc == 0, "venv creation failed:\n" + out
    py = os.path.join(venv, "bin", "python")
    if extra_site:
        site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   outside, clean_env(venv))[1].strip()
        with open(os.path.join(site, "zz_torch2.pth"), "w") as f:
            f.write(extra_site + "\n")
    rc, out = run([py, "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check",
                   wheel], outside, clean_env(venv))
    assert rc == 0, "pip install --no-index %s failed:\n%s" % (wheel, out)
    return venv


def torch2_site():
    py = os.path.join(TORCH2_VENV, "bin", "python")
    if not os.path.exists(py):
        raise RuntimeError("torch 2.x is not installed at %s: run tools/setup.sh" % TORCH2_VENV)
    return subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, universal_newlines=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def venvs(outside, wheel):
    """name -> venv, made on first use."""
    made = {}

    def get(name):
        if name not in made:
            if name == "torch1":
                made[name] = make_venv(outside, wheel, name, "/usr/bin/python3", system_site=True)
            elif name == "torch2":
                made[name] = make_venv(outside, wheel, name, "/usr/bin/python3",
                                       extra_site=torch2_site())
            elif name == "py312":
                py = python312()
                if py is None:  # the machine image's pyenv, not installed by tools/setup.sh
                    pytest.skip("no Python 3.12 (pyenv's /root/.pyenv/versions/3.12*)")
                made[name] = make_venv(outside, wheel, name, py)
        return made[name]
    return get


def installed_package(venv):
    pkgs = glob.glob(os.path.join(venv, "lib", "python3.*", "site-packages", "hora"))
    assert len(pkgs) == 1, pkgs
    return pkgs[0]


# ---- the wheel itself -----------------------------------------------------------------------

def test_wheel_contents(wheel):
    assert os.path.getsize(wheel) < MAX_WHEEL_MIB * 2**20, os.path.getsize(wheel)
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())
    info = [n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")][0]
    version = info[len("hora-"):-len(".dist-info")]
    assert os.path.basename(wheel) == "hora-%s-py3-none-linux_x86_64.whl" % version
    rows = list(csv.reader(io.StringIO(z.read(info + "/RECORD").decode())))
    recorded = {r[0] for r in rows}
    assert recorded == names, recorded ^ names
    for path, digest, size in rows:
        if path == info + "/RECORD":
            assert digest == "" and size == ""
            continue
        data = z.read(path)
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
            b"=").decode()
        assert digest == want and int(size) == len(data), path
    entry_points = z.read(info + "/entry_points.txt").decode()
    assert "horarun = hora_launcher:main" in entry_points
    assert "hora-timeline = hora_timeline_cli:main" in entry_points
    wheel_meta = z.read(info + "/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_meta and "Tag: py3-none-linux_x86_64" in wheel_meta
    meta = z.read(info + "/METADATA").decode()
    assert "Name: hora\n" in meta and "Version: %s\n" % version in meta
    for needed in ("hora/__init__.py", "hora/torch/__init__.py", "hora/libhora.so",
                   "hora_launcher/__init__.py", "hora_launcher/horarun_lib.py",
                   "hora_timeline_cli/__init__.py", "hora_timeline_cli/cli.py",
                   "hora_timeline_cli/hora_timeline.py",
                   "hora/include/hora.h", "hora/_bundle.json"):
        assert needed in names, needed
    libs = sorted(n[len("hora/_libs/"):] for n in names if n.startswith("hora/_libs/"))
    for soname in ("libgrpc++.so.1.51", "libprotobuf.so.32", "libgloo.so.0", "libmpi.so.40",
                   "libspdlog.so.1.10", "libfmt.so.9"):
        assert soname in libs, soname
    assert not [l for l in libs if bundle_libs.is_system(l) or bundle_libs.from_environment(l)]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    manifest = json.loads(z.read("hora/_bundle.json"))
    assert sorted(l["name"] for l in manifest["libraries"]) == libs
    assert set(manifest["floor"]) == {"GLIBC", "GLIBCXX", "CXXABI"}, manifest["floor"]


def test_rpaths_and_stripped(outside, wheel):
    d = os.path.join(outside, "unpacked")
    zipfile.ZipFile(wheel).extractall(d)
    files = [os.path.join(d, "hora", "libhora.so")] + sorted(
        glob.glob(os.path.join(d, "hora", "_libs", "*")))
    for f in files:
        dyn = subprocess.run(["readelf", "-d", "-W", f], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True).stdout
        want = "$ORIGIN/_libs" if f.endswith("hora/libhora.so") else "$ORIGIN"
        assert "Library runpath: [%s]" % want in dyn, (f, dyn)
        syms = subprocess.run(["readelf", "-S", "-W", f], stdout=subprocess.PIPE,
                              universal_newlines=True, check=True).stdout
        assert ".debug_info" not in syms and ".symtab" not in syms, "%s is not stripped" % f


# ---- installed ------------------------------------------------------------------------------

WHERE = r'''
import json, hora, hora._lib, hora.torch
hora._lib.lib()
print(json.dumps({"file": hora.__file__, "lib": hora._lib.lib_path(), "version": hora.version()}))
'''


@pytest.mark.parametrize("name", ["torch1", "torch2", "py312"])
def test_installed_is_the_venvs(venvs, outside, name):
    venv = venvs(name)
    pkg = installed_package(venv)
    py = os.path.join(venv, "bin", "python")
    if name != "py312":  # `import hora` needs numpy, which 3.12 does not have here
        rc, out = run([py, "-c", WHERE], outside, clean_env(venv))
        assert rc == 0, out
        got = json.loads(out.strip().splitlines()[-1])
        assert got["file"] == os.path.join(pkg, "__init__.py"), got
        assert got["lib"] == os.path.join(pkg, "libhora.so"), got
        rc, hr = run([os.path.join(venv, "bin", "horarun"), "--version"], outside,
                     clean_env(venv))
        assert rc == 0 and hr.split()[-1] == got["version"], (hr, got)
    # The command docs/timeline.md tells the user to run (standard library only: on 3.12 too).
    rc, tl = run([os.path.join(venv, "bin", "hora-timeline"), "--help"], outside, clean_env(venv))
    assert rc == 0 and "hora-timeline" in tl and "report" in tl, tl
    files = [os.path.join(pkg, "libhora.so")] + sorted(glob.glob(os.path.join(pkg, "_libs", "*")))
    for f in files:
        for soname, where in bundle_libs.ldd(f).items():
            if bundle_libs.is_system(soname):
                continue
            assert where and os.path.realpath(where).startswith(os.path.realpath(pkg) + "/"), \
                "%s: %s => %s" % (f, soname, where)


def job_cases(out):
    """{case: {rank: (PASS|FAIL, why)}} from horarun's `[R]<stdout>: CASE name STATUS why`."""
    cases = {}
    for line in out.splitlines():
        if "]<stdout>: CASE " not in line:
            continue
        head, _, text = line.partition("]<stdout>: ")
        parts = text.split(" ", 3)
        cases.setdefault(parts[1], {})[int(head.lstrip("["))] = (parts[2], " ".join(parts[3:]))
    return cases


def check_job(rc, out, np, names):
    cases = job_cases(out)
    assert rc == 0, out[-6000:]
    for name in names:
        for r in range(np):
            status = cases.get(name, {}).get(r, ("MISSING", ""))
            assert status[0] == "PASS", "%s rank %d: %s\n%s" % (name, r, status, out[-6000:])


def run_job(venv, outside, script, tag, launcher_args=(), env_extra=None, np=2):
    """Copies the rank script outside the repository, runs it under the venv's horarun."""
    job_dir = tempfile.mkdtemp(prefix=tag + ".", dir=outside)
    shutil.copy(os.path.join(HERE, script), job_dir)
    env = clean_env(venv)
    env.update(env_extra or {})
    cmd = [os.path.join(venv, "bin", "horarun"), "-np", str(np)] + list(launcher_args) + [
        os.path.join(venv, "bin", "python"), os.path.join(job_dir, script), job_dir]
    rc, out = run(cmd, job_dir, env)
    reports = [json.load(open(os.path.join(job_dir, "rank%d.json" % r)))
               for r in range(np) if os.path.exists(os.path.join(job_dir, "rank%d.json" % r))]
    return rc, out, reports


TORCH_CASES = ["allreduce_sum", "allreduce_average_f64", "allreduce_max_i32", "allgather_uneven",
               "broadcast", "optimizer_matches_reference", "optimizer_trained"]


@pytest.mark.parametrize("name,backend", [("torch1", "gloo"), ("torch2", "auto")])
def test_torch_job(venvs, outside, name, backend):
    venv = venvs(name)
    rc, out, reports = run_job(venv, outside, "wheel_job.py", name,
                               env_extra={"HORA_CPU_OPERATIONS": backend})
    check_job(rc, out, 2, TORCH_CASES)
    assert len(reports) == 2, out[-3000:]
    pkg = installed_package(venv)
    major = "1." if name == "torch1" else "2."
    for rep in reports:
        assert rep["hora_file"] == os.path.join(pkg, "__init__.py"), rep["hora_file"]
        assert rep["library"] == os.path.join(pkg, "libhora.so"), rep["library"]
        assert rep["torch"].startswith(major), rep["torch"]
    assert reports[0]["params"] == reports[1]["params"], "ranks hold different parameters"


def test_mpi_backend_from_the_wheel(venvs, outside):
    """The bundled libmpi under this machine's mpirun (its components are the system's), then
    the same libmpi told its installation is elsewhere: a clear error, not MPI's abort."""
    venv = venvs("torch1")
    rc, out, _ = run_job(venv, outside, "wheel_job.py", "mpi", launcher_args=["--mpi"],
                         env_extra={"HORA_CPU_OPERATIONS": "mpi"})
    check_job(rc, out, 2, TORCH_CASES)
    job_dir = tempfile.mkdtemp(prefix="nompi.", dir=outside)
    env = clean_env(venv)
    env["HORA_CPU_OPERATIONS"] = "mpi"
    rc, out = run([os.path.join(venv, "bin", "horarun"), "--mpi", "-np", "2", "/usr/bin/env",
                   "OPAL_PREFIX=" + os.path.join(job_dir, "no-openmpi"),
                   os.path.join(venv, "bin", "python"), "-c", "import hora; hora.init()"],
                  job_dir, env)
    text = out.replace("\n[0]<stderr>: ", "").replace("\n[1]<stderr>: ", "")
    assert rc != 0, out
    assert "finds none of its components" in text and "HORA_CPU_OPERATIONS" in text, out
    assert "MPI_ERRORS_ARE_FATAL" not in out, out


@pytest.mark.parametrize("name", ["torch1", "torch2"])
def test_check_build(venvs, outside, name):
    venv = venvs(name)
    rc, out = run([os.path.join(venv, "bin", "horarun"), "--check-build"], outside,
                  clean_env(venv))
    assert rc == 0, out
    lib = os.path.join(installed_package(venv), "libhora.so")
    assert ("(%s)" % lib) in out.splitlines()[0], out
    for backend in ("gloo", "mpi", "shm"):
        assert "[X] %s" % backend in out, out


def test_main_job(venvs, outside):
    """The README's main job (tools/quickstart.sh: examples/gpt_char_lm.py under horarun -np 2
    on Debian's torch), shortened by its flags, from the installed package."""
    venv = venvs("torch1")
    job_dir = tempfile.mkdtemp(prefix="main.", dir=outside)
    script = shutil.copy(os.path.join(ROOT, "examples", "gpt_char_lm.py"), job_dir)
    rc, out = run([os.path.join(venv, "bin", "horarun"), "-np", "2",
                   os.path.join(venv, "bin", "python"), script, "--steps", "4", "--log-every",
                   "2", "--sample-chars", "20", "--batch-size", "4"], job_dir, clean_env(venv))
    assert rc == 0, out[-4000:]
    assert "PASS: every rank holds identical parameters" in out, out[-4000:]
    assert "step    4/4  loss" in out, out[-4000:]


def test_python312_capi_job(venvs, outside):
    """Python 3.12: the console script runs horarun on 3.12, the ranks use the package's
    ctypes layer (no numpy there) for allreduce, broadcast and an uneven allgather."""
    venv = venvs("py312")
    rc, out, reports = run_job(venv, outside, "capi_job.py", "py312")
    check_job(rc, out, 2, ["capi_allreduce_sum", "capi_broadcast", "capi_allgather_uneven"])
    pkg = installed_package(venv)
    assert len(reports) == 2, out[-3000:]
    for rep in reports:
        assert rep["package"] == pkg and rep["library"] == os.path.join(pkg, "libhora.so"), rep
        assert rep["python"].startswith("3.12"), rep["python"]
    with open(os.path.join(venv, "bin", "horarun")) as f:
        assert f.readline().startswith("#!" + venv), "horarun does not run on the venv's 3.12"
