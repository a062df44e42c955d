import json
import os
import pickle
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

import common.checkpoint.manager as checkpoint_module
from common.checkpoint import (
    CheckpointFallbackWarning,
    CheckpointLoadError,
    CheckpointManager,
    CheckpointPolicy,
    CheckpointWriteError,
    RankLocal,
    TrainingProgress,
)
from common.checkpoint.files import read_dcp_metadata


def build(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.95, 0.999), eps=1e-8)
    return model, adam


def train(model, adam, steps: int, seed: int = 0) -> float:
    generator = torch.Generator().manual_seed(seed)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        adam.zero_grad()
        x = torch.randn(8, 6, generator=generator)
        loss = torch.nn.functional.dropout(model(x), p=0.3).square().mean()  # dropout uses the global RNG
        loss.backward()
        adam.step()
    return float(loss.detach())


def app_state(model, adam) -> dict:
    return {"model": model.state_dict(), "dense_optim": adam}


def assert_same_training_state(model_a, adam_a, model_b, adam_b):
    for (name, a), (_, b) in zip(model_a.state_dict().items(), model_b.state_dict().items()):
        assert torch.equal(a, b), name
    state_a, state_b = adam_a.state_dict(), adam_b.state_dict()
    assert state_a["param_groups"] == state_b["param_groups"]
    assert state_a["state"].keys() == state_b["state"].keys()
    for param_id, entries in state_a["state"].items():
        for key, value in entries.items():
            assert torch.equal(value, state_b["state"][param_id][key]), (param_id, key)
            assert value.dtype == state_b["state"][param_id][key].dtype


def test_adam_and_model_round_trip_bit_exactly_and_training_continues_identically(tmp_path):
    model, adam = build(seed=0)
    train(model, adam, steps=3)
    manager = CheckpointManager(tmp_path, keep_last_n=2)
    manager.save("step_3", app_state=app_state(model, adam), metadata=TrainingProgress(global_step=3).to_json())
    expected_next_loss = train(model, adam, steps=2, seed=1)

    fresh_model, fresh_adam = build(seed=42)  # different weights, and Adam has no state yet
    assert fresh_adam.state_dict()["state"] == {}
    torch.manual_seed(1234)
    metadata = manager.load_latest(app_state(fresh_model, fresh_adam))
    assert TrainingProgress.from_json(metadata).global_step == 3
    assert manager.loaded_path == tmp_path / "step_3"
    # after the same two steps (same data, dropout from the restored RNG) both agree bit for bit
    assert train(fresh_model, fresh_adam, steps=2, seed=1) == expected_next_loss
    assert_same_training_state(model, adam, fresh_model, fresh_adam)


def test_rng_states_are_restored(tmp_path):
    manager = CheckpointManager(tmp_path)
    tensors = {"w": torch.zeros(2)}
    manager.save("a", app_state={"t": tensors}, metadata={})
    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    manager.load_latest({"t": tensors})
    got = (random.random(), float(np.random.rand()), torch.rand(2))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


def test_dict_entries_load_in_place_with_non_tensor_leaves(tmp_path):
    manager = CheckpointManager(tmp_path)
    saved = {"counts": torch.arange(4), "name": "auc", "groups": [{"lr": 0.5, "betas": (0.9, 0.99)}], "n": 3}
    per_rank = {"loss_sum": torch.tensor([2.5])}
    manager.save("a", app_state={"metrics": saved, "mine": RankLocal(per_rank)}, metadata={"k": [1, 2]})
    target = {"counts": torch.zeros(4, dtype=torch.int64), "name": "", "groups": [{"lr": 0.0, "betas": (0, 0)}], "n": 0}
    counts_tensor = target["counts"]
    mine = {"loss_sum": torch.zeros(1)}
    assert manager.load_latest({"metrics": target, "mine": RankLocal(mine)}) == {"k": [1, 2]}
    assert target["counts"] is counts_tensor and torch.equal(counts_tensor, torch.arange(4))
    assert target["name"] == "auc" and target["n"] == 3
    assert target["groups"] == [{"lr": 0.5, "betas": (0.9, 0.99)}]
    assert torch.equal(mine["loss_sum"], torch.tensor([2.5]))


def test_no_checkpoint_is_a_cold_start(tmp_path):
    manager = CheckpointManager(tmp_path / "missing")
    assert not manager.has_checkpoint()
    assert manager.load_latest({"t": {"w": torch.zeros(1)}}) is None


