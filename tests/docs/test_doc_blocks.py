"""Every fenced block of README.md and docs/*.md, one case each (id: FILE:LINE), against the
code (docs/testing.md, "Docs that are tested"; the markers: doc_blocks.py).

- run: shell blocks run under bash -e in a fresh work folder that links the repository's
  folders (docs/ is an empty folder of its own, /tmp/ is the work folder's tmp/), with
  horarun and hora-timeline on the PATH, the built libhora.so and bindings/python; python
  blocks run as `horarun -np 2 PYTHON block.py` there. 120 s each at most. An `output` block
  after a run block is checked against what it printed: each line in order, any number for
  a number, `...` for anything (per rank for lines of horarun's "[r]<stdout>: ").
- every block but output: each repository path it names exists, each Bazel label it names is
  defined, each horarun option it gives is one horarun knows.
The counts by kind and reason end the output (conftest.py)."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

import doc_blocks
from doc_blocks import NOT_COMMAND, OUTPUT, RUN, SHELL_LANGS, SKIP

ROOT = os.getcwd()  # the runfiles (Bazel) or the checkout: what the blocks run
# The checkout itself (runfiles link back to it): where the paths a block names must exist.
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
HERE = os.path.join(ROOT, "tests", "docs")
TIMEOUT = 120
BLOCKS = doc_blocks.all_blocks(ROOT)
OWNERS = doc_blocks.owners(BLOCKS)
TOP = "tools|tests|examples|bindings|docs|runtime|coordinator|collectives|common|proto|" \
      "third_party|\\.ci"
PATH_RE = re.compile(r"(?<![\w./$-])((?:%s)/[\w./*-]*)" % TOP)
LABEL_RE = re.compile(r"(?<![\w:@])//([\w/.-]*)(?::([\w.+-]+))?")
# Commands the docs run that are not Hora's: the shell's, and what tools/setup.sh installs
# (bazel, Debian's python3 and Open MPI) or the user's cluster has (srun, torchrun).
SYSTEM_COMMANDS = {"cd", "export", ".", "mkdir", "bzl", "bazel", "python3", "mpirun", "srun",
                   "torchrun"}


def read(path, root=ROOT):
    with open(os.path.join(root, path)) as f:
        return f.read()


def logical_lines(text):
    """The block's lines with backslash continuations joined and comments dropped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out


def bazel_bin():
    return os.path.join(ROOT, "bazel-bin") if os.path.isdir(os.path.join(ROOT, "bazel-bin")) \
        else ROOT


def library():
    for lib in (os.path.join(bazel_bin(), "bindings", "c", "libhora.so"),
                os.path.join(ROOT, "bindings", "c", "libhora.so")):
        if os.path.exists(lib):
            return lib
    raise AssertionError("libhora.so is not built (bazel build //bindings/c:libhora.so)")


# --- checks that need no run ---------------------------------------------------------

def path_errors(text):
    errors = []
    for path in PATH_RE.findall(text):
        path = path.rstrip(".,:;")
        if not path.rstrip("/"):
            continue
        full = os.path.join(SRC, path)
        if not (os.path.exists(full) or ("*" in path and __import__("glob").glob(full))):
            errors.append("names %s, which does not exist" % path)
    return errors


def label_errors(text):
    errors = []
    for pkg, name in LABEL_RE.findall(text):
        pkg = pkg.rstrip("/").replace("/...", "").rstrip(".").rstrip("/")
        build = [os.path.join(SRC, pkg, b) for b in ("BUILD.bazel", "BUILD")]
        build = [b for b in build if os.path.exists(b)]
        if not build:
            errors.append("names //%s, which is not a Bazel package" % pkg)
            continue
        body = read(build[0], "/")
        if name and name != "all" and not re.search(r'"%s(\.py|\.sh)?"' % re.escape(name), body):
            errors.append("names //%s:%s, which %s does not define" % (pkg, name,
                                                                     os.path.relpath(build[0], SRC)))
    return errors


def horarun_parser():
    sys.path.insert(0, os.path.join(SRC, "tools", "launcher"))
    try:
        import horarun_args
        return horarun_args.build_parser("0")
    finally:
        sys.path.pop(0)


def horarun_option_errors(lines, parser):
    """Each option given to horarun on these command lines must be one horarun knows; the
    options end at the command (the first word that is not an option or an option's value)."""
    errors = []
    for line in lines:
        try:
            words = shlex.split(line.replace("[", " ").replace("]", " "))
        except ValueError:
            words = line.split()
        for i, w in enumerate(words):
            if w != "horarun" and not w.endswith("/horarun"):
                continue
            j = i + 1
            while j < len(words) and words[j].startswith("-"):
                opt = words[j].split("=", 1)[0]
                action = parser._option_string_actions.get(opt)
                if action is None:
                    errors.append("horarun has no option %s (%s)" % (opt, line))
                    break
                j += 1 if (action.nargs == 0 or "=" in words[j]) else 2
    return errors


