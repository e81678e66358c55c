# Sourced by tools/test.sh, tools/quickstart.sh, tools/install.sh and .ci/test_summary.sh.
# Defines `bzl` (Bazel with the right output root) and `bzl_shutdown_on_exit`.
#
#   HORA_BAZEL_ROOT=DIR     use DIR as Bazel's --output_user_root: a separate server and
#                           cache, and no bazel-* symlinks in the tree (so a run does not
#                           disturb a developer's Bazel server or their bazel-bin link).
#   HORA_KEEP_BAZEL=1       leave the Bazel server running at exit (default: shut it down).
#
# Without HORA_BAZEL_ROOT, Bazel's default root is used when $HOME is usable (so a
# developer's cache is reused); otherwise (CI with HOME=/nonexistent) $TMPDIR/bazel-ci-root.

BAZEL_STARTUP=()
BAZEL_COMMON=()
if [ -n "${HORA_BAZEL_ROOT:-}" ]; then
  mkdir -p "$HORA_BAZEL_ROOT"
  BAZEL_STARTUP=(--output_user_root="$HORA_BAZEL_ROOT")
  BAZEL_COMMON=(--symlink_prefix=/)
elif ! { [ -n "${HOME:-}" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; }; then
  mkdir -p "${TMPDIR:-/tmp}/bazel-ci-root"
  BAZEL_STARTUP=(--output_user_root="${TMPDIR:-/tmp}/bazel-ci-root")
fi

# bzl COMMAND [args...]: bazel with the startup options above. For build/test/run/info the
# common options (no symlinks under HORA_BAZEL_ROOT) go right after the command.
bzl() {
  local cmd="$1"; shift
  case "$cmd" in
    build|test|run|info|cquery) bazel "${BAZEL_STARTUP[@]}" "$cmd" "${BAZEL_COMMON[@]}" "$@" ;;
    *) bazel "${BAZEL_STARTUP[@]}" "$cmd" "$@" ;;
  esac
}

bzl_shutdown_on_exit() {
  if [ "${HORA_KEEP_BAZEL:-0}" != "1" ]; then
    trap 'bzl shutdown >/dev/null 2>&1 || true' EXIT
  fi
}
