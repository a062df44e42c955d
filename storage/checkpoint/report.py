"""The numbers of an emulated checkpoint run (`checkpoint.json`) from the host's per-rank records."""

from __future__ import annotations

from typing import Any, Sequence

from storage.checkpoint.plan import CheckpointPlan

GB = 1e9


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _save_row(index: int, per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    saves = [r["saves"][index] for r in per_rank]
    seconds = max(s["save_s"] for s in saves)
    data = sum(s["bytes"] for s in saves)
    written = data + sum(s["metadata_bytes"] for s in saves)
    device = next((s["device"] for s in saves if s.get("device")), None)
    row = {"name": saves[0]["name"], "save_s": seconds, "bytes": written, "data_bytes": data,
           "files": sum(s["files"] for s in saves), "write_gb_s": _rate(written / GB, seconds),
           "write_s_max": max(s["write_s"] for s in saves), "fsync_s_max": max(s["fsync_s"] for s in saves),
           "peer_bytes": sum(s["peer_bytes"] for s in saves), "per_rank_save_s": [s["save_s"] for s in saves]}
    if device is not None:
        row["device"] = {**device, "write_iops": _rate(device["writes"], seconds),
                         "write_gb_s": _rate(device["write_bytes"] / GB, seconds)}
    return row


def _restore_row(index: int, per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    restores = [r["restores"][index] for r in per_rank]
    seconds = max(r["restore_s"] for r in restores)
    data = sum(r["bytes"] for r in restores)
    device = next((r["device"] for r in restores if r.get("device")), None)
    row = {"name": restores[0]["name"], "restore_s": seconds, "bytes": data, "reads": sum(r["reads"] for r in restores),
           "read_gb_s": _rate(data / GB, seconds), "checks_s_max": max(r["checks_s"] for r in restores),
           "evicted_bytes": sum(r["evicted_bytes"] for r in restores)}
    if device is not None:
        row["device"] = {**device, "read_iops": _rate(device["reads"], seconds),
                         "read_gb_s": _rate(device["read_bytes"] / GB, seconds)}
    return row


def au_cost(*, save_s: float, seconds_per_step: float, interval_steps: int) -> dict[str, float] | None:
    """A synchronous save stalls every accelerator for save_s once per interval: the fraction of
    time the accelerators still compute, AU with checkpoints over AU without."""
    if interval_steps <= 0 or seconds_per_step <= 0:
        return None
    between = interval_steps * seconds_per_step
    return {"interval_steps": interval_steps, "seconds_between_saves": between, "stall_s": save_s,
            "au_factor": between / (between + save_s)}


def summarize(plan: CheckpointPlan, host: dict[str, Any], *, compute: Any = None,
              interval_steps: int = 0) -> dict[str, Any]:
    per_rank = sorted(host["per_rank"], key=lambda r: r["rank"])
    saves = [_save_row(i, per_rank) for i in range(len(per_rank[0]["saves"]))]
    restores = [_restore_row(i, per_rank) for i in range(len(per_rank[0]["restores"]))]
    world = plan.world_size
    summary: dict[str, Any] = {
        "benchmark": plan.benchmark, "flavor": plan.flavor, "world_size": world, "host_ranks": host["ranks"],
        "full_save": {"bytes": plan.total_bytes(), "data_files": world, "files": 2 * world + 3,
                      "rank_bytes_min": min(plan.file_bytes), "rank_bytes_max": max(plan.file_bytes),
                      "metadata_bytes": plan.metadata_bytes, "tensors": len(plan.metadata.state_dict_metadata),
                      "chunks": len(plan.metadata.storage_data)},
        "device": host.get("device"), "device_unavailable": host.get("device_unavailable"),
        "saves": saves, "restores": restores,
    }
    if saves:
        mean_save = sum(s["save_s"] for s in saves) / len(saves)
        summary["host_save_s_mean"] = mean_save
        # every host writes its share in the same burst: what the storage takes in for the save to last as long
        summary["world_write_gb_s_at_this_save_time"] = _rate(plan.total_bytes() / GB, mean_save)
        if compute is not None:
            summary["au"] = {"accelerator": compute.accelerator, "seconds_per_step": compute.seconds_per_step,
                             **(au_cost(save_s=mean_save, seconds_per_step=compute.seconds_per_step,
                                        interval_steps=interval_steps) or {})}
    return summary


def lines(summary: dict[str, Any]) -> list[str]:
    full = summary["full_save"]
    out = [f"{summary['benchmark']} {summary['flavor']}: a save by {summary['world_size']} ranks is "
           f"{full['bytes'] / GB:,.2f} GB in {full['files']} files ({full['data_files']} data files of "
           f"{full['rank_bytes_min'] / GB:,.3f}-{full['rank_bytes_max'] / GB:,.3f} GB, .metadata "
           f"{full['metadata_bytes'] / 1e6:,.2f} MB); this host ran ranks {summary['host_ranks']}"]
    for save in summary["saves"]:
        device = save.get("device") or {}
        out.append(f"  save {save['name']}: {save['bytes'] / GB:,.3f} GB in {save['save_s']:.2f} s = "
                   f"{save['write_gb_s'] or 0:.3f} GB/s (fsync up to {save['fsync_s_max']:.2f} s); device: "
                   f"{device.get('write_bytes', 0) / GB:,.3f} GB in {device.get('writes', 0):,} writes, "
                   f"{device.get('flushes', 0)} flushes")
    for restore in summary["restores"]:
        device = restore.get("device") or {}
        out.append(f"  restore {restore['name']}: the ranks read {restore['bytes'] / GB:,.3f} GB in "
                   f"{restore['restore_s']:.2f} s ({restore['reads']:,} ranges); device: "
                   f"{device.get('read_bytes', 0) / GB:,.3f} GB in {device.get('reads', 0):,} reads = "
                   f"{device.get('read_gb_s') or 0:.3f} GB/s (ranks on one host share the page cache)")
    au = summary.get("au")
    if au and "au_factor" in au:
        saves = len(summary["saves"])
        out.append(f"  AU cost on {au['accelerator']} ({au['seconds_per_step']} s/step), a save every "
                   f"{au['interval_steps']} steps: each stalls {au['stall_s']:.2f} s (the mean of "
                   f"{saves} save{'s' if saves != 1 else ''} above) of {au['seconds_between_saves']:.0f} s: "
                   f"AU x {au['au_factor']:.4f}")
    if summary.get("world_write_gb_s_at_this_save_time"):
        out.append(f"  for every host's save to take as long, the storage takes in "
                   f"{summary['world_write_gb_s_at_this_save_time']:.2f} GB/s from the {summary['world_size']} ranks")
    return out