def static_errors(block):
    text = block.text
    errors = path_errors(text) + label_errors(text)
    if block.kind != NOT_COMMAND or "horarun" in text:
        errors += horarun_option_errors(logical_lines(text), PARSER)
    return errors


PARSER = horarun_parser()


# --- running a block -----------------------------------------------------------------

def work_folder(tmp):
    """The repository's folders linked into tmp, docs/ and tmp/ empty there, the stand-ins
    (train.py, my_program) and bin/ with horarun and hora-timeline."""
    for name in os.listdir(ROOT):
        if name.startswith((".git", "bazel-")) or name == "docs":
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(tmp, name))
    os.symlink(bazel_bin(), os.path.join(tmp, "bazel-bin"))
    for name in ("docs", "tmp", ".bin"):
        os.mkdir(os.path.join(tmp, name))
    for name in ("train.py", "my_program"):
        shutil.copy(os.path.join(HERE, "stand_ins", name), os.path.join(tmp, name))
    os.chmod(os.path.join(tmp, "my_program"), 0o755)
    os.symlink(os.path.join(ROOT, "tools", "launcher", "horarun"),
               os.path.join(tmp, ".bin", "horarun"))
    os.symlink(os.path.join(ROOT, "tools", "timeline", "hora-timeline"),
               os.path.join(tmp, ".bin", "hora-timeline"))


