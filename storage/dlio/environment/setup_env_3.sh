#!/usr/bin/env bash
# Creates .venv-dlio3/ (or $DLIO3_VENV): an environment with DLIO 3.0.x, the fork in
# mlcommons/DLIO_local_changes, next to (never instead of) the DLIO 2.0.0 env that
# storage/dlio/environment/setup_env.sh builds. DLIO 3.0.x is not on PyPI and this script never fetches it:
# DLIO3_SOURCE must name a local copy, either a checkout (a folder holding setup.py and
# dlio_benchmark/) or a .tar, .tar.gz/.tgz or .zip archive of one (`git archive` of the repository,
# or GitHub's "Download ZIP", whose files sit in one top folder):
#
#   DLIO3_SOURCE=/path/to/DLIO_local_changes bash storage/dlio/environment/setup_env_3.sh
#
# dlio_benchmark is installed from that source --no-deps: its metadata also asks for
# nvidia-dali-cuda120, torchaudio, torchvision, the full `tensorflow` and s3torchconnector, none
# of which a pytorch-loader run on CPU imports. What it does import is installed explicitly,
# every version pinned (PINS below, passed as a constraints file to each step so a step cannot
# drift a package another pinned): the 2.0.0 env's pins, plus dgen-py (3.0.x's data generators),
# pyarrow (its parquet reader and generator), zstandard (dgen-py's one dependency), pydftracer
# 2.x (3.0.x asks for >=2.0.2; 2.0.6 is PyPI's newest release) and s3dlio (its object mode's
# client, in the MLPerf Storage v3.0 range 0.9.106-0.9.112). MPI comes from PyPI's `mpich` wheel,
# as in the 2.0.0 env.
#
# Two patches (see below): the 2.0.0 env's per-sample debug f-string that formats the whole sample
# index map is removed, and a 3.0.x NameError that kills rank 0's workers with a reader plugin is fixed.
#
# Python: 3.0.x declares requires-python ">=3.12,<3.13", but its code runs on 3.11, the
# interpreter the rest of the repository uses and the one /opt/wheels holds the CPU torch wheel
# for. With another interpreter than 3.12 the install passes --ignore-requires-python (and says
# so); PYTHON=python3.12 builds a 3.12 env instead (torch then comes from PyPI, see below).
#
# Idempotent: a finished env carries a marker that records the source it was built from (a hash
# of the files installed from it); the script returns at once while the marker is newer than this
# script and DLIO3_SOURCE is unset or names the same source. A failed step leaves no marker, so a
# half-built env is never taken as ready (the next run rebuilds it from scratch).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
script="$root/storage/dlio/environment/setup_env_3.sh"
venv="${DLIO3_VENV:-$root/.venv-dlio3}"
python="${PYTHON:-python3}"
marker="$venv/.dlio-installed"
source_path="${DLIO3_SOURCE:-}"

fail() { echo "[setup_dlio3_env] error: $*" >&2; exit 1; }

command -v "$python" >/dev/null || fail "no python at PYTHON=$python"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- the source: a checkout or an archive of one, staged into $work/src --------------------------
is_checkout() { [[ -f "$1/setup.py" && -f "$1/dlio_benchmark/main.py" ]]; }
need="a DLIO 3.0.x checkout (a folder with setup.py and dlio_benchmark/) or a .tar/.tar.gz/.zip of one"

fingerprint=""
if [[ -n "$source_path" ]]; then
  tree=""
  if [[ -d "$source_path" ]]; then
    is_checkout "$source_path" || fail "DLIO3_SOURCE=$source_path is a folder without setup.py and dlio_benchmark/main.py: point it at $need"
    tree="$source_path"
  elif [[ -f "$source_path" ]]; then
    case "$source_path" in
      *.tar|*.tar.gz|*.tgz|*.zip) ;;
      *) fail "DLIO3_SOURCE=$source_path is not a folder nor a .tar/.tar.gz/.tgz/.zip file: point it at $need" ;;
    esac
    # extracted with python's tarfile/zipfile: tarfile's "data" filter (no links, devices or paths out of
    # the folder); a python from before extraction filters gets the same rules checked here first, never
    # an unfiltered extract (a link in the archive would let a later member write anywhere, as root)
    "$python" - "$source_path" "$work/x" <<'EXTRACT' 2>"$work/extract.err" || fail "DLIO3_SOURCE=$source_path could not be extracted: $(tail -n 1 "$work/extract.err")"
import posixpath, sys, tarfile, zipfile
src, dest = sys.argv[1], sys.argv[2]
try:
    if src.endswith(".zip"):
        with zipfile.ZipFile(src) as z:
            z.extractall(dest)  # zipfile drops absolute paths and '..' and makes no links
    else:
        with tarfile.open(src) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(dest, filter="data")
            else:
                for m in t.getmembers():
                    parts = posixpath.normpath(m.name).split("/")
                    if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in parts:
                        sys.exit(f"{m.name!r} is a link, a device or a path out of the folder (refused)")
                t.extractall(dest)
