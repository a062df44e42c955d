"""What the client records of the requests it makes: each page of a listing with its own latency, and
each request of a multipart upload with its own bytes (their sum the file's size)."""

from __future__ import annotations

import time

import minio

from common.object_store import client, requests
from common.object_store.endpoint import resolve_endpoint

LIST = requests.KINDS.index(requests.LIST)
PUT = requests.KINDS.index(requests.PUT)


def test_each_page_of_a_listing_is_one_list_request_with_its_own_latency(object_endpoint, tmp_path, monkeypatch):
    keys = 2 * client.LIST_PAGE_KEYS + 500  # three pages
    folder = tmp_path / "s3" / "data" / "many"
    folder.mkdir()
    for i in range(keys):
        (folder / f"{i:05d}").write_bytes(b"x")
    slow_first = []
    execute = minio.Minio._execute

    def first_page_slow(self, method, bucket_name=None, object_name=None, body=None, headers=None, query_params=None,
                        *args, **kwargs):
        if method == "GET" and not slow_first and (query_params or {}).get("list-type"):
            slow_first.append(1)
            time.sleep(0.3)  # one slow page among fast ones
        return execute(self, method, bucket_name, object_name, body, headers, query_params, *args, **kwargs)

    monkeypatch.setattr(minio.Minio, "_execute", first_page_slow)
    before = requests.process_tally()
    found = client.list_objects(resolve_endpoint(), "data", "many/")
    asked = requests.process_tally().minus(before)
    assert len(found) == keys and slow_first
    assert asked.count[LIST] == 3
    slow_bucket = (300_000).bit_length() - 1  # log2 of the microseconds
    per_bucket = asked.latencies[LIST]
    assert per_bucket[slow_bucket:].sum() == 1 and per_bucket[:slow_bucket].sum() == 2, per_bucket.tolist()


def test_a_multipart_upload_records_its_initiate_parts_and_complete_with_their_bytes(object_endpoint, tmp_path):
    size = 2 * client.MULTIPART_PART_BYTES + (8 << 20) + 3  # parts of 16, 16 and 8 MiB + 3 B
    path = tmp_path / "big.bin"
    with open(path, "wb") as out:
        out.truncate(size)
    before = requests.process_tally()
    assert client.put_file(resolve_endpoint(), "data", "big.bin", path) == size
    asked = requests.process_tally().minus(before)
    assert (tmp_path / "s3" / "data" / "big.bin").stat().st_size == size
    assert asked.count[PUT] == 5  # initiate, three parts, complete
    assert asked.bytes[PUT] == size  # every byte once, none lost to rounding
    sizes = asked.sizes[PUT]
    assert sizes[0] == 2 and sizes[24] == 2 and sizes[23] == 1, sizes.tolist()
    small = tmp_path / "small.bin"
    small.write_bytes(b"y" * 1000)
    before = requests.process_tally()
    client.put_file(resolve_endpoint(), "data", "small.bin", small)
    asked = requests.process_tally().minus(before)
    assert (asked.count[PUT], asked.bytes[PUT]) == (1, 1000)
