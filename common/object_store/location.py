"""`ObjectPath`: an object (or a prefix) in an S3 bucket, with the part of pathlib's API the
loaders use, so that a dataset directory may be `s3://bucket/prefix` wherever it may be a path.

Joining and naming are pure; `is_file`, `stat`, `read_bytes`, `read_range`, `open("rb")` and
`list` each make the requests they name (`common.object_store.client`). An ObjectPath has no
`__fspath__`: code that would hand it to `open()` or numpy fails at once instead of reading a
local file of the same name.
"""

from __future__ import annotations

import io
import posixpath
import types
from pathlib import Path

from common.config.checks import ConfigError, binding_name
from common.object_store import client
from common.object_store.endpoint import Endpoint, resolve_endpoint

SCHEME = "s3://"


def is_object_url(text: object) -> bool:
    return isinstance(text, ObjectPath) or (isinstance(text, str) and text.startswith(SCHEME))


class ObjectPath:
    """`s3://bucket/key` at `endpoint` (resolved from the environment when not given)."""

    __slots__ = ("bucket", "key", "endpoint")

    def __init__(self, url: str, *, endpoint: Endpoint | None = None) -> None:
        if not url.startswith(SCHEME):
            raise ValueError(f"{url!r} is not an s3://bucket/prefix URL")
        bucket, _, key = url[len(SCHEME):].partition("/")
        if not bucket:
            raise ValueError(f"{url!r} names no bucket (s3://bucket/prefix)")
        self.bucket = bucket
        self.key = posixpath.normpath(key).lstrip("/") if key.strip("/") else ""
        self.endpoint = endpoint or resolve_endpoint()

    # -- names ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r}, endpoint={self.endpoint.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.bucket, self.key, self.endpoint) == (
            other.bucket, other.key, other.endpoint)

    def __hash__(self) -> int:
        return hash((self.bucket, self.key, self.endpoint))

    def __getstate__(self) -> tuple:
        return (self.bucket, self.key, self.endpoint)

    def __setstate__(self, state: tuple) -> None:
        self.bucket, self.key, self.endpoint = state

    def __truediv__(self, part: str | Path) -> "ObjectPath":
        joined = posixpath.join(self.key, str(part)) if self.key else str(part)
        return ObjectPath(f"{SCHEME}{self.bucket}/{joined}", endpoint=self.endpoint)

    def joinpath(self, *parts: str) -> "ObjectPath":
        out = self
        for part in parts:
            out = out / part
        return out

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def stem(self) -> str:
        return posixpath.splitext(self.name)[0]

    @property
    def parent(self) -> "ObjectPath":
        return ObjectPath(f"{SCHEME}{self.bucket}/{posixpath.dirname(self.key)}", endpoint=self.endpoint)

    @property
    def parts(self) -> tuple[str, ...]:
        return (f"{SCHEME}{self.bucket}", *[p for p in self.key.split("/") if p])

    def relative_to(self, other: "ObjectPath") -> str:
        prefix = other.key + "/" if other.key else ""
        if other.bucket != self.bucket or not self.key.startswith(prefix):
            raise ValueError(f"{self} is not under {other}")
        return self.key[len(prefix):]

    # -- requests -------------------------------------------------------------------------
    def size(self) -> int | None:
        """The object's size, None where there is none (HEAD)."""
        return client.head(self.endpoint, self.bucket, self.key)

    def is_file(self) -> bool:
        return self.size() is not None

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_dir(self) -> bool:
        """Whether any object lies under this prefix (one LIST)."""
        return bool(client.list_objects(self.endpoint, self.bucket, self.key + "/", recursive=False))

    def stat(self) -> types.SimpleNamespace:
        size = self.size()
        if size is None:
            raise FileNotFoundError(f"{self}: no such object at {self.endpoint.url}")
        return types.SimpleNamespace(st_size=size)

    def read_bytes(self) -> bytes:
        return client.get(self.endpoint, self.bucket, self.key)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def read_range(self, offset: int, size: int) -> bytes:
        return client.get_range(self.endpoint, self.bucket, self.key, offset, size)

    def open(self, mode: str = "rb") -> io.BytesIO:
        """The whole object read into memory (one GET); reading only."""
        if mode not in ("r", "rb"):
            raise ValueError(f"{self}: objects are opened for reading only here, not {mode!r}")
        data = self.read_bytes()
        return io.BytesIO(data) if mode == "rb" else io.StringIO(data.decode())  # type: ignore[return-value]

    def list(self) -> list[tuple["ObjectPath", int]]:
        """Every object under this prefix, with its size, in key order (LIST requests)."""
        prefix = self.key + "/" if self.key else ""
        return [(ObjectPath(f"{SCHEME}{self.bucket}/{key}", endpoint=self.endpoint), size)
                for key, size in client.list_objects(self.endpoint, self.bucket, prefix)]


# A dataset's place: a directory on local disk, or a prefix in an object store. Every layout
# function and reader takes one of these; text becomes one only in `data_location`, called where
# a config or a command line is read.
Location = Path | ObjectPath


def data_location(text: str | Location) -> Location:
    """A dataset location as configured: `s3://...` is an ObjectPath, anything else a local Path."""
    if isinstance(text, (Path, ObjectPath)):
        return text
    return ObjectPath(text) if is_object_url(text) else Path(text)


def config_location(config: object, field: str) -> Location:
    """`config.<field>` (text from a gin binding) resolved into its Location, once, as the config is
    read: a bad URL or S3 endpoint is a ConfigError naming the binding."""
    text = getattr(config, field)
    if not isinstance(text, str) or not text:
        raise ConfigError(f"{binding_name(config, field)} must be a directory or s3://bucket/prefix, got {text!r}")
    try:
        return data_location(text)
    except ValueError as error:  # ObjectStoreConfigError is one
        raise ConfigError(f"{binding_name(config, field)} = {text!r}: {error}") from error
