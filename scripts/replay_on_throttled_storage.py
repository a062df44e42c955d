"""Issue 22's comparison that looks at storage, not compute: a measured emulated run and its
DLIO replays (generic, reader plugin; on DLIO 2.0.0, and with generic-3.0 / plugin-3.0 on 3.0.x),
all reading from one loop device whose reads a cgroup holds to a chosen rate. Root only.

    .venv/bin/python scripts/replay_on_throttled_storage.py [--benchmark flux ...] [--steps N]
        [--ranks 1] [--readers generic plugin generic-3.0 plugin-3.0] [--out DIR] [--keep-reclaim]

Per benchmark (its read limit, step time, batch and workers from SETTINGS, or the flags):
1. an ext4 file system on a loop device (storage.backends.throttle.ThrottledStorage);
2. the benchmark's debug dataset written there by a 2-step emulated run outside the cgroup;
3. the measured emulated run inside the cgroup (it evicts its dataset first) -> load_profile.json;
4. `export` of that run, then each replay run by this script's `_replay` entry inside the cgroup,
   with DLIO's work dir on the mount: a before_train hook evicts DLIO's data (flushed first) and
   snapshots the loop device's /proc/diskstats; a second snapshot is taken when replay() returns;
5. a table per benchmark (measured / generic / plugin) and results.json under --out.

The host's proactive reclaim (DAMON pageout, storage.host.proactive_reclaim) is paused for the
runs and switched back on after, SIGTERM included (--keep-reclaim leaves it on): it drops pages
nobody touched for a minute, and a run that reads a page again later reads it from storage twice.

Device MB/s: measured, block_device.loop_read_bytes / totals.wall_s of the load profile (what the
device served until the last step ended, over the training loop's time; read_bytes also holds what
the loader fetched ahead after it); DLIO, the diskstats delta from the hook to the end of DLIO's
training epoch (a thread samples the counters every 20 ms; per_epoch_stats.json stamps the epoch)
over the epoch's time, and all bytes to replay()'s return over the time from the hook.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage.host.proactive_reclaim import paused_for_storage_runs  # noqa: E402
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason  # noqa: E402

MIB = 1 << 20
# benchmark -> (debug gin config, extra bindings, DataConfig name, read MiB/s, s per step, batch, workers,
# steps). Read limits that make each run wait for storage: FLUX stalls at each new shard (5.7 MB),
# RetinaNet's JPEGs take longer to read than a step, DLRM's first step faults in its history pool
# (17 s at 5 MiB/s; at 1 MiB/s it takes ~85 s, longer than the 60 s after which this host's DAMON
# reclaim drops an untouched page, which is why main() pauses it).
SETTINGS = {
    "flux": (REPO / "flux" / "configs" / "debug.gin", ['flux.DataConfig.dataset = "synthetic-small-seed0"'],
             "flux.DataConfig", 1.0, 0.4, 16, 2, 64),
    "retinanet": (REPO / "retinanet" / "configs" / "debug.gin", [], "retinanet.DataConfig", 0.15, 0.4, 8, 2, 48),
    "recommendation_v4": (REPO / "recommendation_v4" / "configs" / "debug.gin", [], "recommendation_v4.DataConfig",
                          5.0, 0.4, 128, 1, 24),
}


# ---------------------------------------------------------------------------- inside the cgroup: one replay

def _dlio_waits(train_out: Path, *, warmup: bool = False) -> list[float]:
    """DLIO's per-step `load` times after the profiler's warm-up steps (with them: warmup=True), all
    ranks one after the other (as dlio_data_wait)."""
    from storage.load_profile.profiler import WARMUP_STEPS

    skip = 0 if warmup else WARMUP_STEPS
    waits: list[float] = []
    for path in sorted(train_out.glob("*_output.json")):
        try:
            rank = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for epoch in rank.values():
            if isinstance(epoch, dict):
                steps = [x for block in (epoch.get("load") or {}).values() if isinstance(block, list) for x in block]
                waits.extend(float(x) for x in steps[skip:])
    return waits


def _epoch_seconds(train_out: Path) -> float | None:
    """DLIO's training time: the sum of its epochs' durations in per_epoch_stats.json (rank 0's), where recorded."""
    try:
        epochs = json.loads((train_out / "per_epoch_stats.json").read_text())
    except (OSError, ValueError):
        return None
    total = 0.0
    for stats in (epochs if isinstance(epochs, dict) else {}).values():
        if isinstance(stats, dict) and isinstance(stats.get("duration"), (int, float, str)):
            try:
                total += float(stats["duration"])
            except ValueError:
                return None
    return total or None


class _DiskstatsSampler:
    """The data device's read counters every `period` s in a thread, stamped with time.time(): DLIO
    stamps its epochs with the wall clock, so the reads within an epoch can be cut out afterwards."""

    def __init__(self, device: str, period: float = 0.02) -> None:
        import threading

        from storage.load_profile.block_device import diskstats

        self._diskstats, self.device, self.period = diskstats, device, period
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now, counters = time.time(), self._diskstats(self.device)
            if counters is not None:
                self.samples.append((now, counters[0], counters[1]))
            self._stop.wait(self.period)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, t: float) -> tuple[int, int] | None:
        """(reads, read bytes) as of time t: the last sample taken at or before it."""
        before = [s for s in self.samples if s[0] <= t]
        return (before[-1][1], before[-1][2]) if before else None


