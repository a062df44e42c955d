"""The --out of every generator under an s3:// data root: a URL stays a URL, and a generator that folds one
into a local path (pathlib turns s3://b/x into s3:/b/x) is refused rather than writing a folder `s3:`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from common.data import generation
from common.data.generation_to_objects import default_out, refuse_folded_url


def _args(**given) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    generation.add_arguments(parser, sizes=["tiny"], default_size="tiny")
    return parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in given.items()])


def test_the_default_out_under_an_s3_data_root_is_a_url_and_a_local_one_a_path(monkeypatch, tmp_path):
    monkeypatch.delenv("MLPERF_DATA_ROOT", raising=False)
    under = lambda root: root / "bench" / "x"  # noqa: E731  (a Path or an ObjectPath, resolved once)
    assert default_out(_args(), tmp_path / "data", under) == tmp_path / "data" / "bench" / "x"
    monkeypatch.setenv("MLPERF_DATA_ROOT", "s3://bucket/root")
    args = _args()
    assert default_out(args, tmp_path, under) == "s3://bucket/root/bench/x" == args.out
    args = _args(data_root="s3://other/p")  # the flag over the variable, its // kept
    assert default_out(args, tmp_path, under) == "s3://other/p/bench/x"
    # what a generator that reads args.data_root as a Path gets: the folded URL, refused by run_command
    assert _args(data_root="s3://other/p").data_root == Path("s3:/other/p")
    assert default_out(_args(out=str(tmp_path / "given")), tmp_path, under) == tmp_path / "given"


def test_a_folded_s3_url_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        refuse_folded_url(Path("s3://bucket/root/yambda-synthetic-tiny-seed0"))
    assert refused.value.code == 2 and "lost its '//'" in capsys.readouterr().err
    refuse_folded_url(tmp_path / "s3:")  # an absolute folder of that name is the user's choice
    refuse_folded_url("s3://bucket/root")


# each generator's module and the function `python -m` runs
GENERATORS = ["flux.data.synthetic:main", "retinanet.data.synthetic:main", "recommendation_v4.data.synthetic:_main"]


def _generate_to(module: str, out: str, tmp_path, monkeypatch) -> int:
    """The generator's command with --out `out`, its staging under tmp_path/staging (nothing may be made there)."""
    import importlib

    module, function = module.split(":")
    monkeypatch.setenv("MLPERF_STAGING_DIR", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir(exist_ok=True)
    with pytest.raises(SystemExit) as refused:
        getattr(importlib.import_module(module), function)(["--out", out])
    assert not any((tmp_path / "staging").iterdir()), "a refused --out generated before refusing"
    return refused.value.code


@pytest.mark.parametrize("module", GENERATORS)
def test_an_endpoint_that_does_not_answer_is_one_line_with_status_2_before_generating(module, tmp_path, monkeypatch,
                                                                                      capsys):
    from storage.backends.object_endpoint import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    assert _generate_to(module, "s3://bucket/prefix", tmp_path, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out s3://bucket/prefix: s3://bucket/: creating the bucket failed at http://127.0.0.1:")
    assert "cannot reach it: " in err and "Connection refused" in err and err.count("\n") == 1


@pytest.mark.parametrize("module", GENERATORS)
def test_no_bucket_or_one_the_endpoint_cannot_make_is_one_line_with_status_2(module, object_endpoint, tmp_path,
                                                                           monkeypatch, capsys):
    assert _generate_to(module, "s3://", tmp_path, monkeypatch) == 2
    assert capsys.readouterr().err == "error: --out s3://: 's3://' names no bucket (s3://bucket/prefix)\n"
    assert _generate_to(module, "s3://Not_A_Bucket/x", tmp_path, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out s3://Not_A_Bucket/x: s3://Not_A_Bucket/: creating the bucket failed at ")
    assert "invalid bucket name Not_A_Bucket" in err and err.count("\n") == 1
