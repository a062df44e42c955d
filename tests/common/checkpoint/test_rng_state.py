import json
import random

import numpy as np
import pytest
import torch

from common.checkpoint.rng_state import capture_generator, capture_rng_state, restore_generator, restore_rng_state


def draws() -> dict:
    return {
        "python": [random.random() for _ in range(3)] + [random.gauss(0.0, 1.0)],
        "numpy": np.random.rand(3).tolist() + [float(np.random.standard_normal())],
        "torch": torch.rand(3).tolist() + torch.randn(2).tolist(),
    }


def test_round_trip_replays_every_generator():
    random.gauss(0.0, 1.0)  # leaves a cached gaussian in python's state
    np.random.standard_normal()  # and one in numpy's legacy state
    state = json.loads(json.dumps(capture_rng_state()))  # what goes to disk is plain JSON
    expected = draws()
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    assert draws() != expected
    restore_rng_state(state)
    assert draws() == expected


SCRAMBLERS = {
    "python": lambda: random.seed(7),
    "numpy": lambda: np.random.seed(7),
    "torch": lambda: torch.manual_seed(7),
}


@pytest.mark.parametrize("which", sorted(SCRAMBLERS))
def test_each_generator_is_restored_on_its_own(which):
    state = capture_rng_state()
    expected = draws()[which]
    restore_rng_state(state)
    SCRAMBLERS[which]()  # only this generator moves away from the captured state
    assert draws()[which] != expected
    restore_rng_state(state)
    assert draws()[which] == expected


def test_private_torch_generator():
    generator = torch.Generator().manual_seed(5)
    torch.rand(4, generator=generator)
    saved = capture_generator(generator)
    expected = torch.rand(4, generator=generator)
    restore_generator(generator, saved)
    assert torch.equal(torch.rand(4, generator=generator), expected)


def test_missing_part_is_a_clear_error():
    state = capture_rng_state()
    del state["numpy"]
    with pytest.raises(ValueError, match="missing \\['numpy'\\]"):
        restore_rng_state(state)


def test_malformed_state_is_a_clear_error():
    state = capture_rng_state()
    state["torch_cpu"] = "not base64!"
    with pytest.raises(ValueError, match="RNG state is malformed"):
        restore_rng_state(state)