def _epoch_window(train_out: Path) -> tuple[float, float] | None:
    """(start, end) of DLIO's first training epoch as time.time() values (per_epoch_stats.json)."""
    from datetime import datetime

    try:
        epoch = next(iter(json.loads((train_out / "per_epoch_stats.json").read_text()).values()))
        fmt = "%Y-%m-%dT%H:%M:%S.%f"  # DLIO's LOG_TS_FORMAT, local time
        return datetime.strptime(epoch["start"], fmt).timestamp(), datetime.strptime(epoch["end"], fmt).timestamp()
    except (OSError, ValueError, StopIteration, KeyError, TypeError, AttributeError):
        return None


READERS = ("generic", "plugin", "generic-3.0", "plugin-3.0", "storage-3.0")


def _reader(name: str) -> tuple[str, str]:
    """'plugin-3.0' -> ('plugin', '3.0'); 'generic' -> ('generic', '2.0.0')."""
    base, _, version = name.partition("-")
    return base, version or "2.0.0"


def _replay_entry(argv: list[str]) -> int:
    """`_replay RUN_DIR --reader R --work-dir W --result F`: run inside the cgroup (wrap()), so DLIO and
    its loader workers are throttled."""
    from storage.host.page_cache import evict
    from storage.load_profile.block_device import diskstats, find_block_device
    from storage.dlio.replay.choice import replay

    parser = argparse.ArgumentParser(prog="replay_on_throttled_storage.py _replay")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--reader", required=True, choices=READERS)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    device, why = find_block_device(args.work_dir)
    if device is None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    state: dict[str, Any] = {}

    def before_train(data: Path) -> None:
        eviction = evict([data], flush=True)
        state["eviction"] = {"files": eviction.files, "bytes": eviction.bytes,
                             "resident_before_bytes": eviction.resident_before_bytes,
                             "resident_after_bytes": eviction.resident_after_bytes}
        state["before"] = diskstats(device)
        state["t0"] = time.monotonic()
        state["sampler"] = _DiskstatsSampler(device)
        state["sampler"].start()
        print(f"[throttled] evicted {eviction.files} files ({eviction.bytes / 1e6:,.1f} MB), resident after "
              f"{eviction.resident_after_bytes}; {device} at {state['before']}", flush=True)

    base, dlio = _reader(args.reader)
    result = replay(args.run_dir, work_dir=args.work_dir, keep_data=True, before_train=before_train,
                    reader=base, dlio=dlio)
    after, t1 = diskstats(device), time.monotonic()
    sampler = state.get("sampler")
    if sampler is not None:
        sampler.stop()
    shutil.rmtree(args.work_dir / "data", ignore_errors=True)
    train_out = args.work_dir / "train"
    # DLIO's per-rank step records outlive the throttled device: kept beside the result, for a per-rank look
    kept = args.result.with_name(args.result.stem + "_dlio_output")
    kept.mkdir(parents=True, exist_ok=True)
    for record in train_out.glob("*_output.json"):
        shutil.copy2(record, kept / record.name)
    waits = _dlio_waits(train_out)
    before = state.get("before")
    reads, read_bytes = (after[0] - before[0], after[1] - before[1]) if before and after else (None, None)
    # what the device served within DLIO's training epoch (as the measured side counts until its last step)
    window = _epoch_window(train_out)
    epoch_reads = epoch_bytes = None
    if window is not None and sampler is not None and before is not None:
        end = sampler.at(window[1])
        if end is not None:
            epoch_reads, epoch_bytes = end[0] - before[0], end[1] - before[1]
    out: dict[str, Any] = {
        "reader": args.reader, "device": device, "eviction": state.get("eviction"),
        "device_reads": reads, "device_read_bytes": read_bytes,
        "epoch_device_reads": epoch_reads, "epoch_device_read_bytes": epoch_bytes,
        "data_wait_series_s": _dlio_waits(train_out, warmup=True),
        "hook_to_return_s": t1 - state["t0"] if "t0" in state else None,
        "dlio_train_s": result.seconds.get("train"), "epoch_s": _epoch_seconds(train_out),
        "data_wait_s": {"mean": float(np.mean(waits)), "p50": float(np.percentile(waits, 50)),
                        "p90": float(np.percentile(waits, 90)), "steps": len(waits)} if waits else None,
        "replayed": result.replayed, "measured": result.measured, "replayed_steps": result.replayed_steps,
        "bytes_per_sample": result.bytes_per_sample, "commands": result.commands,
    }
    if base == "plugin":
        counted = result.reads["plugin"]
        out["plugin_reads"] = {k: counted.get(k) for k in ("reads", "bytes", "requested_bytes", "reads_per_sample",
                                                           "bytes_per_sample", "mean_size", "sequential_fraction",
                                                           "files_opened", "samples")}
        out["histogram"] = result.reads["histogram"]
    args.result.write_text(json.dumps(out, indent=2) + "\n")
    return 0