def test_keep_last_n_keeps_the_newest_by_save_order_not_name(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last_n=2)
    for name, value in (("c", 1.0), ("b", 2.0), ("a", 3.0)):
        manager.save(name, app_state={"t": {"w": torch.tensor([value])}}, metadata={"value": value})
    assert [p.name for p in manager.complete_checkpoints()] == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]
    target = {"w": torch.zeros(1)}
    assert manager.load_latest({"t": target}) == {"value": 3.0}


def test_crash_between_dcp_write_and_marker_leaves_nothing_complete(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    manager.save("good", app_state={"t": {"w": torch.tensor([1.0])}}, metadata={"v": 1})

    def crash():
        raise RuntimeError("simulated crash after the DCP write")

    monkeypatch.setattr(checkpoint_module, "capture_rng_state", crash)
    monkeypatch.setattr(checkpoint_module.shutil, "rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
    with pytest.raises(CheckpointWriteError, match="RuntimeError: simulated crash"):
        manager.save("bad", app_state={"t": {"w": torch.tensor([2.0])}}, metadata={"v": 2})
    monkeypatch.undo()
    assert (tmp_path / "bad.tmp" / ".metadata").is_file()  # DCP had finished writing
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in manager.complete_checkpoints()] == ["good"]
    assert manager.load_latest({"t": {"w": torch.zeros(1)}}) == {"v": 1}


def test_crash_between_marker_and_rename_leaves_nothing_complete(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    real_rename = os.rename

    def crash(src, dst):
        if Path(dst) == tmp_path / "bad":  # DCP renames its own files through os.rename too
            raise OSError("simulated crash before the rename")
        real_rename(src, dst)

    monkeypatch.setattr(checkpoint_module.os, "rename", crash)
    monkeypatch.setattr(checkpoint_module.shutil, "rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
    with pytest.raises(CheckpointWriteError, match="OSError: simulated crash"):
        manager.save("bad", app_state={"t": {"w": torch.tensor([2.0])}}, metadata={})
    monkeypatch.undo()
    assert (tmp_path / "bad.tmp" / "COMPLETE.json").is_file()
    assert manager.complete_checkpoints() == []
    assert manager.load_latest({"t": {"w": torch.zeros(1)}}) is None


def test_stale_tmp_is_swept_by_the_next_save(tmp_path):
    (tmp_path / "step_9.tmp").mkdir()
    (tmp_path / "step_9.tmp" / "__0_0.distcp").write_bytes(b"partial")
    CheckpointManager(tmp_path).save("step_10", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    assert sorted(os.listdir(tmp_path)) == ["step_10"]


def test_saving_the_same_name_again_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("same", app_state={"t": {"w": torch.tensor([1.0])}}, metadata={"v": 1})
    manager.save("same", app_state={"t": {"w": torch.tensor([2.0])}}, metadata={"v": 2})
    target = {"w": torch.zeros(1)}
    assert manager.load_latest({"t": target}) == {"v": 2}
    assert target["w"].item() == 2.0 and sorted(os.listdir(tmp_path)) == ["same"]


def _truncate_payload(path: Path) -> None:
    payload = path / "__0_0.distcp"
    payload.write_bytes(payload.read_bytes()[:-7])


def _same_size_garbage(file: Path) -> None:
    file.write_bytes(b"{" * file.stat().st_size)  # the size check passes: only parsing notices


def _garble_metadata_json(path: Path) -> None:
    _same_size_garbage(path / "metadata.json")


def _garble_dcp_metadata(path: Path) -> None:
    _same_size_garbage(path / ".metadata")


def _garble_rank_file(path: Path) -> None:
    _same_size_garbage(path / "rank00000.json")


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate_payload, "truncated"),
        (_garble_metadata_json, "JSONDecodeError"),
        (_garble_dcp_metadata, "UnpicklingError"),
        (_garble_rank_file, "JSONDecodeError"),
    ],
)
def test_corrupt_latest_falls_back_with_a_warning_naming_it(tmp_path, damage, reason):
    manager = CheckpointManager(tmp_path, keep_last_n=3)
    manager.save("old", app_state={"t": {"w": torch.tensor([1.0])}}, metadata={"v": 1})
    manager.save("new", app_state={"t": {"w": torch.tensor([2.0])}}, metadata={"v": 2})
    damage(tmp_path / "new")
    target = {"w": torch.zeros(1)}
    with pytest.warns(CheckpointFallbackWarning, match=f"checkpoint {tmp_path / 'new'} could not be loaded") as record:
        assert manager.load_latest({"t": target}) == {"v": 1}
    assert any(reason in str(w.message) for w in record)
    assert target["w"].item() == 1.0 and manager.loaded_path == tmp_path / "old"


def test_flipped_payload_bit_is_caught_with_checksums(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last_n=3, verify_checksums=True)
    manager.save("old", app_state={"t": {"w": torch.full((64,), 1.0)}}, metadata={"v": 1})
    manager.save("new", app_state={"t": {"w": torch.full((64,), 2.0)}}, metadata={"v": 2})
    payload = tmp_path / "new" / "__0_0.distcp"
    data = bytearray(payload.read_bytes())
    data[data.find(torch.full((4,), 2.0).numpy().tobytes())] ^= 0x01
    payload.write_bytes(bytes(data))
    target = {"w": torch.zeros(64)}
    with pytest.warns(CheckpointFallbackWarning, match="__0_0.distcp fails its CRC32 check"):
        assert manager.load_latest({"t": target}) == {"v": 1}
    assert torch.equal(target["w"], torch.full((64,), 1.0))


def test_every_checkpoint_broken_is_an_error_not_a_cold_start(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("only", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    _truncate_payload(tmp_path / "only")
    with pytest.warns(CheckpointFallbackWarning), pytest.raises(CheckpointLoadError, match="only"):
        manager.load_latest({"t": {"w": torch.zeros(1)}})


def test_directories_without_a_usable_marker_are_ignored_with_a_warning(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last_n=3)
    manager.save("good", app_state={"t": {"w": torch.ones(1)}}, metadata={"v": 1})
    manager.save("newer", app_state={"t": {"w": torch.ones(1)}}, metadata={"v": 2})
    (tmp_path / "newer" / "COMPLETE.json").write_text("not json")
    (tmp_path / "copied_by_hand").mkdir()
    with pytest.warns(CheckpointFallbackWarning) as record:
        assert manager.load_latest({"t": {"w": torch.zeros(1)}}) == {"v": 1}
    messages = sorted(str(w.message) for w in record)
    assert messages[0].startswith(f"ignoring {tmp_path / 'copied_by_hand'}: it has no COMPLETE.json")
    assert messages[1].startswith(f"ignoring {tmp_path / 'newer'}: its COMPLETE.json is unreadable")


def test_structure_mismatch_names_the_missing_tensor(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"model": {"w": torch.ones(1)}}, metadata={})
    with pytest.warns(CheckpointFallbackWarning, match=r"lacks tensors \['model.extra'\]"):
        with pytest.raises(CheckpointLoadError):
            manager.load_latest({"model": {"w": torch.zeros(1), "extra": torch.zeros(2)}})


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/should_never_exist_ckpt",))


# DCP's metadata enum as Debian bookworm's Python 3.11.2 pickles its members: getattr(class, name)
_BY_NAME = (b"\x80\x04\x95w\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x07getattr\x94\x93\x94\x8c%"
            b"torch.distributed.checkpoint.metadata\x94\x8c\x14_MEM_FORMAT_ENCODING\x94\x93\x94\x8c\x17"
            b"TORCH_CONTIGUOUS_FORMAT\x94\x86\x94R\x94.")


class _GetattrExploit:
    def __reduce__(self):
        from torch.distributed.checkpoint.metadata import Metadata

        return (getattr, (Metadata, "__init__"))  # an allowed class, but not an enum member


class _EnumsByName(pickle.Pickler):
    """Pickles DCP's metadata enum members the way Python 3.11.2 does: getattr(class, name)."""

    def reducer_override(self, obj):
        from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

        if isinstance(obj, _MEM_FORMAT_ENCODING):
            return getattr, (type(obj), obj.name)
        return NotImplemented


def test_an_enum_member_pickled_by_name_loads_and_no_other_getattr_does(tmp_path):
    import io

    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

    from common.checkpoint.files import _MetadataUnpickler

    assert _MetadataUnpickler(io.BytesIO(_BY_NAME)).load() is _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    metadata = read_dcp_metadata(tmp_path / "a")
    # the whole metadata, written with its enum members by name, reads back the same
    buffer = io.BytesIO()
    _EnumsByName(buffer).dump(metadata)
    assert b"getattr" in buffer.getvalue()
    (tmp_path / "a" / ".metadata").write_bytes(buffer.getvalue())
    again = read_dcp_metadata(tmp_path / "a").state_dict_metadata["t.w"]
    assert again.size == torch.Size([1])
    assert again.properties.memory_format == metadata.state_dict_metadata["t.w"].properties.memory_format
    (tmp_path / "a" / ".metadata").write_bytes(pickle.dumps(_GetattrExploit()))
    with pytest.raises(pickle.UnpicklingError, match="asks for getattr"):
        read_dcp_metadata(tmp_path / "a")


def test_dcp_metadata_with_foreign_globals_is_refused(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    assert read_dcp_metadata(tmp_path / "a").state_dict_metadata["t.w"].size == torch.Size([1])
    (tmp_path / "a" / ".metadata").write_bytes(pickle.dumps(_Exploit()))
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        read_dcp_metadata(tmp_path / "a")
    assert not Path("/tmp/should_never_exist_ckpt").exists()


@pytest.mark.parametrize(
    ("app_state", "metadata", "error", "match"),
    [
        ({"t": {"w": object()}}, {}, TypeError, r"app_state value at 't.w' is a object"),
        ({"t": torch.ones(1)}, {}, TypeError, r"app_state\['t'\] is a Tensor"),
        ({"a.b": {"w": torch.ones(1)}}, {}, ValueError, "without '.'"),
        ({"t": {"w": torch.ones(1)}}, {"when": object()}, TypeError, "not JSON serializable"),
        ({"t": {"a.b": torch.ones(1), "a": {"b": torch.ones(1)}}}, {}, ValueError, "name clash at 't.a.b'"),
    ],
)
def test_unsavable_input_is_rejected_before_touching_disk(tmp_path, app_state, metadata, error, match):
    with pytest.raises(error, match=match):
        CheckpointManager(tmp_path / "ck").save("x", app_state=app_state, metadata=metadata)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "x.tmp"])
def test_bad_checkpoint_names(tmp_path, name):
    with pytest.raises(ValueError, match="checkpoint name"):
        CheckpointManager(tmp_path).save(name, app_state={}, metadata={})


def test_policy_builds_a_manager_only_with_a_path(tmp_path):
    assert CheckpointManager.from_policy(CheckpointPolicy(path="")) is None
    manager = CheckpointManager.from_policy(CheckpointPolicy(path=str(tmp_path), keep_last_n=4))
    assert manager.root == tmp_path and manager.keep_last_n == 4


def test_training_progress_validates_fields():
    progress = TrainingProgress(global_step=10, samples_seen=80, window_key=86400, batch_idx_in_window=3)
    assert TrainingProgress.from_json(progress.to_json()) == progress
    # checkpoints written before the rename call the window key train_ts
    older = {("train_ts" if k == "window_key" else k): v for k, v in progress.to_json().items()}
    assert TrainingProgress.from_json(older) == progress
    with pytest.raises(ValueError, match="training progress has unknown fields"):
        TrainingProgress.from_json({**progress.to_json(), "train_ts": 1})  # both spellings at once
    with pytest.raises(ValueError, match="from x: training progress has unknown fields \\['bogus'\\]"):
        TrainingProgress.from_json({**progress.to_json(), "bogus": 1}, source="from x")
    with pytest.raises(ValueError, match="TrainingProgress.global_step must be an int >= 0"):
        TrainingProgress.from_json({**progress.to_json(), "global_step": -1})


def test_training_progress_carries_metric_state():
    progress = TrainingProgress(global_step=7, metrics={"last_eval_step": 7, "last_quality": 0.71, "best_quality": 0.72})
    assert TrainingProgress.from_json(progress.to_json()).metrics["best_quality"] == 0.72
    older = {k: v for k, v in progress.to_json().items() if k != "metrics"}  # saved before the field existed
    assert TrainingProgress.from_json(older).metrics == {}
    with pytest.raises(ValueError, match="TrainingProgress.metrics must map str to numbers"):
        TrainingProgress.from_json({**progress.to_json(), "metrics": {"auc": "high"}})


@pytest.fixture
def single_member_process_group():
    # The project's launcher gives even a world-size-1 run a gloo process group.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_works_with_a_single_member_process_group(tmp_path, single_member_process_group):
    model, adam = build(seed=0)
    train(model, adam, steps=2)
    manager = CheckpointManager(tmp_path)
    manager.save("pg", app_state=app_state(model, adam), metadata={"v": 1})
    fresh_model, fresh_adam = build(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warnings
        assert manager.load_latest(app_state(fresh_model, fresh_adam)) == {"v": 1}
    assert_same_training_state(model, adam, fresh_model, fresh_adam)


def test_saved_tensors_without_a_live_place_are_reported(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"model": {"w": torch.ones(1), "old_head": torch.ones(3)}}, metadata={})
    live = {"w": torch.zeros(1)}
    with pytest.warns(UserWarning, match=r"no place for saved tensors \['model.old_head'\]"):
        manager.load_latest({"model": live})
    assert set(live) == {"w"} and torch.equal(live["w"], torch.ones(1))


def test_checkpoint_saved_without_checksums_still_loads_when_verifying(tmp_path):
    CheckpointManager(tmp_path).save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={"v": 1})
    with pytest.warns(UserWarning, match="saved without checksums"):
        assert CheckpointManager(tmp_path, verify_checksums=True).load_latest({"t": {"w": torch.zeros(1)}}) == {"v": 1}


