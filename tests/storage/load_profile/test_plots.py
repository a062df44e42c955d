"""The load profile's plots: each panel draws what its title says, and no line hides another."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from storage.load_profile.plots import plot_throughput, write_plots  # noqa: E402
from tests.storage.load_profile.profiles import known_profile  # noqa: E402


def test_throughput_draws_samples_and_bytes_per_second_each_in_its_own_visible_axes():
    profile = known_profile()
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    plot_throughput(ax, profile)
    fig.canvas.draw()
    axes = [a for a in fig.axes if a.lines]
    assert len(axes) == 2 and ax not in fig.axes  # the panel's place holds two axes, one line each
    (samples_ax, bytes_ax) = sorted(axes, key=lambda a: -a.get_position().y0)
    rate, mb_s = samples_ax.lines[0].get_ydata(), bytes_ax.lines[0].get_ydata()
    np.testing.assert_allclose(mb_s, rate * profile["totals"]["bytes_per_sample"] / 1e6)
    assert "samples/s" in samples_ax.get_ylabel() and "MB/s" in bytes_ax.get_ylabel()
    # one above the other, not overlapping: neither line can be drawn behind the other
    assert samples_ax.get_position().y0 >= bytes_ax.get_position().y1
    assert samples_ax.lines[0].get_color() != bytes_ax.lines[0].get_color()
    for axis, values in ((samples_ax, rate), (bytes_ax, mb_s)):  # each line within its own axes' range
        low, high = axis.get_ylim()
        assert low == 0 and 0 < values.max() <= high
    assert samples_ax.get_shared_x_axes().joined(samples_ax, bytes_ax)
    plt.close(fig)


def test_write_plots_draws_every_panel_and_the_overview_as_pngs(tmp_path):
    written = write_plots(known_profile(), tmp_path)
    assert [p.name for p in written] == ["step_time.png", "record_sizes.png", "read_sizes.png", "throughput.png",
                                         "overview.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
