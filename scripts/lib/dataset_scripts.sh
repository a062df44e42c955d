# Helpers of the <benchmark>/download_dataset.sh and verify_dataset.sh scripts, kept here once
# instead of copied into each. Sourced, never run, through the script's own location so that the
# script works from any directory:
#   source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"
# It only defines functions: the sourcing script keeps its own shell options and variables.
# shellcheck shell=bash

# repo_python ROOT: the interpreter that runs the repository's modules. $PYTHON wins when set
# and non-empty; otherwise the checkout's venv, which has the pinned stack; otherwise python3
# from PATH (a container image, where the stack is installed system-wide).
repo_python() {
  if [[ -n "${PYTHON:-}" ]]; then
    printf '%s\n' "$PYTHON"
  elif [[ -x "$1/.venv/bin/python" ]]; then
    printf '%s\n' "$1/.venv/bin/python"
  else
    printf '%s\n' python3
  fi
}

# need_value "$@", called from the option parser on an option that takes a value: a missing
# value is a usage error (exit 2) naming the option, rather than set -u's unbound-variable error.
need_value() { [[ $# -ge 2 ]] || { echo "error: $1 needs a value" >&2; exit 2; }; }

# run CMD [ARG...]: with dry_run=1 in the sourcing script, prints the command shell-quoted (so
# it can be pasted back) instead of running it.
run() {
  if [[ $dry_run -eq 1 ]]; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}
