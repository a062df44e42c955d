#!/usr/bin/env bash
# Does everything the images pin exist where the Dockerfiles fetch it from? Needs the network
# (pypi.org; the rest is tried and reported), not a Docker engine; not part of the test suite.
#
#   docker/check_pins.sh [Dockerfile...]     # default: docker/Dockerfile.cuda docker/Dockerfile.rocm
#
# For each versioned thing a Dockerfile pulls (docker/pins.py dockerfile-specs):
#   pypi / index URL   pip resolves name==version to a wheel for Linux x86-64, CPython 3.11
#                      on this machine's platform tags (`pip install --dry-run --no-deps
#                      --only-binary=:all: --python-version 3.11`, pip's own config
#                      ignored so that only that index answers)
#   python-download    the pinned uv lists the pinned CPython among its downloads
#   image              `docker manifest inspect` asks the registry (no engine needed)
# Prints one line per item: OK, FAIL (the index answered: no such release) or UNCHECKED (the
# source could not be reached from here). Exit status 1 if anything FAILed, else 0.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
dockerfiles=("$@")
[[ ${#dockerfiles[@]} -gt 0 ]] || dockerfiles=(docker/Dockerfile.cuda docker/Dockerfile.rocm)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

specs="$work/specs"
for dockerfile in "${dockerfiles[@]}"; do
  "$python" docker/pins.py dockerfile-specs "$dockerfile" | sed "s|^|${dockerfile}\t|" || exit 2
done > "$specs"

failed=0
report() {  # status, item, source, note
  printf '%-9s %-34s %-48s %s\n' "$1" "$2" "$3" "$4"
  [[ "$1" == FAIL ]] && failed=1
  return 0
}

pip_resolve() {  # index-url spec
  local out
  out="$("$python" -m pip --isolated install --dry-run --no-deps --ignore-installed --quiet --report - \
          --only-binary=:all: --python-version 3.11 --target "$work/t" \
          --index-url "$1" --timeout 30 --retries 1 "$2" 2>"$work/err")"
  if [[ $? -eq 0 ]]; then
    "$python" -c 'import json,sys; r=json.load(sys.stdin)["install"][0]; print(r["download_info"]["url"].rsplit("/",1)[-1])' <<< "$out"
    return 0
  fi
  if grep -q -E "NameResolutionError|Failed to establish|ConnectTimeout|Max retries exceeded|Could not fetch URL" "$work/err"; then
    return 3
  fi
  grep -E "^ERROR" "$work/err" | head -1
  return 1
}

uv_bin=""
# one line per distinct (source, item), noting which Dockerfiles use it
sort -t$'\t' -k2,3 -u "$specs" | while IFS=$'\t' read -r dockerfile source item; do
  users="$(awk -F'\t' -v s="$source" -v i="$item" '$2==s && $3==i {print $1}' "$specs" | sed 's|docker/Dockerfile.||' | sort -u | paste -sd, -)"
  case "$source" in
    pypi|index\ *)
      url="https://pypi.org/simple"
      [[ "$source" == index\ * ]] && url="${source#index }"
      note="$(pip_resolve "$url" "$item")"; rc=$?
      if [[ $rc -eq 0 ]]; then report OK "$item" "$url" "[$users] $note"
      elif [[ $rc -eq 3 ]]; then report UNCHECKED "$item" "$url" "[$users] index not reachable from here"
      else report FAIL "$item" "$url" "[$users] $note"; fi
      ;;
    python-download)
      version="${item#cpython==}"
      uv_version="$(grep -h -m1 -E '^ARG UV_VERSION=' "${dockerfiles[@]}" | head -1 | cut -d= -f2)"
      if [[ -z "$uv_bin" ]]; then
        "$python" -m pip --isolated install --quiet --no-deps --target "$work/uv" --index-url https://pypi.org/simple "uv==$uv_version" 2>/dev/null
        uv_bin="$work/uv/bin/uv"
      fi
      if [[ -x "$uv_bin" ]] && UV_NO_CONFIG=1 "$uv_bin" python list --only-downloads --all-versions --offline "$version" 2>/dev/null | grep -q "cpython-$version-linux-x86_64-gnu"; then
        report OK "$item" "uv $uv_version downloads" "[$users] listed (python-build-standalone on GitHub; the download itself is not tried)"
      elif [[ -x "$uv_bin" ]]; then
        report FAIL "$item" "uv $uv_version downloads" "[$users] uv $uv_version does not offer cpython-$version for linux-x86_64"
      else
        report UNCHECKED "$item" "uv $uv_version downloads" "[$users] could not fetch uv $uv_version"
      fi
      ;;
    image)
      if ! command -v docker >/dev/null; then
        report UNCHECKED "$item" "registry" "[$users] no docker CLI"
      elif timeout 60 docker manifest inspect "$item" >"$work/manifest" 2>"$work/err"; then
        report OK "$item" "registry" "[$users] manifest found"
      elif grep -q -i -E "no such manifest|manifest unknown|not found" "$work/err"; then
        report FAIL "$item" "registry" "[$users] $(head -1 "$work/err")"
      else
        report UNCHECKED "$item" "registry" "[$users] $(head -1 "$work/err" | cut -c1-90)"
      fi
      ;;
  esac
done | tee "$work/report"

echo
echo "OK $(grep -c '^OK' "$work/report"), FAIL $(grep -c '^FAIL' "$work/report"), UNCHECKED $(grep -c '^UNCHECKED' "$work/report")"
grep -q '^FAIL' "$work/report" && exit 1
exit 0
