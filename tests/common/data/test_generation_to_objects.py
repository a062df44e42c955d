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
    under = lambda root: f"{root}/bench/x" if isinstance(root, str) else root / "bench" / "x"  # noqa: E731
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