def block_env(block, tmp):
    # A user's shell, not a Bazel test's: a script the block runs (tests/python/run_pytest.sh)
    # would write this test's JUnit file or go to its runfiles.
    env = {k: v for k, v in os.environ.items()
           if k not in ("XML_OUTPUT_FILE", "TEST_SRCDIR", "TEST_WORKSPACE", "RUNFILES_DIR",
                        "RUNFILES_MANIFEST_FILE", "JAVA_RUNFILES", "PYTHON_RUNFILES")}
    env.update({
        "PATH": os.path.join(tmp, ".bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        "HORA_LIBRARY": library(),
        "PYTHONPATH": os.path.join(ROOT, "bindings", "python"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
    })
    for (pair,) in block.clause("env"):
        name, _, value = pair.partition("=")
        env[name] = value
    return env


def prepared(block, tmp):
    """The block's text with the marker's replace / drop applied, /tmp/ moved into the work
    folder, and `bazel build` lines replaced by a check that their outputs are here."""
    text = block.text
    for old, new in block.clause("replace"):
        assert old in text, "%s: replace %r: not in the block" % (block.id, old)
        text = text.replace(old, new)
    lines = []
    for line in text.replace("\\\n", "\x00").splitlines():
        if any(d in line for (d,) in block.clause("drop")):
            continue
        if re.match(r"^\s*bazel\b.*\bbuild\b", line):
            for pkg, name in LABEL_RE.findall(line):
                out = os.path.join(bazel_bin(), pkg, name)
                assert os.path.exists(out), (
                    "%s: `%s` builds //%s:%s, which the docs test does not have: add it to "
                    "tests/docs:doc_blocks_test's data" % (block.id, line.strip(), pkg, name))
            line = ":  # built: " + line
        lines.append(line.replace("\x00", "\\\n"))
    text = "\n".join(lines) + "\n"
    return re.sub(r"(?<![\w./$-])/tmp/", os.path.join(tmp, "tmp") + "/", text)


def python_program(block):
    around = block.clause("around")
    if not around:
        return block.text
    wrapper = read(os.path.join("tests", "docs", "stand_ins", around[0][0] + ".py"))
    assert "# (the block)\n" in wrapper, around
    return wrapper.replace("# (the block)\n", block.text)


def run(argv, cwd, env):
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("did not end within %d s; its output:\n%s"
                             % (TIMEOUT, out.decode(errors="replace")[-4000:]))
    return proc.returncode, out.decode(errors="replace")


NUMBER = r"[-+]?\d+(?:\.\d+)?"


def line_pattern(line):
    """A shown output line as a regular expression: numbers match any number, runs of spaces
    any run of spaces, `...` anything."""
    out = []
    for piece in re.split(r"(\.\.\.|%s|\s+)" % NUMBER, line.strip()):
        if piece == "...":
            out.append(".*")
        elif re.fullmatch(NUMBER, piece or "x"):
            out.append(NUMBER)
        elif piece and piece.isspace():
            out.append(r"\s+")
        else:
            out.append(re.escape(piece))
    return re.compile("".join(out))


def check_shown_output(shown, got, where):
    """In order, but per rank where the lines carry horarun's "[r]<stream>: " (the ranks'
    lines interleave as they come)."""
    got_lines = got.splitlines()
    at = {}
    for line in shown.text.splitlines():
        if not line.strip():
            continue
        rank = re.match(r"^\[(\d+)\]<", line)
        rank = rank.group(1) if rank else None
        pat = line_pattern(line)
        i = at.get(rank, 0)
        while i < len(got_lines) and not pat.search(got_lines[i]):
            i += 1
        assert i < len(got_lines), (
            "%s shows %r, which %s does not have (in order):\n%s"
            % (shown.id, line, where, got[-4000:]))
        at[rank] = i + 1
    for (text,) in shown.clause("exact"):
        assert text in got, "%s: %r is not in %s" % (shown.id, text, where)


def run_block(block):
    tmp = tempfile.mkdtemp(prefix="doc-block-")
    try:
        work_folder(tmp)
        env = block_env(block, tmp)
        if block.lang in SHELL_LANGS:
            rc, out = run(["bash", "-e", "-o", "pipefail", "-c", prepared(block, tmp)], tmp, env)
        else:
            with open(os.path.join(tmp, "block.py"), "w") as f:
                f.write(python_program(block))
            python = block.clause("python")
            python = python[0][0] if python else "/usr/bin/python3"
            rc, out = run([os.path.join(ROOT, "tools", "launcher", "horarun"), "-np", "2",
                           python, "block.py"], tmp, env)
        print(out[-3000:])
        assert rc == 0, "%s exited with %d:\n%s" % (block.id, rc, out[-6000:])
        for (text,) in block.clause("expect"):
            assert text in out, "%s: %r is not in its output:\n%s" % (block.id, text,
                                                                      out[-4000:])
        for shown in BLOCKS:
            if OWNERS.get(shown.id) is block:
                files = shown.clause("file")
                if files:
                    where = "the file %s it wrote" % files[0][0]
                    path = os.path.join(tmp, files[0][0])
                    assert os.path.exists(path), "%s: %s was not written" % (shown.id, path)
                    check_shown_output(shown, read(path, "/"), where)
                else:
                    check_shown_output(shown, out, "its output")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block(block):
    assert not block.error, block.error
    if block.kind == OUTPUT:
        assert OWNERS.get(block.id) is not None, (
            "%s: an output block with no run block before it in its file" % block.id)
        return
    errors = static_errors(block)
    assert not errors, "%s: %s" % (block.id, "; ".join(errors))
    if block.kind == RUN:
        run_block(block)


def test_inline_horarun_options():
    """`horarun ...` in the prose: the options are horarun's."""
    errors = []
    for path in doc_blocks.doc_paths(ROOT):
        for span in re.findall(r"`([^`\n]*\bhorarun [^`\n]*)`", read(path)):
            errors += ["%s: %s" % (path, e) for e in horarun_option_errors([span], PARSER)]
    assert not errors, "\n".join(errors)


def command_names(block):
    """The first word of each command of a shell block (after NAME=VALUE assignments)."""
    names = set()
    for line in logical_lines(block.text):
        line = re.sub(r"\$\([^)]*\)", "", line)  # a command's output used as a value
        for part in re.split(r"&&|\|\||;|\|", line):
            words = [w for w in part.split() if not re.match(r"^\w+=", w)]
            if words and not words[0].startswith(("$", "-", "[")):
                names.add(words[0])
    return names


def installed_commands():
    """(tools/install.sh's $PREFIX/bin links, the wheel's console scripts)."""
    install = set(re.findall(r'\$PREFIX/bin/([\w-]+)"', read("tools/install.sh", SRC)))
    scripts = read("tools/wheel/make_wheel.py", SRC).replace("\\n", "\n")
    wheel = set(re.findall(r"([\w-]+) = [\w.]+:main", scripts))
    return install, wheel


def test_commands_the_docs_run_are_installed():
    """Every command a block runs by name (not a path) is one tools/install.sh puts on the
    PATH and the wheel installs as a console script, or one the system has."""
    install, wheel = installed_commands()
    assert {"horarun", "hora-timeline"} <= install & wheel, (install, wheel)
    missing = []
    for b in BLOCKS:
        if b.kind not in (RUN, SKIP) or b.lang == "python":
            continue
        for name in command_names(b) - SYSTEM_COMMANDS:
            venv = re.match(r"^ENV/bin/(.+)$", name)  # README's venv with the wheel
            if venv and venv.group(1) not in wheel | {"python", "python3", "pip"}:
                missing.append("%s runs %s: the wheel has no such console script"
                               % (b.id, name))
            if "/" not in name and name not in install & wheel:
                missing.append("%s runs %s: tools/install.sh %s it, the wheel %s it" % (
                    b.id, name, "installs" if name in install else "does not install",
                    "has" if name in wheel else "does not have"))
    assert not missing, "\n".join(missing)


def test_wheel_names_carry_the_version():
    """dist/hora-VERSION-...whl in the docs: the version //tools/wheel builds."""
    version = re.search(r'HORA_VERSION = "([\d.]+)"', read("tools/wheel/BUILD.bazel", SRC))
    assert version, "no HORA_VERSION in tools/wheel/BUILD.bazel"
    wrong = []
    for path in doc_blocks.doc_paths(ROOT):
        for v in re.findall(r"\bhora-(\d+\.\d+\.\d+)-py3", read(path)):
            if v != version.group(1):
                wrong.append("%s: hora-%s (the wheel is %s)" % (path, v, version.group(1)))
    assert not wrong, "\n".join(wrong)
