import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from common.run.preemption import PreemptionHandler, agree_at_step_boundary
from tests.trainers.trainer_process import torchrun

HERE = Path(__file__).parent


def test_real_sigterm_sets_the_flag_instead_of_killing():
    with PreemptionHandler() as handler:
        assert not handler.stop_requested(distributed=False)
        os.kill(os.getpid(), signal.SIGTERM)
        assert handler.stop_requested(distributed=False)
        assert handler.received_signal == signal.SIGTERM
        # a single process needs no process group for the collective variant
        assert handler.stop_requested(distributed=True)


def test_sigusr1_too_and_first_signal_wins():
    with PreemptionHandler() as handler:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert handler.received_signal == signal.SIGUSR1


def test_uninstall_restores_previous_handlers():
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        before = signal.getsignal(signal.SIGUSR1)
        handler = PreemptionHandler().install()
        assert signal.getsignal(signal.SIGUSR1) != before
        handler.uninstall()
        assert signal.getsignal(signal.SIGUSR1) is before
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("chain", [True, False])
def test_previous_python_handler_is_chained_only_when_asked(chain):
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with PreemptionHandler(chain_previous=chain) as handler:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert handler.stop_requested(distributed=False)
        assert seen == ([signal.SIGUSR1] if chain else [])
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_double_install_is_an_error():
    with PreemptionHandler() as handler:
        with pytest.raises(RuntimeError, match="twice"):
            handler.install()


def test_single_process_agreement_is_local():
    agreed = agree_at_step_boundary(stop_requested_locally=True, seconds_since_last_save=12.5)
    assert agreed.stop and agreed.seconds_since_last_save == 12.5


@pytest.mark.multiprocess
def test_signal_to_one_rank_stops_both_at_the_same_step(tmp_path):
    command = [*torchrun(2), str(HERE / "preemption_worker.py"), str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pid_file = tmp_path / "rank1.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), f"rank 1 never started:\n{process.communicate(timeout=30)[0]}"
        time.sleep(0.3)  # let both ranks run some steps first
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["stop_step"] is not None and rank0["stop_step"] > 1
    assert rank0["stop_step"] == rank1["stop_step"]
    assert rank0["local_flag"] is False and rank0["received_signal"] is None
    assert rank1["local_flag"] is True and rank1["received_signal"] == signal.SIGTERM
    assert rank0["agreed_flag"] is True and rank1["agreed_flag"] is True
    # rank 1's own clock says > 1000 s since its last save; everyone uses rank 0's
    assert rank0["last_clock"] == rank1["last_clock"] < 1000.0


def test_a_signal_noted_before_the_handler_is_taken_over_and_the_default_comes_back(monkeypatch):
    from common.run import early_signals

    monkeypatch.setattr(early_signals, "_received", None)
    before = {s: signal.getsignal(s) for s in early_signals.SIGNALS}
    try:
        for s in early_signals.SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        early_signals.catch_from_now_on()
        os.kill(os.getpid(), signal.SIGUSR1)  # as while a trainer still imports torch: noted, not fatal
        assert early_signals.received() == signal.SIGUSR1
        with PreemptionHandler() as handler:
            assert handler.stop_requested(distributed=False) and handler.received_signal == signal.SIGUSR1
        assert all(signal.getsignal(s) == signal.SIG_DFL for s in early_signals.SIGNALS)  # not the early note
    finally:
        for s, h in before.items():
            signal.signal(s, h)
