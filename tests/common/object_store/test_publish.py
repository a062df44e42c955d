"""A locally written dataset uploaded under a prefix: same bytes, the newest file last, resumable."""

from __future__ import annotations

import os

import pytest

from common.object_store import client
from common.object_store.location import ObjectPath
from common.object_store.publish import publish_tree


def _tree(root):
    files = {"a/one.bin": os.urandom(3000), "a/b/two.bin": os.urandom(20 * 1024 * 1024 + 5), "three.txt": b"x" * 10,
             "done.json": b"{}"}
    for i, (relpath, data) in enumerate(files.items()):
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(1_000_000_000 * (i + 1), 1_000_000_000 * (i + 1)))  # done.json is the newest
    (root / "a" / ".partial-1").write_bytes(b"left by a crash")  # hidden files stay behind
    return files


def test_same_bytes_newest_last_and_a_relaunch_sends_only_what_differs(object_endpoint, tmp_path, monkeypatch):
    files = _tree(tmp_path / "local")
    order: list[str] = []
    put = client.put_file
    monkeypatch.setattr(client, "put_file", lambda endpoint, bucket, key, path: (order.append(key),
                                                                                 put(endpoint, bucket, key, path))[1])
    result = publish_tree(tmp_path / "local", ObjectPath("s3://data/sets/x"))
    assert (result.objects_sent, result.objects_skipped) == (4, 0) and order[-1] == "sets/x/done.json"
    for relpath, data in files.items():
        assert (tmp_path / "s3" / "data" / "sets" / "x" / relpath).read_bytes() == data
    assert not (tmp_path / "s3" / "data" / "sets" / "x" / "a" / ".partial-1").exists()
    (tmp_path / "local" / "three.txt").write_bytes(b"y" * 11)
    order.clear()
    again = publish_tree(tmp_path / "local", ObjectPath("s3://data/sets/x"))
    assert (again.objects_sent, again.objects_skipped) == (1, 3) and order == ["sets/x/three.txt"]


def test_a_failed_upload_never_sends_the_newest_file(object_endpoint, tmp_path, monkeypatch):
    _tree(tmp_path / "local")
    put = client.put_file

    def failing(endpoint, bucket, key, path):
        if key.endswith("two.bin"):
            raise client.ObjectStoreError(f"s3://{bucket}/{key}: PUT failed (injected)")
        return put(endpoint, bucket, key, path)

    monkeypatch.setattr(client, "put_file", failing)
    with pytest.raises(client.ObjectStoreError, match="two.bin"):
        publish_tree(tmp_path / "local", ObjectPath("s3://data/sets/y"))
    assert not (tmp_path / "s3" / "data" / "sets" / "y" / "done.json").exists()
