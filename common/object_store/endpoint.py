"""Where the object store is, and the credentials to sign with, as AWS's own tools find them.

The endpoint: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else `endpoint_url` in the profile's
section of the AWS config file (`AWS_CONFIG_FILE`, default ~/.aws/config), else AWS S3 of the
region; a URL with a `user:password@` part is refused (the URL goes into the run's records). The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else us-east-1.
The profile: `AWS_PROFILE`, else `default`. Credentials: `AWS_ACCESS_KEY_ID` /
`AWS_SECRET_ACCESS_KEY` (/ `AWS_SESSION_TOKEN`), else the profile in the shared credentials file
(`AWS_SHARED_CREDENTIALS_FILE`, default ~/.aws/credentials), else the profile in the config file.

`Endpoint` holds no secret: it is what travels to loader workers, into errors and into the run's
records. Credentials are looked up in each process that signs, and never printed.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_REGION = "us-east-1"


class ObjectStoreConfigError(ValueError):
    """The endpoint or the credentials cannot be worked out; the message says where it looked."""


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An S3 endpoint: `url` (scheme://host[:port]), `region`, and the profile that signs."""

    url: str
    region: str
    profile: str

    @property
    def secure(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def is_loopback(self) -> bool:
        host = urlsplit(self.url).hostname or ""
        return host == "localhost" or host.startswith("127.")


def _profile_section(parser: configparser.ConfigParser, profile: str, *, config_file: bool) -> dict[str, str]:
    name = profile if not config_file or profile == "default" else f"profile {profile}"
    return dict(parser[name]) if parser.has_section(name) else {}


def _read_ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    if path.is_file():
        try:
            parser.read(path)
        except configparser.Error as error:
            raise ObjectStoreConfigError(f"{path}: not a readable AWS config file ({error})") from None
    return parser


def config_file() -> Path:
    return Path(os.environ.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config")


def credentials_file() -> Path:
    return Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")


def resolve_endpoint() -> Endpoint:
    """The endpoint this process's environment and AWS config file name (see the module doc)."""
    profile = os.environ.get("AWS_PROFILE") or "default"
    section = _profile_section(_read_ini(config_file()), profile, config_file=True)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or section.get("region") or DEFAULT_REGION
    sources = [(os.environ.get("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"),
               (os.environ.get("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"),
               (section.get("endpoint_url"), f"endpoint_url of profile {profile!r} in {config_file()}")]
    url, source = next(((u, s) for u, s in sources if u), (f"https://s3.{region}.amazonaws.com", ""))
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # the URL travels into errors, load_profile.json and the exported DLIO workloads: a secret in it
        # would too, so it is refused (and not repeated here); S3 signs with the credentials, not the URL
        raise ObjectStoreConfigError(f"the S3 endpoint URL in {source} has a user:password@ part: give the "
                                     "credentials as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or in the credentials "
                                     "file) and the URL as http(s)://host[:port]")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ObjectStoreConfigError(f"the S3 endpoint URL {url!r} (AWS_ENDPOINT_URL / endpoint_url) is not "
                                     "http(s)://host[:port]")
    return Endpoint(url=f"{parts.scheme}://{parts.netloc}", region=region, profile=profile)


@dataclasses.dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    session_token: str | None = dataclasses.field(default=None, repr=False)


def resolve_credentials(endpoint: Endpoint) -> Credentials:
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return Credentials(key, secret, os.environ.get("AWS_SESSION_TOKEN") or None)
    for path, is_config in ((credentials_file(), False), (config_file(), True)):
        section = _profile_section(_read_ini(path), endpoint.profile, config_file=is_config)
        if section.get("aws_access_key_id") and section.get("aws_secret_access_key"):
            return Credentials(section["aws_access_key_id"], section["aws_secret_access_key"],
                               section.get("aws_session_token") or None)
    raise ObjectStoreConfigError(
        f"no credentials for {endpoint.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile "
        f"{endpoint.profile!r} aws_access_key_id / aws_secret_access_key in {credentials_file()} (AWS_PROFILE picks "
        "the profile)"
    )
