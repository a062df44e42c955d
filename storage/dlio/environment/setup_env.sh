#!/usr/bin/env bash
# Creates .venv-dlio/ (or $DLIO_VENV): the environment that replays an exported load profile
# with DLIO 2.0.0, the only dlio-benchmark release on PyPI. It is kept apart from .venv/
# because DLIO 2.0.0 imports TensorFlow at start-up and wants its own torch/numpy, which must
# not disturb the trainers' pinned stack.
#
# dlio-benchmark is installed --no-deps: its metadata also asks for nvidia-dali-cuda110,
# torchaudio, torchvision and the full `tensorflow`, none of which a pytorch-loader run on CPU
# imports. What it does import is installed explicitly, every version pinned (PINS below,
# passed as a constraints file to each step so a step cannot drift a package another pinned).
# MPI comes from PyPI's `mpich` wheel: no root needed, and its mpiexec (Hydra) runs as root
# without an --allow-run-as-root flag, which CI needs.
#
# Idempotent: a finished env carries a marker; a failed step leaves none, so a half-built env
# is never taken as ready (the next run rebuilds it from scratch).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="${DLIO_VENV:-$root/.venv-dlio}"
python="${PYTHON:-python3}"
marker="$venv/.dlio-installed"

if [[ -f "$marker" && "$marker" -nt "$root/storage/dlio/environment/setup_env.sh" ]]; then
  exit 0
fi

fail() { echo "[setup_dlio_env] error: $*" >&2; exit 1; }

# one builder at a time: a second one (another test, another shell) waits for the first and then
# finds the env ready, instead of deleting what the first is installing
exec 9>"$venv.lock"
flock 9
if [[ -f "$marker" && "$marker" -nt "$root/storage/dlio/environment/setup_env.sh" ]]; then
  exit 0
fi

if [[ -e "$venv" ]]; then
  # only ever replace a venv (a half-built one from an earlier failure), never another folder
  [[ -f "$venv/pyvenv.cfg" || -z "$(ls -A "$venv")" ]] || fail "$venv exists and is not a venv; refusing to replace it"
  rm -rf "$venv"
fi
echo "[setup_dlio_env] creating $venv (first run takes a few minutes)"
"$python" -m venv "$venv" || fail "could not create a venv with $python"

pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
cat >"$pins" <<'EOF'
torch==2.13.0+cpu
tensorflow-cpu==2.21.0
numpy==2.2.6
mpich==5.0.2
mpi4py==4.1.2
pydftracer==1.0.2
hydra-core==1.3.2
omegaconf==2.3.1
pandas==2.3.3
psutil==7.2.2
h5py==3.14.0
pillow==11.3.0
pyyaml==6.0.3
dlio-benchmark==2.0.0
# what the packages above pull in, as resolved on 2026-11 (python 3.11, x86_64)
absl-py==2.5.1
antlr4-python3-runtime==4.9.3
astunparse==1.6.3
certifi==2026.10.18
charset-normalizer==3.5.2
filelock==4.2.11
flatbuffers==25.12.19
fsspec==2026.9.0
gast==0.7.0
google-pasta==0.2.0
grpcio==1.85.1
idna==3.20
jinja2==3.1.6
keras==3.15.1
libclang==18.1.1
markdown-it-py==4.3.0
markupsafe==3.0.4
mdurl==0.1.2
ml-dtypes==0.6.0
mpmath==1.3.0
namex==0.1.0
networkx==3.6.1
opt-einsum==3.4.0
optree==0.20.0
packaging==26.3
protobuf==7.36.2
pybind11==3.1.0
pygments==2.21.0
python-dateutil==4.0.0
pytz==2026.6
requests==2.34.2
rich==15.0.0
setuptools==84.2.1
six==1.17.0
sympy==1.14.0
termcolor==3.3.0
typing-extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
wheel==0.48.0
wrapt==2.5.2
EOF

# step [--no-deps] PACKAGE...: one pip call; on failure pip's last lines, then one line naming the
# packages (the caller, storage/dlio/environment/dlio_env.py, quotes that last line)
step() {
  local out names
  names="$(printf '%s ' "$@" | sed 's/--no-deps //; s/ $//')"
  if ! out="$("$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$pins" "$@" 2>&1)"; then
    printf '%s\n' "$out" | grep -v '^WARNING: Location .* is ignored' | tail -n 15 | sed 's/^/  pip: /' >&2
    fail "installing $names failed (pip's last lines above)"
  fi
  # the machine's pip config lists local indexes that do not all exist; drop that noise
  printf '%s\n' "$out" | { grep -v '^WARNING: Location .* is ignored' || true; }
}

# torch first: its pin is the CPU wheel in /opt/wheels (PyPI's torch is the CUDA build, with
# gigabytes of nvidia-* dependencies); the other steps then find it installed. Where that wheel
# is not on offer, the trainers' own pin (pyproject.toml), which the main venv installed already.
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$pins" torch >/dev/null 2>&1; then
  echo "[setup_dlio_env] torch 2.13.0+cpu is not available here: using the trainers' torch 2.14.1"
  sed -i 's/^torch==.*/torch==2.14.1/' "$pins"
  step torch
fi
step tensorflow-cpu
step mpich
step mpi4py
step pydftracer
step hydra-core omegaconf
step pandas psutil h5py pillow pyyaml
step --no-deps dlio-benchmark

# One patch to 2.0.0: FormatReader.read_index builds a debug message of the whole sample index map
# (an f-string, so even with debug logging off) for every sample it reads: ~0.5 us per sample in
# the dataset, per sample read (19.5 ms per sample at 38,400 samples). The message is never shown;
# the patch removes it and nothing else.
"$venv/bin/python" - <<'PATCH' || fail "patching dlio_benchmark/reader/reader_handler.py failed (another dlio-benchmark?)"
import os, sys
import dlio_benchmark
path = os.path.join(os.path.dirname(dlio_benchmark.__file__), "reader", "reader_handler.py")
text = open(path, newline="").read()  # the wheel's files end lines with CRLF: keep them
old = 'logging.debug(f"{self.global_index_map}")'
if text.count(old) != 1:
    sys.exit(f"{path}: expected the read_index line once, found it {text.count(old)} times")
open(path, "w", newline="").write(text.replace(old, "pass  # patched by storage/dlio/environment/setup_env.sh: formatted the whole index map per sample"))
PATCH

# the import chain a pytorch run goes through, MPI library included, so a broken env fails here
check='import dlio_benchmark.main, torch, tensorflow; from mpi4py import MPI; MPI.Get_library_version()'
"$venv/bin/python" -c "$check" >/dev/null 2>&1 \
  || fail "dlio-benchmark does not import in $venv (see: $venv/bin/python -c '$check')"

touch "$marker"
echo "[setup_dlio_env] ready: $venv"
