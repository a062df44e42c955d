"""ObjectNpyArray against a real S3 endpoint (rclone serve s3): it must index like numpy does on the
same local array, fetch only the rows asked (consecutive ones in one ranged GET), and name the
object in every error. No skip: a missing rclone is a failure (it comes with the dev install)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from common.object_store import client, npy_array
from common.object_store.location import ObjectPath
from common.object_store.npy_array import ObjectNpyArray
from common.object_store.requests import KINDS, RANGED_GET, process_tally
from storage.backends.object_endpoint import ObjectEndpoint

BUCKET = "bkt"
ONE_D = (np.arange(1000, dtype=np.uint32) * 3) ^ 0x5A5A
TWO_D = np.arange(200 * 5, dtype=np.float32).reshape(200, 5) / 7


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An endpoint with bucket `bkt`, its variables set for the module; yields a local directory
    where the tests write files before `_upload`ing them (rclone caches the directories it
    serves, so a file written straight into its root may stay unseen for minutes)."""
    base = tmp_path_factory.mktemp("objects")
    (base / "root" / BUCKET).mkdir(parents=True)
    with ObjectEndpoint(base / "root") as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in endpoint.env().items():
            patch.setenv(name, value)
        yield base / "local"


def _upload(store: Path, key: str, data: bytes) -> ObjectPath:
    local = store / key
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data)
    target = ObjectPath(f"s3://{BUCKET}/{key}")
    client.put_file(target.endpoint, target.bucket, target.key, local)
    return target


def _put(store: Path, key: str, array: np.ndarray, **write_kwargs) -> ObjectPath:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, allow_pickle=False, **write_kwargs)
    return _upload(store, key, out.getvalue())


def _ranged_gets_of(action) -> int:
    before = process_tally()
    action()
    return int(process_tally().minus(before).count[KINDS.index(RANGED_GET)])


@pytest.mark.parametrize("local", [ONE_D, TWO_D], ids=["1d", "2d"])
def test_indexing_equals_numpy(store: Path, local: np.ndarray) -> None:
    remote = ObjectNpyArray(_put(store, f"index/{local.ndim}d.npy", local))
    n = local.shape[0]
    keys = [0, 7, n - 1, -1, -n, np.int64(3), slice(3, 17), slice(None, 0), slice(n - 10, n + 500), slice(None),
            np.array([5, 3, 3, 9, 0, n - 1, 3]), [4, 2], np.array([[1, 2], [3, 1]]), np.array([-1, 0]),
            np.array([], dtype=np.int64)]
    for key in keys:
        got, want = remote[key], local[key]
        assert np.asarray(got).dtype == want.dtype, key
        assert np.shape(got) == np.shape(want), key
        np.testing.assert_array_equal(got, want, err_msg=str(key))
    assert remote[np.array([6, 2])].flags.writeable  # as a memmap's fancy-indexed copy


@pytest.mark.parametrize("local", [ONE_D, TWO_D], ids=["1d", "2d"])
def test_attributes_are_a_memmaps(store: Path, local: np.ndarray) -> None:
    path = _put(store, f"attrs/{local.ndim}d.npy", local)
    remote = ObjectNpyArray(path)
    mapped = np.load(store / f"attrs/{local.ndim}d.npy", mmap_mode="r")
    assert (remote.shape, remote.dtype, remote.itemsize, remote.ndim, remote.size, len(remote)) == (
        mapped.shape, mapped.dtype, mapped.itemsize, mapped.ndim, mapped.size, len(mapped))
    assert remote.offset == mapped.offset
    assert remote.filename == str(path) == f"s3://{BUCKET}/attrs/{local.ndim}d.npy"


def test_opening_is_one_ranged_get(store: Path) -> None:
    path = _put(store, "open/a.npy", ONE_D)
    size = (store / "open/a.npy").stat().st_size
    assert _ranged_gets_of(lambda: ObjectNpyArray(path, size_bytes=size)) == 1


def test_consecutive_rows_are_one_ranged_get(store: Path) -> None:
    remote = ObjectNpyArray(_put(store, "runs/a.npy", TWO_D))
    assert _ranged_gets_of(lambda: remote[np.arange(20, 30)]) == 1
    assert _ranged_gets_of(lambda: remote[np.arange(20, 30)[::-1]]) == 1  # sorted before fetching
    assert _ranged_gets_of(lambda: remote[np.array([20, 21, 21, 20, 22])]) == 1  # repeats fetched once
    assert _ranged_gets_of(lambda: remote[np.array([3, 4, 5, 90, 91, 150])]) == 3
    assert _ranged_gets_of(lambda: remote[40:60]) == 1
    assert _ranged_gets_of(lambda: remote[np.array([], dtype=np.int64)]) == 0


def test_read_all_is_one_get(store: Path) -> None:
    remote = ObjectNpyArray(_put(store, "whole/a.npy", TWO_D))
    before = process_tally()
    np.testing.assert_array_equal(np.asarray(remote), TWO_D)
    spent = process_tally().minus(before)
    assert spent.total == 1 and spent.count[KINDS.index(RANGED_GET)] == 0
    np.testing.assert_array_equal(remote.read_all(), TWO_D)


def test_rows_beyond_the_shape_are_index_errors(store: Path) -> None:
    path = _put(store, "bounds/a.npy", ONE_D)
    remote = ObjectNpyArray(path)
    n = ONE_D.shape[0]
    for key in (n, -n - 1, np.array([0, n]), [n + 5]):
        with pytest.raises(IndexError, match=str(path)):
            remote[key]
    with pytest.raises(IndexError):
        remote[::2]  # only step 1 is read by range


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_versions(store: Path, version: tuple[int, int]) -> None:
    remote = ObjectNpyArray(_put(store, f"versions/v{version[0]}.npy", TWO_D, version=version))
    np.testing.assert_array_equal(remote[np.array([199, 0, 5])], TWO_D[[199, 0, 5]])


def test_a_truncated_header_is_a_value_error_naming_the_object(store: Path) -> None:
    whole = io.BytesIO()
    np.save(whole, ONE_D)
    header = _upload(store, "bad/header.npy", whole.getvalue()[:20])
    with pytest.raises(ValueError, match=f"{header}.*truncated"):
        ObjectNpyArray(header)
    rows = _upload(store, "bad/rows.npy", whole.getvalue()[:-4])  # a row short
    with pytest.raises(ValueError, match=f"{rows}.*truncated"):
        ObjectNpyArray(rows)
    magic = _upload(store, "bad/magic.npy", b"not an npy file at all")
    with pytest.raises(ValueError, match=f"{magic}.*not a .npy file"):
        ObjectNpyArray(magic)


def test_fortran_order_is_refused(store: Path) -> None:
    with pytest.raises(ValueError, match=f"s3://{BUCKET}/order/f.npy.*C order"):
        ObjectNpyArray(_put(store, "order/f.npy", np.asfortranarray(TWO_D)))


def test_searchsorted_equals_numpys(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npy_array, "SEARCH_BLOCK_ROWS", 16)  # many blocks from a small array
    local = np.sort(np.random.default_rng(0).integers(0, 500, size=1000)).astype(np.int64)
    remote = ObjectNpyArray(_put(store, "sorted/a.npy", local))
    queries = np.concatenate([np.arange(-3, 505), local[::16], local[15::16]])
    for side in ("left", "right"):
        np.testing.assert_array_equal(remote.searchsorted(queries, side=side), np.searchsorted(local, queries, side=side))
        assert np.searchsorted(remote, 250, side=side) == np.searchsorted(local, 250, side=side)
