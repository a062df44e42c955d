"""common.data.preparation_lock: a second preparation of one dataset waits for the first, says so, and then
finds what the first made; a parent folder where no lock can be made does not stop a preparation."""

from __future__ import annotations

import threading
import time

from common.data.preparation_lock import lock_path, preparing


def test_a_second_preparation_waits_for_the_first_and_says_so(tmp_path):
    dataset = tmp_path / "flux" / "synthetic-tiny-seed0"
    events: list[str] = []
    said: list[str] = []
    entered = threading.Event()

    def first() -> None:
        with preparing(dataset, say=said.append):
            entered.set()
            events.append("first in")
            time.sleep(0.5)
            dataset.mkdir()  # what the first one made
            events.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    entered.wait(10)
    with preparing(dataset, say=said.append):
        events.append("second in")
        assert dataset.is_dir()
    thread.join()
    assert events == ["first in", "first out", "second in"]
    assert len(said) == 1 and said[0].startswith(f"[data] another process is preparing {dataset}"), said
    assert lock_path(dataset).is_file() and lock_path(dataset).parent == dataset.parent


def test_no_lock_where_none_can_be_made_and_the_preparation_goes_on(tmp_path):
    (tmp_path / "file").write_text("x")  # a parent that cannot hold a lock file (as a read-only mount cannot)
    ran: list[str] = []
    with preparing(tmp_path / "file" / "dataset", say=ran.append):
        ran.append("prepared")
    assert ran == ["prepared"]