# ---------------------------------------------------------------------------- outside: the runs

def _gin_flags(benchmark: str, data_root: Path, args: argparse.Namespace) -> list[str]:
    config, extra, data, *_ = SETTINGS[benchmark]
    bindings = [f'{data}.data_root = "{data_root}"', f"{data}.num_workers = {args.workers}", *extra,
                f"storage.Emulation.seconds_per_step = {args.seconds_per_step}",
                f"storage.Emulation.batch_per_accelerator = {args.batch}", *args.gin_bindings]
    flags = ["--gin_config", str(config)]
    for binding in bindings:
        flags += ["--gin_bindings", binding]
    return flags


def _trainer(benchmark: str, ranks: int, flags: list[str], output_root: Path, run_name: str, steps: int) -> list[str]:
    launcher = [sys.executable] if ranks == 1 else \
        [sys.executable, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={ranks}"]
    return [*launcher, "-m", f"{benchmark}.train", *flags,
            "--gin_bindings", 'common.RunConfig.emulate = "b200"',
            "--gin_bindings", f'common.RunConfig.output_root = "{output_root}"',
            "--gin_bindings", f'common.RunConfig.run_name = "{run_name}"',
            "--gin_bindings", f"common.RunConfig.max_steps = {steps}"]


def _run(cmd: list[str], log: Path, what: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"[throttled] {what}: {' '.join(cmd[:8])} ... (log {log})", flush=True)
    started = time.monotonic()
    with log.open("w") as sink:
        code = subprocess.run(cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env).returncode
    print(f"[throttled] {what} exited {code} after {time.monotonic() - started:.0f} s", flush=True)
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"{what} failed (exit {code}):\n" + "\n".join(tail))


def _all_steps_wait_mean(profile: dict[str, Any]) -> float | None:
    """The data wait per step over every step of every rank, warm-up steps included (as the DLIO side's
    all-ranks series): each rank's steady mean x count plus its warm-up waits. None where a rank lacks them."""
    total, steps = 0.0, 0
    for rank in profile.get("ranks") or []:
        steady, warmup = rank.get("data_wait_s") or {}, (rank.get("warmup") or {}).get("data_wait_s")
        if warmup is None or "count" not in steady:
            return None
        total += float(steady.get("mean") or 0.0) * int(steady["count"]) + float(sum(warmup))
        steps += int(steady["count"]) + len(warmup)
    return total / steps if steps else None


def _measured(run_dir: Path) -> dict[str, Any]:
    profile = json.loads((run_dir / "load_profile.json").read_text())
    totals, block, reads = profile["totals"], profile.get("block_device") or {}, profile.get("reads") or {}
    wall = totals.get("wall_s")
    read_bytes = block.get("read_bytes")
    loop_bytes = block.get("loop_read_bytes", read_bytes)  # served until the last step ended
    return {
        "data_wait_all_mean_s": _all_steps_wait_mean(profile),
        "data_wait_s": totals.get("data_wait_s"), "au": totals.get("au"), "samples_per_s": totals.get("samples_per_s"),
        "mb_per_s": totals.get("mb_per_s"), "wall_s": wall, "steps": totals.get("steps"),
        "device_read_bytes": read_bytes, "device_reads": block.get("reads"),
        "device_mb_per_s": loop_bytes / wall / 1e6 if loop_bytes is not None and wall else None,
        "device_loop_read_bytes": loop_bytes,
        "reads": reads.get("count"), "mean_read_bytes": reads.get("mean_size"),
        "bytes_per_sample": totals.get("bytes_per_sample"),
    }


