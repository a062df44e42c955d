"""Every request this project makes to an object store: timed, counted, and its failures named.

The client is MinIO's S3 client (`minio`), one of the three `mlpstorage`'s object mode offers
(with s3dlio and s3torchconnector), pure Python on urllib3: a loader worker forked from the
trainer builds its own client on first use (a connection pool must not cross a fork), and its
ranged GETs accept the replies of simple S3 servers that answer a range with 200 and a
Content-Range (rclone's `serve s3` does; obstore refuses those, and s3torchconnector's CRT
uploads fail against it). Credentials come from `endpoint.resolve_credentials` in each process.

Failures are OSErrors, so the loaders' existing handling of unreadable files applies: a missing
object is a `FileNotFoundError` naming `s3://bucket/key`, anything else an `ObjectStoreError`
naming the endpoint (never a credential).
"""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

from common.object_store import requests
from common.object_store.endpoint import Endpoint, resolve_credentials

MULTIPART_PART_BYTES = 16 * 1024 * 1024  # uploads above this go in parts of this size
LIST_PAGE_KEYS = 1000  # S3's keys per LIST page: a listing of n keys is ceil(n / 1000) requests
_MISSING_CODES = ("NoSuchKey", "NoSuchBucket", "NoSuchObject")


class ObjectStoreError(OSError):
    """A request failed for another reason than a missing object; names the endpoint and object."""


_clients: dict[Endpoint, object] = {}
_clients_pid = -1
_clients_lock = threading.Lock()


def _recorded(method: str, object_name: str | None, body: bytes | None, query: dict | None) -> tuple[str, int] | None:
    """The tally's kind and bytes of one HTTP request that minio makes on its own: a page of a listing
    (a GET of the bucket with a prefix), an upload's PUT (the object, or one part of a multipart upload:
    its bytes) or POST (a multipart upload's initiate or complete: no object bytes). None for the rest,
    which the functions below time themselves (GET, ranged GET, HEAD) or do not count."""
    if object_name is None:
        listing = method == "GET" and bool(query) and any(k in query for k in ("list-type", "prefix", "delimiter"))
        return (requests.LIST, 0) if listing else None
    if method == "PUT":
        return requests.PUT, len(body or b"")
    if method == "POST":
        return requests.PUT, 0
    return None


def _timed_minio():
    """minio's client with each listing page and each upload request recorded as it is made: a listing is
    one request per page of up to LIST_PAGE_KEYS keys, each with its own latency, and a multipart upload
    its initiate, each part with its own bytes, and its complete (parts may go in parallel threads)."""
    from minio import Minio

    class TimedMinio(Minio):
        def _execute(self, method, bucket_name=None, object_name=None, body=None, headers=None, query_params=None,
                     preload_content=True, no_body_trace=False):
            started = time.perf_counter()
            response = super()._execute(method, bucket_name, object_name, body, headers, query_params,
                                        preload_content, no_body_trace)
            kind = _recorded(method, object_name, body, query_params)
            if kind is not None:
                requests.record(kind[0], kind[1], time.perf_counter() - started)
            return response

    return TimedMinio


def _client(endpoint: Endpoint):
    global _clients_pid
    with _clients_lock:
        if _clients_pid != os.getpid():  # forked: the parent's connection pools are not ours
            _clients.clear()
            _clients_pid = os.getpid()
        client = _clients.get(endpoint)
        if client is None:
            from minio.credentials.providers import StaticProvider

            credentials = resolve_credentials(endpoint)
            client = _timed_minio()(endpoint.host, secure=endpoint.secure, region=endpoint.region,
                                    credentials=StaticProvider(credentials.access_key, credentials.secret_key,
                                                               credentials.session_token))
            _clients[endpoint] = client
        return client


def _url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def _failure(error: Exception, endpoint: Endpoint, bucket: str, key: str, what: str) -> OSError:
    code = getattr(error, "code", None)
    status = getattr(error, "_code", None)
    # rclone's serve s3 answers a GET of a missing key with a bare 404 (minio: InvalidResponseError)
    if key and (code in _MISSING_CODES or status == 404):
        return FileNotFoundError(f"{_url(bucket, key)}: no such object at {endpoint.url} ({code})")
    if code:
        detail = f"{code}: {getattr(error, 'message', '')}"
    elif status is not None:  # a bare HTTP answer: a bucket's 404 is a server that is no S3 endpoint
        detail = f"HTTP {status}{': is it an S3 endpoint?' if status == 404 and not key else ''}"
    elif getattr(error, "reason", None) is not None:  # urllib3's MaxRetryError: why the connection failed
        detail = "cannot reach it: " + str(error.reason).split("): ", 1)[-1]  # after urllib3's repr of the pool
    else:
        detail = f"{type(error).__name__}: {error}"
    return ObjectStoreError(f"{_url(bucket, key)}: {what} failed at {endpoint.url} ({detail})")


