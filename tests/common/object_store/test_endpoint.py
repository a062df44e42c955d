"""Where the endpoint and credentials come from: the AWS variables and config files users have."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.object_store.endpoint import Endpoint, ObjectStoreConfigError, resolve_credentials, resolve_endpoint
from common.object_store.location import ObjectPath, data_location, is_object_url

AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE")


@pytest.fixture()
def aws_home(tmp_path, monkeypatch):
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return tmp_path


def test_the_variables_come_first_then_the_profile_in_the_config_file(aws_home, monkeypatch):
    (aws_home / "config").write_text("[default]\nregion = eu-west-1\nendpoint_url = http://127.0.0.5:9000\n"
                                     "[profile lab]\nregion = us-west-2\nendpoint_url = https://s3.lab.example:8443\n")
    assert resolve_endpoint() == Endpoint(url="http://127.0.0.5:9000", region="eu-west-1", profile="default")
    monkeypatch.setenv("AWS_PROFILE", "lab")
    lab = resolve_endpoint()
    assert (lab.url, lab.region, lab.secure, lab.host) == ("https://s3.lab.example:8443", "us-west-2", True,
                                                           "s3.lab.example:8443")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.7:9100/")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert resolve_endpoint().url == "http://127.0.0.7:9100" and resolve_endpoint().region == "ap-south-1"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.8:9200")  # the service-specific one wins
    assert resolve_endpoint().url == "http://127.0.0.8:9200"


def test_without_any_setting_it_is_aws_s3_of_us_east_1(aws_home):
    assert resolve_endpoint() == Endpoint(url="https://s3.us-east-1.amazonaws.com", region="us-east-1",
                                          profile="default")


def test_credentials_from_variables_then_the_credentials_file_and_never_in_a_repr(aws_home, monkeypatch):
    (aws_home / "credentials").write_text("[lab]\naws_access_key_id = LABKEY\naws_secret_access_key = lab-secret-1\n")
    monkeypatch.setenv("AWS_PROFILE", "lab")
    found = resolve_credentials(resolve_endpoint())
    assert (found.access_key, found.secret_key) == ("LABKEY", "lab-secret-1")
    assert "lab-secret-1" not in repr(found)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-2")
    assert resolve_credentials(resolve_endpoint()).access_key == "ENVKEY"


def test_missing_credentials_and_bad_endpoints_are_named(aws_home, monkeypatch):
    with pytest.raises(ObjectStoreConfigError, match="AWS_ACCESS_KEY_ID.*credentials"):
        resolve_credentials(resolve_endpoint())
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://127.0.0.1:21")
    with pytest.raises(ObjectStoreConfigError, match="ftp://127.0.0.1:21"):
        resolve_endpoint()


def test_an_endpoint_url_with_a_user_and_password_is_refused_without_repeating_them(aws_home, monkeypatch):
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.setenv(variable, "http://alice:s3cr3t@127.0.0.1:9000")
        with pytest.raises(ObjectStoreConfigError, match=f"in {variable} has a user:password@ part") as refused:
            resolve_endpoint()
        assert "s3cr3t" not in str(refused.value) and "alice" not in str(refused.value)
        monkeypatch.delenv(variable)
    (aws_home / "config").write_text("[default]\nendpoint_url = https://bob:hunter2@s3.lab.example\n")
    with pytest.raises(ObjectStoreConfigError, match="endpoint_url of profile 'default'") as refused:
        resolve_endpoint()
    assert "hunter2" not in str(refused.value)


def test_object_paths_join_and_name_like_paths(aws_home):
    root = data_location("s3://bucket/data/root/")
    assert isinstance(root, ObjectPath) and str(root) == "s3://bucket/data/root"
    image = root / "retinanet" / "train/data" / "0001.jpg"
    assert str(image) == "s3://bucket/data/root/retinanet/train/data/0001.jpg"
    assert (image.name, image.suffix, image.stem) == ("0001.jpg", ".jpg", "0001")
    assert str(image.parent) == "s3://bucket/data/root/retinanet/train/data"
    assert image.relative_to(root) == "retinanet/train/data/0001.jpg"
    assert is_object_url("s3://b") and not is_object_url("/data/s3://b")
    assert not isinstance(data_location("relative/dir"), ObjectPath)
    with pytest.raises(ValueError, match="names no bucket"):
        ObjectPath("s3:///key")
    with pytest.raises(TypeError):
        open(image)  # no __fspath__: never taken for a local file


@pytest.mark.parametrize("package", ["recommendation_v4", "retinanet", "flux"])
def test_each_trainer_resolves_its_data_root_once_as_its_config_is_read(aws_home, monkeypatch, package):
    """A DataConfig holds its data_root as a Location from construction on; a data_root that cannot
    be one is a ConfigError naming the binding, before anything reads."""
    import importlib

    from common.config.checks import ConfigError

    DataConfig = importlib.import_module(f"{package}.run_config").DataConfig
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.7:9000")
    remote = DataConfig(data_root="s3://bkt/prefix").location
    assert isinstance(remote, ObjectPath) and str(remote) == "s3://bkt/prefix"
    assert remote.endpoint.url == "http://127.0.0.7:9000"  # the endpoint as it was when the config was read
    assert DataConfig(data_root="some/dir").location == Path("some/dir")
    for bad, reason in (("s3://", "names no bucket"), ("", "a directory or s3://bucket/prefix")):
        with pytest.raises(ConfigError, match=rf"{package}\.DataConfig\.data_root.*{reason}"):
            DataConfig(data_root=bad)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:secret@127.0.0.7:9000")
    with pytest.raises(ConfigError, match=rf"{package}\.DataConfig\.data_root = 's3://bkt'.*user:password") as caught:
        DataConfig(data_root="s3://bkt")
    assert "secret" not in str(caught.value)