def test_named_random_streams_are_captured_per_rank_and_restored(tmp_path):
    streams = {"rank": torch.Generator().manual_seed(5), "eval": torch.Generator().manual_seed(6)}
    torch.rand(3, generator=streams["rank"])
    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={}, generators=streams)
    expected = {name: torch.rand(4, generator=g) for name, g in streams.items()}
    fresh = {"rank": torch.Generator().manual_seed(0), "eval": torch.Generator().manual_seed(0)}
    manager.load_latest({"t": {"w": torch.zeros(1)}}, generators=fresh)
    for name, generator in fresh.items():
        assert torch.equal(torch.rand(4, generator=generator), expected[name]), name

    # a checkpoint without a stream's state leaves it at its seed and says so
    CheckpointManager(tmp_path / "old").save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    late = {"rank": torch.Generator().manual_seed(11)}
    with pytest.warns(UserWarning, match=r"no state for the random streams \['rank'\]"):
        CheckpointManager(tmp_path / "old").load_latest({"t": {"w": torch.zeros(1)}}, generators=late)
    assert torch.equal(torch.rand(2, generator=late["rank"]), torch.rand(2, generator=torch.Generator().manual_seed(11)))


class _MarkerFileWriter:
    def __reduce__(self):
        return (os.system, ("touch /tmp/should_never_exist_ckpt_bytes",))