def _replayed(path: Path, samples: float | None) -> dict[str, Any]:
    r = json.loads(path.read_text())
    seconds = r["epoch_s"] or r["hook_to_return_s"]
    rb = r["device_read_bytes"]
    # until the epoch ended, over the epoch (the measured side: until the last step, over the loop)
    eb = r.get("epoch_device_read_bytes") if r["epoch_s"] else None
    eb = rb if eb is None else eb
    series = r.get("data_wait_series_s") or []
    row = {
        "data_wait_all_mean_s": float(np.mean(series)) if series else None,
        "data_wait_s": r["data_wait_s"], "au": r["replayed"]["au"], "samples_per_s": r["replayed"]["samples_per_s"],
        "mb_per_s": r["replayed"]["mb_per_s"], "wall_s": seconds, "device_read_bytes": rb,
        "device_reads": r["device_reads"],
        "device_mb_per_s": eb / seconds / 1e6 if eb is not None and seconds else None,
        "device_loop_read_bytes": eb,
        "device_mb_per_s_hook_to_return": rb / r["hook_to_return_s"] / 1e6 if rb is not None and r["hook_to_return_s"]
        else None,
        "bytes_per_sample": r["bytes_per_sample"], "raw": r,
    }
    if _reader(r["reader"])[0] == "plugin":
        p = r["plugin_reads"]
        row["reads"], row["mean_read_bytes"] = p.get("reads"), p.get("mean_size")
    else:  # one read of one record per sample
        row["reads"] = samples
        row["mean_read_bytes"] = r["bytes_per_sample"]
    return row


