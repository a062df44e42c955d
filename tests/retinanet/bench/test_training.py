from __future__ import annotations

import pytest

from retinanet.bench.training import main, measure_training_images_per_s

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def test_measures_training_steps_of_the_tiny_flavor() -> None:
    result = measure_training_images_per_s(flavor_name="tiny", batch_size=2, num_steps=2, warmup_steps=1)
    assert result.images_per_s > 0
    assert result.images_per_s == pytest.approx(2 / result.seconds_per_step)
    assert (result.batch_size, result.num_steps, result.image_size, result.device) == (2, 2, 192, "cpu")
    assert "images/s" in result.summary()


def test_rejects_bad_arguments_and_runs_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        measure_training_images_per_s(batch_size=0)
    assert main(["--flavor", "tiny", "--batch-size", "1", "--steps", "1", "--warmup-steps", "0"]) == 0
    assert "retinanet training (tiny" in capsys.readouterr().out