def test_a_metadata_entry_for_pickled_bytes_is_refused_before_anything_is_unpickled(tmp_path):
    """DCP writes a non-tensor value as BytesStorageMetadata and loads its bytes with
    torch.load(weights_only=False): a .metadata that points one at a crafted file would run it."""
    import dataclasses

    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    from common.checkpoint.files import file_crc32

    manager = CheckpointManager(tmp_path)
    manager.save("a", app_state={"t": {"w": torch.ones(1)}}, metadata={})
    checkpoint = tmp_path / "a"
    metadata = read_dcp_metadata(checkpoint)
    (checkpoint / "evil.distcp").write_bytes(pickle.dumps(_MarkerFileWriter()))
    metadata.state_dict_metadata["t.evil"] = BytesStorageMetadata()
    metadata.storage_data = {**metadata.storage_data, MetadataIndex("t.evil"): _StorageInfo(
        relative_path="evil.distcp", offset=0, length=(checkpoint / "evil.distcp").stat().st_size)}
    (checkpoint / ".metadata").write_bytes(pickle.dumps(dataclasses.replace(metadata)))
    marker = json.loads((checkpoint / "COMPLETE.json").read_text())  # the checkpoint stays whole but for that entry
    marker["files"] = {name: (checkpoint / name).stat().st_size for name in marker["files"]} | {
        "evil.distcp": (checkpoint / "evil.distcp").stat().st_size}
    marker.setdefault("checksums", {})[".metadata"] = file_crc32(checkpoint / ".metadata")
    (checkpoint / "COMPLETE.json").write_text(json.dumps(marker))
    with pytest.raises(pickle.UnpicklingError, match=r"non-tensor entry \(BytesStorageMetadata\)"):
        read_dcp_metadata(checkpoint)
    with pytest.raises(CheckpointLoadError, match="BytesStorageMetadata"), \
            pytest.warns(CheckpointFallbackWarning, match="refusing to load it"):  # then no earlier one to fall back to
        manager.load_latest({"t": {"w": torch.zeros(1), "evil": torch.zeros(1)}})
    assert not Path("/tmp/should_never_exist_ckpt_bytes").exists()