except (OSError, tarfile.TarError, zipfile.BadZipFile) as error:
    sys.exit(f"not a readable .tar/.tar.gz/.zip? ({error})")
EXTRACT
    if is_checkout "$work/x"; then
      tree="$work/x"
    else
      # GitHub's archives put everything in one top folder (DLIO_local_changes-main/)
      shopt -s nullglob dotglob; top=("$work"/x/*); shopt -u nullglob dotglob
      [[ ${#top[@]} -eq 1 ]] && is_checkout "${top[0]}" && tree="${top[0]}"
      [[ -n "$tree" ]] || fail "DLIO3_SOURCE=$source_path holds no DLIO checkout (setup.py and dlio_benchmark/ at its top or in its one top folder): point it at $need"
    fi
  else
    fail "DLIO3_SOURCE=$source_path does not exist: point it at $need"
  fi

  # stage what the package build reads, no more: the build then writes nothing into the user's
  # checkout (build/, *.egg-info), and setup.py's find_namespace_packages(".") finds dlio_benchmark
  # only (not tests/ or docs/, which it would otherwise install as top-level packages)
  mkdir -p "$work/src"
  for f in setup.py pyproject.toml setup.cfg MANIFEST.in README.md LICENSE dlio_benchmark; do
    [[ -e "$tree/$f" ]] && cp -R "$tree/$f" "$work/src/"
  done
  find "$work/src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +

  # the version the source declares (pyproject.toml's [project] version, else setup.py's): 3.0.x only
  declared="$("$python" - "$work/src" <<'VERSION' 2>/dev/null || true
import pathlib, re, sys
src = pathlib.Path(sys.argv[1])
try:
    import tomllib
    print(tomllib.loads((src / "pyproject.toml").read_text())["project"]["version"])
except Exception:
    m = re.search(r"""version\s*=\s*["']([^"']+)""", (src / "setup.py").read_text())
    print(m.group(1) if m else "")
VERSION
)"
  [[ "$declared" == 3.0.* ]] || fail "DLIO3_SOURCE=$source_path holds dlio_benchmark ${declared:-of no readable version}, not 3.0.x: point it at $need"

  fingerprint="$(cd "$work/src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)"
fi

ready() {
  [[ -f "$marker" && "$marker" -nt "$script" ]] || return 1
  [[ -z "$fingerprint" ]] || grep -qx "source-sha256=$fingerprint" "$marker"
}

if ready; then
  exit 0
fi

# one builder at a time: a second one (another test, another shell) waits for the first and then
# finds the env ready, instead of deleting what the first is installing
exec 9>"$venv.lock"
flock 9
if ready; then
  exit 0
fi
[[ -n "$source_path" ]] || fail "DLIO3_SOURCE is not set: point it at $need (nothing is downloaded from GitHub)"

if [[ -e "$venv" ]]; then
  # only ever replace a venv (a half-built one, or one from another source), never another folder
  [[ -f "$venv/pyvenv.cfg" || -z "$(ls -A "$venv")" ]] || fail "$venv exists and is not a venv; refusing to replace it"
  rm -rf "$venv"
fi
echo "[setup_dlio3_env] creating $venv from $source_path (dlio_benchmark $declared; first run takes a few minutes)"
"$python" -m venv "$venv" || fail "could not create a venv with $python"

pins="$work/pins.txt"
cat >"$pins" <<'EOF'
torch==2.13.0+cpu
tensorflow-cpu==2.21.0
numpy==2.2.6
mpich==5.0.2
mpi4py==4.1.2
pydftracer==2.0.6
hydra-core==1.3.2
omegaconf==2.3.1
pandas==2.3.3
psutil==7.2.2
h5py==3.14.0
pillow==11.3.0
pyyaml==6.0.3
dgen-py==0.3.0
pyarrow==25.0.1
zstandard==0.25.0
s3dlio==0.9.112
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

# step [--option...] PACKAGE...: one pip call; on failure pip's last lines, then one line naming
# the packages (a caller can quote that last line, as storage/dlio/environment/dlio_env.py does for 2.0.0)
step() {
  local out names
  names="$(printf '%s\n' "$@" | grep -v '^-' | tr '\n' ' ' | sed 's/ $//')"
  if ! out="$("$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$pins" "$@" 2>&1)"; then
    printf '%s\n' "$out" | grep -v '^WARNING: Location .* is ignored' | tail -n 15 | sed 's/^/  pip: /' >&2
    fail "installing $names failed (pip's last lines above)"
  fi
  # the machine's pip config lists local indexes that do not all exist; drop that noise
  [[ -z "$out" ]] || printf '%s\n' "$out" | { grep -v '^WARNING: Location .* is ignored' || true; }
}

# torch first: its pin is the CPU wheel in /opt/wheels (PyPI's torch is the CUDA build, with
# gigabytes of nvidia-* dependencies); the other steps then find it installed. Where that wheel
# is not on offer (another machine, or PYTHON=python3.12: the wheel is cp311), the trainers' own
# pin (pyproject.toml), as storage/dlio/environment/setup_env.sh does.
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$pins" torch >/dev/null 2>&1; then
  echo "[setup_dlio3_env] torch 2.13.0+cpu is not available here: using the trainers' torch 2.14.1"
  sed -i 's/^torch==.*/torch==2.14.1/' "$pins"
  step torch
fi
step tensorflow-cpu
step mpich
step mpi4py
step pydftracer
step hydra-core omegaconf
step pandas psutil h5py pillow pyyaml
step dgen-py zstandard pyarrow
# the object-storage client DLIO 3.0.x's object mode runs with (storage_library: s3dlio, the one
# mlpstorage picks by default): its S3 reads, listing and uploads (storage.dlio.replay.object_replay)
step --no-deps s3dlio
step setuptools wheel

# dlio_benchmark itself, built from the staged source with the env's own (pinned) setuptools
pyver="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
relax=()
if [[ "$pyver" != 3.12 ]]; then
  echo "[setup_dlio3_env] note: dlio_benchmark $declared declares python 3.12 only; installing it on python $pyver (--ignore-requires-python)"
  relax=(--ignore-requires-python)
fi
step --no-deps --no-build-isolation "${relax[@]}" "$work/src"

# Two patches, each where the source still has its line, nothing else changed:
# - the 2.0.0 env's: FormatReader.read_index builds a debug message of the whole sample index map (an
#   f-string, so even with debug logging off) for every sample it reads, a cost that grows with the
#   dataset; the message is never shown, so the two envs do not differ by it;
# - a 3.0.x bug: ReaderFactory.get_reader, a staticmethod, logs a custom reader class
#   (reader.reader_classname) through `self.logger` on rank 0, so every loader worker of rank 0 dies
#   with "NameError: name 'self' is not defined" (seen with the reader plugin's replay); the line is
#   sent to the logging module instead.
"$venv/bin/python" - <<'PATCH' || fail "patching dlio_benchmark failed (its lines above)"
import os, sys
import dlio_benchmark
root = os.path.dirname(dlio_benchmark.__file__)
patches = [
    ("reader/reader_handler.py", 'self.logger.debug(f"{self.global_index_map}")',
     "pass  # patched by storage/dlio/environment/setup_env_3.sh: formatted the whole index map per sample"),
    ("reader/reader_factory.py", 'self.logger.info(f"{utcnow()} Running DLIO with custom data loader class',
     'logging.info(f"{utcnow()} Running DLIO with custom data loader class'),
]
for relative, old, new in patches:
    path = os.path.join(root, relative)
    text = open(path, newline="").read()  # keep the files' own line endings
    if text.count(old) > 1:
        sys.exit(f"{path}: expected the patched line once, found it {text.count(old)} times")
    if not text.count(old):
        print(f"[setup_dlio3_env] note: {path} no longer has the patched line: nothing to patch")
        continue
    open(path, "w", newline="").write(text.replace(old, new))
PATCH

version="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("dlio_benchmark"))' 2>/dev/null)" \
  || fail "dlio_benchmark from DLIO3_SOURCE=$source_path installed no readable version in $venv"
[[ "$version" == 3.0.* ]] || fail "DLIO3_SOURCE=$source_path installed dlio_benchmark $version, not 3.0.x"

# the import chain a run goes through, MPI library included, so a broken env fails here: main
# (torch, pyarrow, dgen_py, dftracer at import), the factories that load the pytorch loader, the
# generators and the readers, and tensorflow (3.0.x's main does not import it; its tensorflow
# framework, tfrecord format and tf loader do, as 2.0.0's main did)
check='import dlio_benchmark.main, torch, tensorflow, dgen_py, pyarrow.parquet; import dlio_benchmark.data_generator.generator_factory, dlio_benchmark.reader.reader_factory, dlio_benchmark.data_loader.data_loader_factory; from mpi4py import MPI; MPI.Get_library_version()'
"$venv/bin/python" -c "$check" >/dev/null 2>&1 \
  || fail "dlio_benchmark does not import in $venv (see: $venv/bin/python -c '$check')"

printf 'version=%s\nsource=%s\nsource-sha256=%s\n' "$version" "$source_path" "$fingerprint" >"$marker"
echo "[setup_dlio3_env] ready: $venv (dlio_benchmark $version)"
