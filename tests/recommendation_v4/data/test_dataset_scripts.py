"""download_dataset.sh / verify_dataset.sh in the reference's tree: syntax, dry runs, a download from a
local stand-in for HuggingFace, and verify over the tiny dataset, a prepared-download copy of it and
corrupt copies."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from recommendation_v4.data import layout
from tests.environment import unavailable
from tests.recommendation_v4.conftest import TINY, TINY_HISTORY_LENGTH, TINY_SIZE

REPO = pathlib.Path(__file__).resolve().parents[3]
DOWNLOAD = REPO / "recommendation_v4" / "download_dataset.sh"
VERIFY = REPO / "recommendation_v4" / "verify_dataset.sh"
HF = "https://huggingface.co/datasets/yandex/yambda/resolve/main"
R2_METADATA = "https://training.mlcommons-storage.org/metadata/dlrmv4_dataset.uri"
MD5_5B = REPO / "recommendation_v4" / "md5sums_yambda_5b_processed.txt"
SHA256_5B_CACHE = REPO / "recommendation_v4" / "sha256sums_yambda_5b_cache.txt"
CACHE = layout.cache_dir_name(TINY_HISTORY_LENGTH)


def _run(*args: str, env: dict[str, str] | None = None, cwd: pathlib.Path = REPO) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=120)


def _copy(tiny_dataset_dir: pathlib.Path, target: pathlib.Path, *, size: str = TINY_SIZE,
          cache_name: str = CACHE, parts: tuple[str, ...] = ("raw", "shared_metadata", "processed")) -> pathlib.Path:
    """The tiny dataset copied under another size name (and cache directory name), with only `parts`."""
    if "raw" in parts:
        shutil.copytree(layout.raw_dir(tiny_dataset_dir, TINY_SIZE), layout.raw_dir(target, size))
    if "shared_metadata" in parts:
        shutil.copytree(layout.shared_metadata_dir(tiny_dataset_dir), layout.shared_metadata_dir(target))
    processed = pathlib.Path(layout.processed_dir(target, size))
    if "processed" in parts:
        shutil.copytree(layout.processed_dir(tiny_dataset_dir, TINY_SIZE), processed)
        (processed / CACHE).rename(processed / cache_name)
    if "prepared" in parts:  # the reference's Option A: the cache, the popularity, the mappings
        source = pathlib.Path(layout.processed_dir(tiny_dataset_dir, TINY_SIZE))
        shutil.copytree(source / CACHE, processed / cache_name)
        shutil.copy(source / layout.ITEM_POPULARITY_FILE, processed)
    return target


def _sha256_list(dataset_dir: pathlib.Path) -> str:
    files = [p for p in sorted(dataset_dir.rglob("*")) if p.is_file() and not p.name.startswith(".")]
    return "# sha256 of the tiny dataset\n" + "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(dataset_dir)}\n" for p in files)


# ------------------------------------------------------------------ both scripts
@pytest.mark.parametrize("script", [DOWNLOAD, VERIFY])
def test_scripts_parse_and_print_usage(script: pathlib.Path) -> None:
    assert _run("-n", str(script)).returncode == 0
    assert "set -euo pipefail" in script.read_text() and os.access(script, os.X_OK)
    result = _run(str(script), "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout and "--dry-run" in result.stdout
    bad = _run(str(script), "--bogus")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr
    assert _run(str(script), "--size").returncode == 2  # an option without its value


def test_the_published_checksums_are_the_reference_ones() -> None:
    md5 = [line.split() for line in MD5_5B.read_text().splitlines() if line and not line.startswith("#")]
    assert [name for _, name in md5] == [
        "train_sessions.parquet", "test_events.parquet", "session_index.parquet", "item_popularity.npy",
        "split_meta.json", "../shared_metadata/artist_item_mapping.parquet", "../shared_metadata/album_item_mapping.parquet"]
    assert all(len(digest) == 32 for digest, _ in md5)
    sha = dict(reversed(line.split()) for line in SHA256_5B_CACHE.read_text().splitlines()
               if line and not line.startswith("#"))
    assert len(sha) == 16 and all(name.startswith("hstu_cache_L4086/") and len(d) == 64 for name, d in sha.items())
    assert sha["hstu_cache_L4086/_READY"] == hashlib.sha256(b"").hexdigest()  # an empty marker
    assert {"flat_uid.npy", "positions_L4086.npy", "anchor_ts_L4086.npy", "store_meta.json"} <= {
        name.split("/")[1] for name in sha}


# ------------------------------------------------------------------ download
def test_download_dry_run_prints_the_reference_tree(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "yambda-500m"
    result = _run(str(DOWNLOAD), "--size", "500m", "--dataset-dir", str(target), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{HF}/flat/500m/multi_event.parquet" in out and f"{target}/raw/500m/multi_event.parquet.part" in out
    for name in layout.MAPPING_FILES:
        assert f"{HF}/{name}" in out and f"{target}/shared_metadata/{name}" in out
    assert "embeddings.parquet" not in out and "processed" not in out
    assert not target.exists()  # nothing ran

    with_embeddings = _run(str(DOWNLOAD), "--size", "5b", "--data-root", str(tmp_path), "--with-embeddings",
                           "--dry-run", env={"HF_ENDPOINT": "http://mirror.example"})
    mirror = "http://mirror.example/datasets/yandex/yambda/resolve/main"
    assert f"{mirror}/embeddings.parquet" in with_embeddings.stdout
    assert f"{tmp_path}/yambda-5b/shared_metadata/embeddings.parquet" in with_embeddings.stdout
    assert f"{tmp_path}/yambda-5b/raw/5b/multi_event.parquet" in with_embeddings.stdout
    default_root = _run(str(DOWNLOAD), "--dry-run", env={"MLPERF_DATA_ROOT": str(tmp_path / "root")})
    assert f"{tmp_path}/root/yambda-50m/raw/50m/multi_event.parquet" in default_root.stdout  # 50m by default
    assert _run(str(DOWNLOAD), "--size", "1b", "--dry-run").returncode == 2


def test_download_of_the_prepared_dataset_dry_run(tmp_path: pathlib.Path) -> None:
    result = _run(str(DOWNLOAD), "--size", "5b", "--prepared", "--dataset-dir", str(tmp_path / "d"), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "mlc-r2-downloader.sh" in result.stdout and f"-d {tmp_path}/d {R2_METADATA}" in result.stdout
    assert "huggingface" not in result.stdout and not (tmp_path / "d").exists()
    refused = _run(str(DOWNLOAD), "--prepared", "--dry-run")
    assert refused.returncode == 2 and "--size 5b" in refused.stderr


@pytest.fixture
def huggingface_stand_in(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[str]:
    """An HTTP server laid out as HuggingFace's yandex/yambda, serving the tiny dataset as size 50m."""
    if shutil.which("curl") is None:
        unavailable("curl is not installed (download_dataset.sh fetches with it)")
    served = tmp_path / "hf" / "datasets" / "yandex" / "yambda" / "resolve" / "main"
    (served / "flat" / "50m").mkdir(parents=True)
    shutil.copy(layout.multi_event_path(tiny_dataset_dir, TINY_SIZE), served / "flat" / "50m")
    for name in layout.MAPPING_FILES:
        shutil.copy(pathlib.Path(layout.shared_metadata_dir(tiny_dataset_dir)) / name, served)
    handler = functools.partial(QuietHandler, directory=str(tmp_path / "hf"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_download_writes_the_reference_tree_that_then_verifies(huggingface_stand_in: str, tiny_dataset_dir: pathlib.Path,
                                                                tmp_path: pathlib.Path) -> None:
    target = tmp_path / "yambda-50m"
    result = _run(str(DOWNLOAD), "--dataset-dir", str(target), env={"HF_ENDPOINT": huggingface_stand_in})
    assert result.returncode == 0, result.stderr
    events = target / "raw" / "50m" / "multi_event.parquet"
    assert events.read_bytes() == pathlib.Path(layout.multi_event_path(tiny_dataset_dir, TINY_SIZE)).read_bytes()
    assert sorted(p.name for p in (target / "shared_metadata").iterdir()) == sorted(layout.MAPPING_FILES)
    assert not list(target.rglob("*.part"))
    assert f"verify_dataset.sh --dataset-dir {target} --size 50m" in result.stdout
    again = _run(str(DOWNLOAD), "--dataset-dir", str(target), env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert again.returncode == 0 and again.stdout.count("exists, skipping") == 3  # nothing fetched again

    verified = _run(str(VERIFY), "--dataset-dir", str(target))  # the size: the one raw/ holds
    assert verified.returncode == 0, verified.stderr
    assert f"ok {events}" in verified.stdout and "note: no" in verified.stdout and "preprocesses" in verified.stdout
    assert "verified" in verified.stdout and "raw files, not preprocessed yet" in verified.stdout


def test_a_failed_download_leaves_no_file_that_looks_complete(tmp_path: pathlib.Path) -> None:
    if shutil.which("curl") is None:
        unavailable("curl is not installed (download_dataset.sh fetches with it)")
    target = tmp_path / "d"
    result = _run(str(DOWNLOAD), "--dataset-dir", str(target), env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert result.returncode != 0
    assert not (target / "raw" / "50m" / "multi_event.parquet").exists()


# ------------------------------------------------------------------ verify
def test_verify_dry_run_prints_the_checks(tmp_path: pathlib.Path) -> None:
    sums = tmp_path / "sums"
    dry = _run(str(VERIFY), "--dataset-dir", "/no/such/dir", "--size", "5b", "--reference-checksums", "all",
               "--checksums", str(sums), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    out = dry.stdout
    assert "recommendation_v4.data.schema --dataset-dir /no/such/dir --size 5b" in out
    assert "/no/such/dir 5b  # the trainer's readers over shared_metadata/ and processed_5b/" in out
    assert f"{MD5_5B} | grep -E shared_metadata/ | (cd /no/such/dir/processed_5b && md5sum --check --strict -)" in out
    assert f"{SHA256_5B_CACHE} | grep -E hstu_cache_L4086/ | (cd /no/such/dir/processed_5b && sha256sum --check" in out
    assert f"(cd /no/such/dir && sha256sum --check --strict {sums})" in out
    assert "verified" not in out and not sums.exists()


def test_verify_the_tiny_dataset_with_its_own_checksums(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    sums = tmp_path / "sums"
    sums.write_text(_sha256_list(tiny_dataset_dir))
    ok = _run(str(VERIFY), "--dataset-dir", str(tiny_dataset_dir), "--checksums", str(sums), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    processed = layout.processed_dir(tiny_dataset_dir, TINY_SIZE)
    for shown in (layout.multi_event_path(tiny_dataset_dir, TINY_SIZE), processed / layout.TRAIN_SESSIONS_FILE,
                  processed / layout.SESSION_INDEX_FILE, processed / layout.TEST_EVENTS_FILE, processed / CACHE):
        assert f"ok {shown}" in ok.stdout
    assert "anchors L60 " in ok.stdout and "L60_m5 " in ok.stdout
    assert f"verified {tiny_dataset_dir} (tiny: with a flat-event cache)" in ok.stdout


def test_a_corrupt_byte_is_caught_by_the_checksums(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    copy = _copy(tiny_dataset_dir, tmp_path / TINY)
    sums = tmp_path / "sums"
    sums.write_text(_sha256_list(copy))
    flat = pathlib.Path(layout.cache_dir(copy, TINY_SIZE, TINY_HISTORY_LENGTH)) / "flat_item_ids.npy"
    data = bytearray(flat.read_bytes())
    data[-3] ^= 0x40  # the same length: only a checksum sees it
    flat.write_bytes(bytes(data))
    result = _run(str(VERIFY), "--dataset-dir", str(copy), "--checksums", str(sums))
    assert result.returncode != 0
    assert f"processed_tiny/{CACHE}/flat_item_ids.npy: FAILED" in result.stdout
    assert "verified" not in result.stdout


def _truncate_cache_column(dataset_dir: pathlib.Path) -> str:
    path = pathlib.Path(layout.cache_dir(dataset_dir, TINY_SIZE, TINY_HISTORY_LENGTH)) / "flat_timestamps.npy"
    np.save(path, np.load(path)[:-1])
    return f"{path}: int64 x"


def _short_popularity(dataset_dir: pathlib.Path) -> str:
    path = pathlib.Path(layout.processed_dir(dataset_dir, TINY_SIZE)) / layout.ITEM_POPULARITY_FILE
    np.save(path, np.load(path)[:-1])
    return f"{path} has"


def _sessions_of_another_run(dataset_dir: pathlib.Path) -> str:
    processed = pathlib.Path(layout.processed_dir(dataset_dir, TINY_SIZE))
    shutil.copy(processed / layout.SESSION_INDEX_FILE, processed / layout.TRAIN_SESSIONS_FILE)
    return "they come from different preprocessing runs"


def _not_parquet(dataset_dir: pathlib.Path) -> str:
    path = pathlib.Path(layout.processed_dir(dataset_dir, TINY_SIZE)) / layout.TEST_EVENTS_FILE
    path.write_bytes(b"not parquet")
    return str(path)


def _missing_mapping(dataset_dir: pathlib.Path) -> str:
    path = pathlib.Path(layout.shared_metadata_dir(dataset_dir)) / layout.ALBUM_MAPPING_FILE
    path.unlink()
    return f"missing {path}"


def _no_trainable_source(dataset_dir: pathlib.Path) -> str:
    processed = pathlib.Path(layout.processed_dir(dataset_dir, TINY_SIZE))
    (processed / CACHE / "_READY").unlink()
    (processed / layout.TRAIN_SESSIONS_FILE).unlink()
    return "neither a complete hstu_cache_L<L>/ (_READY) nor train_sessions.parquet"


@pytest.mark.parametrize("damage", [_truncate_cache_column, _short_popularity, _sessions_of_another_run, _not_parquet,
                                    _missing_mapping, _no_trainable_source], ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_tree_is_an_error_naming_what(damage, tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    copy = _copy(tiny_dataset_dir, tmp_path / TINY)
    expected = damage(copy)
    result = _run(str(VERIFY), "--dataset-dir", str(copy))
    assert result.returncode == 1, result.stdout
    assert expected in result.stderr and "verified" not in result.stdout


def test_verify_a_prepared_download_without_parquet(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    copy = _copy(tiny_dataset_dir, tmp_path / TINY, parts=("shared_metadata", "prepared"))
    result = _run(str(VERIFY), "--dataset-dir", str(copy))
    assert result.returncode == 0, result.stderr
    assert "note: no" in result.stdout and "a prepared download" in result.stdout
    assert f"as many as {layout.ITEM_POPULARITY_FILE}" in result.stdout
    assert f"ok {layout.processed_dir(copy, TINY_SIZE)}/{CACHE}" in result.stdout
    assert "(tiny: with a flat-event cache)" in result.stdout


def test_verify_names_what_is_missing(tmp_path: pathlib.Path) -> None:
    (tmp_path / "empty").mkdir()
    missing = _run(str(VERIFY), "--dataset-dir", str(tmp_path / "empty"))
    assert missing.returncode == 1 and "download_dataset.sh" in missing.stderr and "synthetic" in missing.stderr
    for size in ("5b", "50m"):
        (tmp_path / "two" / f"processed_{size}").mkdir(parents=True)
    two = _run(str(VERIFY), "--dataset-dir", str(tmp_path / "two"))
    assert two.returncode == 2 and "--size" in two.stderr


def test_the_reference_checksums_are_checked_file_by_file(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The tiny dataset laid out as 5b: the reference's checksums run over it and fail it, each file
    named; only the empty _READY marker matches."""
    copy = _copy(tiny_dataset_dir, tmp_path / "yambda-5b", size="5b", cache_name="hstu_cache_L4086")
    cache = _run(str(VERIFY), "--dataset-dir", str(copy), "--reference-checksums", "cache")
    assert cache.returncode != 0
    assert "flat-event cache: checking 16 file(s) with sha256sum" in cache.stdout
    assert "hstu_cache_L4086/_READY: OK" in cache.stdout and "hstu_cache_L4086/flat_uid.npy: FAILED" in cache.stdout
    assert "item mappings" not in cache.stdout  # cache only

    everything = _run(str(VERIFY), "--dataset-dir", str(copy), "--reference-checksums", "all")
    assert everything.returncode != 0
    assert "../shared_metadata/artist_item_mapping.parquet: FAILED" in everything.stdout  # the reference's order

    (copy / "processed_5b" / "hstu_cache_L4086" / "_READY").unlink()
    no_cache = _run(str(VERIFY), "--dataset-dir", str(copy), "--reference-checksums", "cache")
    assert no_cache.returncode == 1 and "no complete" in no_cache.stderr
    not_5b = _run(str(VERIFY), "--dataset-dir", str(tiny_dataset_dir), "--reference-checksums", "cache")
    assert not_5b.returncode == 2 and "Yambda-5b only" in not_5b.stderr
