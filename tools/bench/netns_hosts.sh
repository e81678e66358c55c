# Sourced by the cross-host benchmarks (run from the repository root):
#   netns_hosts NAME PREFIX NET COUNT
# brings up COUNT network-namespace hosts of ../shared/tools/netns-kit under PREFIX on the
# /24 network NET, tears them down when the script exits, and sources their env.sh
# (NK_HOSTS, NK_ADDRS, NK_SSH_CONFIG); KIT is then the kit's folder (nk-exec). NAME prefixes
# the error when the kit is missing.
netns_hosts() {
  KIT="$(cd ../shared/tools/netns-kit 2>/dev/null && pwd)" || {
    echo "$1: ../shared/tools/netns-kit is missing" >&2; exit 1; }
  export NK_PREFIX="$2" NK_NET="$3"
  "$KIT/setup.sh" "$4" >/dev/null
  # shellcheck disable=SC2064  # the values now, not at exit
  trap "NK_PREFIX='$2' NK_NET='$3' '$KIT/teardown.sh' >/dev/null 2>&1 || true" EXIT
  # shellcheck disable=SC1090
  . "/tmp/netns-kit/state/$2/env.sh"
}
