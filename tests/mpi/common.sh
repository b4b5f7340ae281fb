# Shared by the multi-rank calibration tests: mpirun as root is allowed (CI containers), ranks may outnumber
# cores (--oversubscribe), and `fail` ends the test with a message.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared-memory transport only: CI machines have one node (and no network to probe).
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# No process of this test may outlive it (the unique folder name is on every rank's command line).
no_rank_left() {
  sleep 0.5
  if pgrep -f "$work" >/dev/null; then pgrep -af "$work" >&2; fail "$1: a rank is still running"; fi
}