def get(endpoint: Endpoint, bucket: str, key: str) -> bytes:
    """The whole object (one GET)."""
    client = _client(endpoint)
    started = time.perf_counter()
    try:
        response = client.get_object(bucket, key)
        try:
            data = response.read()
        finally:
            response.close()
            response.release_conn()
    except Exception as error:  # minio's S3Error, urllib3's connection errors
        raise _failure(error, endpoint, bucket, key, "GET") from None
    requests.record(requests.GET, len(data), time.perf_counter() - started)
    return data


def get_range(endpoint: Endpoint, bucket: str, key: str, offset: int, size: int) -> bytes:
    """`size` bytes from `offset` (one ranged GET); a short reply is an error, not fewer bytes."""
    if size <= 0:
        return b""
    client = _client(endpoint)
    started = time.perf_counter()
    try:
        response = client.get_object(bucket, key, offset=offset, length=size)
        try:
            data = response.read()
        finally:
            response.close()
            response.release_conn()
    except Exception as error:
        raise _failure(error, endpoint, bucket, key, f"ranged GET of bytes {offset}-{offset + size - 1}") from None
    requests.record(requests.RANGED_GET, len(data), time.perf_counter() - started)
    if len(data) != size:
        raise ObjectStoreError(f"{_url(bucket, key)}: asked bytes {offset}-{offset + size - 1}, got {len(data)} "
                               "bytes (the object is shorter than its index says: truncated or replaced?)")
    return data


def head(endpoint: Endpoint, bucket: str, key: str) -> int | None:
    """The object's size, or None where there is no such object (one HEAD)."""
    client = _client(endpoint)
    started = time.perf_counter()
    try:
        size = int(client.stat_object(bucket, key).size)
    except Exception as error:
        failure = _failure(error, endpoint, bucket, key, "HEAD")
        if isinstance(failure, FileNotFoundError):
            requests.record(requests.HEAD, 0, time.perf_counter() - started)
            return None
        raise failure from None
    requests.record(requests.HEAD, 0, time.perf_counter() - started)
    return size


def list_objects(endpoint: Endpoint, bucket: str, prefix: str, *, recursive: bool = True) -> list[tuple[str, int]]:
    """(key, size) of every object under `prefix`, in key order; one LIST request per page of up to
    LIST_PAGE_KEYS keys, each recorded with its own latency as it is made."""
    client = _client(endpoint)
    try:
        return [(entry.object_name, int(entry.size or 0))
                for entry in client.list_objects(bucket, prefix=prefix, recursive=recursive)
                if not entry.is_dir]
    except Exception as error:
        raise _failure(error, endpoint, bucket, prefix, "LIST") from None


def put_file(endpoint: Endpoint, bucket: str, key: str, path: Path) -> int:
    """Uploads a local file; multipart in MULTIPART_PART_BYTES parts above that size (each request
    recorded as made: an initiate, the parts, a complete). Its bytes."""
    size = path.stat().st_size
    client = _client(endpoint)
    try:
        with open(path, "rb") as handle:
            client.put_object(bucket, key, handle, length=size, part_size=MULTIPART_PART_BYTES)
    except Exception as error:
        raise _failure(error, endpoint, bucket, key, "PUT") from None
    return size


def put_bytes(endpoint: Endpoint, bucket: str, key: str, data: bytes) -> None:
    client = _client(endpoint)
    try:
        client.put_object(bucket, key, io.BytesIO(data), length=len(data))
    except Exception as error:
        raise _failure(error, endpoint, bucket, key, "PUT") from None


def make_bucket(endpoint: Endpoint, bucket: str) -> None:
    """Creates `bucket` where it does not exist yet."""
    client = _client(endpoint)
    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket)
    except Exception as error:
        raise _failure(error, endpoint, bucket, "", "creating the bucket") from None


def delete(endpoint: Endpoint, bucket: str, key: str) -> None:
    """Removes one object (a missing one is not an error: S3 answers a DELETE of it with success)."""
    client = _client(endpoint)
    try:
        client.remove_object(bucket, key)
    except Exception as error:
        raise _failure(error, endpoint, bucket, key, "DELETE") from None