def _fmt(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _err(replayed: Any, measured: Any) -> float | None:
    return replayed / measured - 1 if isinstance(replayed, (int, float)) and measured else None


def _table(benchmark: str, limit: float, rows: dict[str, dict[str, Any]]) -> str:
    cols = [c for c in ("measured", *READERS) if c in rows]
    lines = [f"{benchmark}: read limit {limit} MiB/s", f"{'':22}" + "".join(f"{c:>14}" for c in cols)]

    def line(label: str, get, fmt: str) -> None:
        lines.append(f"{label:22}" + "".join(f"{_fmt(get(rows[c]), fmt):>14}" for c in cols))

    for key in ("mean", "p50", "p90"):
        line(f"data wait {key} (ms)", lambda r, k=key: None if not r["data_wait_s"] else r["data_wait_s"][k] * 1e3,
             "{:.1f}")
    line("wait mean, all steps", lambda r: None if r.get("data_wait_all_mean_s") is None
         else r["data_wait_all_mean_s"] * 1e3, "{:.1f}")
    line("device MB/s", lambda r: r["device_mb_per_s"], "{:.3f}")
    line("device MB in the loop", lambda r: None if r["device_loop_read_bytes"] is None
         else r["device_loop_read_bytes"] / 1e6, "{:.2f}")
    line("device MB in all", lambda r: None if r["device_read_bytes"] is None else r["device_read_bytes"] / 1e6,
         "{:.2f}")
    line("device reads", lambda r: r["device_reads"], "{:d}")
    line("time (s)", lambda r: r["wall_s"], "{:.1f}")
    line("read count", lambda r: r["reads"], "{:,.0f}")
    line("mean read (B)", lambda r: r["mean_read_bytes"], "{:,.0f}")
    line("samples/s", lambda r: r["samples_per_s"], "{:.2f}")
    line("AU", lambda r: r["au"], "{:.4f}")
    m = rows["measured"]
    for c in cols[1:]:
        wait = _err((rows[c]["data_wait_s"] or {}).get("mean"), (m["data_wait_s"] or {}).get("mean"))
        mbps = _err(rows[c]["device_mb_per_s"], m["device_mb_per_s"])
        wait_all = _err(rows[c].get("data_wait_all_mean_s"), m.get("data_wait_all_mean_s"))
        lines.append(f"error {c:11}: data wait mean {_fmt(wait, '{:+.1%}')} (all steps {_fmt(wait_all, '{:+.1%}')}), "
                     f"device MB/s {_fmt(mbps, '{:+.1%}')}")
    return "\n".join(lines)


def _one(benchmark: str, ranks: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from storage.dlio.export.workloads import export

    limit = args.read_mbps or SETTINGS[benchmark][3]
    work = out / f"{benchmark}_r{ranks}"
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    with ThrottledStorage(work / "disk", size_mb=args.size_mb, read_bps=int(limit * MIB), read_iops=None) as disk:
        flags = _gin_flags(benchmark, disk.mount, args)
        _run(_trainer(benchmark, 1, flags, work / "dataset_run", "write", 2), work / "dataset.log",
             f"{benchmark}: writing the dataset on {disk.device} (outside the cgroup)")
        runs = work / "runs"
        _run(disk.wrap(_trainer(benchmark, ranks, flags, runs, f"n{ranks}", args.steps)), work / "measured.log",
             f"{benchmark}: measured run, {ranks} rank(s), in the cgroup ({limit} MiB/s)")
        run_dir = runs / benchmark / f"n{ranks}"
        rows["measured"] = _measured(run_dir)
        export(run_dir)
        for reader in args.readers:
            result = work / f"replay_{reader}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "_replay", str(run_dir), "--reader", reader,
                   "--work-dir", str(disk.mount / f"dlio-{reader}"), "--result", str(result)]
            try:
                _run(disk.wrap(cmd), work / f"replay_{reader}.log", f"{benchmark}: DLIO {reader} replay in the cgroup")
            except RuntimeError as error:
                print(f"[throttled] {error}", flush=True)
                continue
            samples = None
            if _reader(reader)[0] == "generic":  # one read per sample DLIO trained on
                r = json.loads(result.read_text())
                batch = None
                try:
                    import yaml
                    wl = next((run_dir / "dlio" / "dlio-2.0.0" / "workload").glob("*.yaml"))
                    batch = yaml.safe_load(wl.read_text())["reader"]["batch_size"]
                except (StopIteration, KeyError, OSError):
                    pass
                samples = r["replayed_steps"] * batch * ranks if batch else None
            rows[reader] = _replayed(result, samples)
    table = _table(benchmark, limit, rows)
    print(table, flush=True)
    return {"benchmark": benchmark, "ranks": ranks, "read_mib_per_s": limit, "run_dir": str(run_dir),
            "rows": rows, "table": table}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", action="append", choices=sorted(SETTINGS), default=None,
                        help="repeatable; default all three")
    parser.add_argument("--read-mbps", type=float, default=None, help="default per benchmark (SETTINGS)")
    parser.add_argument("--seconds-per-step", type=float, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="default per benchmark (SETTINGS)")
    parser.add_argument("--ranks", type=int, action="append", default=None, help="repeatable; default 1")
    parser.add_argument("--readers", nargs="+", choices=READERS, default=["generic", "plugin"],
                        help="generic and plugin on DLIO 2.0.0; generic-3.0, plugin-3.0 and storage-3.0 (the export's "
                             "MLPerf Storage workload itself) on DLIO 3.0.x "
                             "(.venv-dlio3, built from a local copy: storage/dlio/environment/setup_env_3.sh)")
    parser.add_argument("--size-mb", type=int, default=1536)
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep-reclaim", action="store_true",
                        help="leave the host's proactive reclaim (DAMON pageout) running; by default it is paused "
                             "for the runs and switched back on after")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_replay"]:
        return _replay_entry(argv[1:])
    args = _parser().parse_args(argv)
    reason = throttle_unavailable_reason()
    if reason:
        print(f"error: no throttled storage here: {reason}", file=sys.stderr)
        return 2
    out = (args.out or REPO / "runs" / "replay_throttled" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # SIGTERM (timeout, Slurm) unwinds like an error: the loop device, the cgroup and the host's reclaim
    # are put back by the context managers below
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with paused_for_storage_runs("[throttled]", keep=args.keep_reclaim) as reclaim:
        results = _all(args, out, reclaim=reclaim)
    print(f"[throttled] {out / 'results.json'}", flush=True)
    for r in results:
        if "table" in r:
            print("\n" + r["table"])
    return 0


def _all(args: argparse.Namespace, out: Path, *, reclaim: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for benchmark in args.benchmark or list(SETTINGS):
        _, _, _, _, step_s, batch, workers, steps = SETTINGS[benchmark]
        bench_args = argparse.Namespace(**{**vars(args), "seconds_per_step": args.seconds_per_step or step_s,
                                           "batch": args.batch or batch, "workers": args.workers or workers,
                                           "steps": args.steps or steps})
        for ranks in args.ranks or [1]:
            try:
                results.append({**_one(benchmark, ranks, bench_args, out), "proactive_reclaim": reclaim})
            except Exception as error:  # one workload's failure must not lose the others' numbers
                print(f"[throttled] {benchmark} with {ranks} rank(s) failed: {error}", flush=True)
                results.append({"benchmark": benchmark, "ranks": ranks, "error": str(error)})
            (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


if __name__ == "__main__":
    raise SystemExit(main())
