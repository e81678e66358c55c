#!/usr/bin/env bash
# Runs Horovod's own PyTorch test suite (test/parallel/test_torch.py, with its static
# process-set and timeline tests) on hora.torch with only the imports changed, through horarun. Fetches nothing: the test file comes from a local
# mirror of Horovod's repository ($HOROVOD_MIRROR, a git directory; default
# /work/.mirror/horovod+horovod/repo), and is not part of this repository. The three helpers
# it imports from Horovod's test/utils/common.py are written below (not copied).
#
# Usage: tools/horovod_suite.sh [-np N] [--python PY] [--dir DIR] [pytest args...]
#   -np N        ranks (default 2)
#   --python PY  the ranks' interpreter (default /usr/bin/python3: Debian's torch 1.13;
#                /opt/hora/torch2/bin/python for torch 2.x)
#   --dir DIR    scratch directory (default /tmp/hvdsuite), rebuilt on every run
# HORA_STALL_TIMEOUT_SECONDS defaults to 20 here (see below).
# Needs libhora.so ($HORA_LIBRARY or the usual search, bindings/python/README.md). Prints
# every rank's pytest output (rank-prefixed by horarun) and ends with rank 0's pytest summary.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
np=2 python=/usr/bin/python3 dir=/tmp/hvdsuite
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) break ;;
  esac
done
mirror="${HOROVOD_MIRROR:-/work/.mirror/horovod+horovod/repo}"
if ! git -C "$mirror" cat-file -e HEAD:test/parallel/test_torch.py 2>/dev/null; then
  echo "horovod_suite: no Horovod mirror with test/parallel/test_torch.py at $mirror" \
       "(set HOROVOD_MIRROR to a clone's git directory)" >&2
  exit 2
fi

rm -rf "$dir" && mkdir -p "$dir"
git -C "$mirror" show HEAD:test/parallel/test_torch.py |
  sed 's/^import horovod\.torch as hvd$/import hora.torch as hvd/' > "$dir/test_torch.py"
grep -q '^import hora.torch as hvd$' "$dir/test_torch.py" || {
  echo "horovod_suite: test_torch.py no longer has 'import horovod.torch as hvd'" >&2; exit 2; }
# Its static process-set test is written for horovod.tensorflow but uses only the API that
# horovod.torch shares (ProcessSet, init(process_sets=...), global_process_set); it must run
# in a process of its own (it calls init and shutdown).
git -C "$mirror" show HEAD:test/parallel/test_process_sets_static.py |
  sed 's/^import horovod\.tensorflow as hvd$/import hora.torch as hvd/' \
  > "$dir/test_process_sets_static.py"
# Its timeline test (horovod.torch too) must also run alone: HOROVOD_TIMELINE is read at init.
git -C "$mirror" show HEAD:test/parallel/test_timeline.py |
  sed -e 's/^import horovod\.torch as hvd$/import hora.torch as hvd/' \
      -e 's/^from horovod\.common\.util import env$/from hora.common.util import env/' \
  > "$dir/test_timeline.py"
echo "horovod_suite: $dir/test_torch.py from horovod@$(git -C "$mirror" rev-parse --short=12 HEAD)"

cat > "$dir/common.py" <<'EOF'
"""The helpers Horovod's test_torch.py imports from its test/utils/common.py, written for
hora (same contracts)."""
import contextlib
import os
import tempfile


def mpi_env_rank_and_size():
    """(rank, size) from the launcher's environment: MPI's variables, then horarun's
    HOROVOD_RANK/HOROVOD_SIZE (what horovodrun sets with Gloo); (0, 1) outside a job."""
    for rank, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("HOROVOD_RANK", "HOROVOD_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def skip_or_fail_gpu_test(test, message):
    """Fails when HOROVOD_TEST_GPU=1 (GPUs are required), else skips."""
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    test.skipTest(message)


@contextlib.contextmanager
def temppath():
    """A path that does not exist yet, in a fresh directory removed afterwards."""
    with tempfile.TemporaryDirectory() as d:
        yield os.path.join(d, "temp_test_file")
EOF

export PYTHONPATH="$repo/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
# A test that fails an assertion on some ranks between collectives leaves the others waiting
# (in Horovod too, where the wait has no end by default): the stall timeout ends it on every
# rank, and the next test's hvd.init() starts a new job (bindings/python/README.md).
export HORA_STALL_TIMEOUT_SECONDS="${HORA_STALL_TIMEOUT_SECONDS:-20}"
cd "$dir" || exit 2
log="$dir/run.log"
"$repo/tools/launcher/horarun" -np "$np" "$python" -m pytest -p no:cacheprovider -q \
  -o junit_family=xunit2 test_torch.py "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
"$repo/tools/launcher/horarun" -np "$np" "$python" -m pytest -p no:cacheprovider -q \
  test_process_sets_static.py 2>&1 | tee "$dir/static.log"
static_rc=${PIPESTATUS[0]}
"$repo/tools/launcher/horarun" -np "$np" "$python" -m pytest -p no:cacheprovider -q \
  test_timeline.py 2>&1 | tee "$dir/timeline.log"
timeline_rc=${PIPESTATUS[0]}
echo "horovod_suite: np=$np python=$python rc=$rc (test_process_sets_static.py: rc=$static_rc;" \
     "test_timeline.py: rc=$timeline_rc); rank 0:"
grep -E '^\[0\]<stdout>: .*(passed|failed|error).* in [0-9.]+s' "$log" "$dir/static.log" \
  "$dir/timeline.log" | tail -3
for r in "$rc" "$static_rc" "$timeline_rc"; do [ "$r" -eq 0 ] || exit "$r"; done
exit 0
