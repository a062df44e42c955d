"""Capture and restore every random number generator of this rank, as plain JSON.

A resumed run replays dropout masks, shuffles and sampled noise bit-for-bit only if each
rank gets back exactly the generator states it had when the checkpoint was taken. The
state is JSON (ints, floats, base64 for the torch byte states), so reading it back never
unpickles anything.

    state = capture_rng_state()          # dict, json.dumps-able
    ...                                  # draws advance the generators
    restore_rng_state(state)             # the same draws come out again

Covered: python ``random``, the numpy global generator, the torch CPU generator and, when
CUDA (or ROCm, which torch exposes as cuda) is initialised, every device generator.
``capture_generator`` / ``restore_generator`` do the same for a private
``torch.Generator`` (for example a sampler's).
"""

from __future__ import annotations

import base64
import random
import warnings
from typing import Any, Mapping

import numpy as np
import torch

RNG_FORMAT_VERSION = 1


def _bytes_tensor_to_text(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def _text_to_bytes_tensor(text: str) -> torch.Tensor:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()


def capture_generator(generator: torch.Generator) -> str:
    """The state of one ``torch.Generator`` as text."""
    return _bytes_tensor_to_text(generator.get_state())


def restore_generator(generator: torch.Generator, state: str) -> None:
    generator.set_state(_text_to_bytes_tensor(state))


def _capture_python() -> dict[str, Any]:
    version, internal, gauss_next = random.getstate()
    return {"version": version, "internal": list(internal), "gauss_next": gauss_next}


def _restore_python(state: Mapping[str, Any]) -> None:
    random.setstate((int(state["version"]), tuple(int(x) for x in state["internal"]), state["gauss_next"]))


def _capture_numpy() -> dict[str, Any]:
    state = np.random.get_state(legacy=False)
    if state["bit_generator"] != "MT19937":
        raise ValueError(f"numpy global generator is {state['bit_generator']}, expected MT19937")
    return {
        "key": [int(x) for x in state["state"]["key"]],
        "pos": int(state["state"]["pos"]),
        "has_gauss": int(state["has_gauss"]),
        "gauss": float(state["gauss"]),
    }


def _restore_numpy(state: Mapping[str, Any]) -> None:
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": np.asarray(state["key"], dtype=np.uint32), "pos": int(state["pos"])},
            "has_gauss": int(state["has_gauss"]),
            "gauss": float(state["gauss"]),
        }
    )


def capture_rng_state() -> dict[str, Any]:
    """Every generator of this process, as a JSON-serialisable dict."""
    state: dict[str, Any] = {
        "format_version": RNG_FORMAT_VERSION,
        "python": _capture_python(),
        "numpy": _capture_numpy(),
        "torch_cpu": _bytes_tensor_to_text(torch.get_rng_state()),
        "torch_cuda": None,
    }
    # Only read device generators that already exist: is_initialized() avoids creating a
    # CUDA context as a side effect of taking a checkpoint.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = [_bytes_tensor_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what ``capture_rng_state`` returned; a malformed state raises ValueError."""
    missing = [k for k in ("format_version", "python", "numpy", "torch_cpu") if k not in state]
    if missing:
        raise ValueError(f"RNG state is missing {missing}; it was not written by capture_rng_state()")
    if state["format_version"] != RNG_FORMAT_VERSION:
        raise ValueError(
            f"RNG state format_version {state['format_version']!r} is not {RNG_FORMAT_VERSION}"
        )
    try:
        _restore_python(state["python"])
        _restore_numpy(state["numpy"])
        torch.set_rng_state(_text_to_bytes_tensor(state["torch_cpu"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"RNG state is malformed: {error!r}") from error
    cuda_states = state.get("torch_cuda")
    if not cuda_states:
        return
    if not torch.cuda.is_available():
        warnings.warn("checkpoint holds CUDA RNG states but CUDA is not available: not restored")
        return
    if len(cuda_states) != torch.cuda.device_count():
        warnings.warn(
            f"checkpoint holds {len(cuda_states)} CUDA RNG states, this process sees "
            f"{torch.cuda.device_count()} devices: restoring the first "
            f"{min(len(cuda_states), torch.cuda.device_count())}"
        )
    for device_index, text in enumerate(cuda_states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(_text_to_bytes_tensor(text), device=device_index)
