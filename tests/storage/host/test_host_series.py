"""A host's series: its counters read from the kernel's files, its rates over each interval."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from storage.host.host_series import HostSeries, lustre_read_bytes, net_bytes, nfs_read_bytes, process_tree

MOUNTSTATS = """device rootfs mounted on / with fstype rootfs
device srv:/export mounted on /mnt/nfs with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2
\tbytes:\t1000\t20\t300\t0\t5000\t40\t3\t0
device other:/x mounted on /mnt/b with fstype nfs statvers=1.1
\tbytes:\t10\t0\t0\t0\t700\t0\t1\t0
device /dev/sda1 mounted on /data with fstype ext4
"""


def test_nfs_counts_what_every_nfs_mount_fetched_from_its_server(tmp_path):
    path = tmp_path / "mountstats"
    path.write_text(MOUNTSTATS)
    assert nfs_read_bytes(path) == 5700
    path.write_text("device /dev/sda1 mounted on / with fstype ext4\n")
    assert nfs_read_bytes(path) is None  # no NFS mount: unknown, not 0


def test_lustre_reads_the_sum_of_read_bytes(tmp_path):
    stats = tmp_path / "fs-ffff" / "stats"
    stats.parent.mkdir()
    stats.write_text("snapshot_time 1.0 secs.usecs\nread_bytes 12 samples [bytes] 4096 1048576 7340032\n")
    assert lustre_read_bytes([str(tmp_path / "*" / "stats")]) == 7340032
    assert lustre_read_bytes([str(tmp_path / "none" / "*")]) is None


def test_the_series_sees_a_child_read_and_keeps_its_bytes_after_it_exits(tmp_path):
    # (what a process reads after the last sample before it exits is lost: loader workers live for the run)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(8 << 20))
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(0.5); open({str(data)!r}, 'rb').read(); time.sleep(0.6)"])
    series = HostSeries(host="h", interval_s=0.2, pids=lambda: [os.getpid()]).start()
    assert child.pid in process_tree([os.getpid()])
    child.wait()
    time.sleep(0.3)
    out = series.stop()
    assert out["host"] == "h" and len(out["samples"]) >= 3
    assert out["totals"]["asked_bytes"] >= 8 << 20  # the child's read, counted although it has exited
    sample = out["samples"][-1]
    assert 0 <= sample["cpu_busy"] <= 1 and sample["mem_used_bytes"] > 0
    rx, tx = net_bytes()
    assert rx >= 0 and tx >= 0
