"""Parameter counts of a FLUX.1 flavor, built on the meta device (no memory, about a second)."""

from __future__ import annotations

import dataclasses

import torch

from flux.model.flavors import get_flavor
from flux.model.model import FluxModel


@dataclasses.dataclass(frozen=True)
class ParamCount:
    double_block: int  # one block; all double blocks are the same size
    num_double_blocks: int
    single_block: int
    num_single_blocks: int
    embedders_and_final: int  # img_in, time_in, vector_in, txt_in and final_layer

    @property
    def total(self) -> int:
        return (
            self.double_block * self.num_double_blocks
            + self.single_block * self.num_single_blocks
            + self.embedders_and_final
        )


def _numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def count_parameters(flavor: str) -> ParamCount:
    with torch.device("meta"):
        model = FluxModel(get_flavor(flavor))
    blocks = [*model.double_blocks, *model.single_blocks]
    in_blocks = sum(_numel(block) for block in blocks)
    counts = ParamCount(
        double_block=_numel(model.double_blocks[0]) if len(model.double_blocks) else 0,
        num_double_blocks=len(model.double_blocks),
        single_block=_numel(model.single_blocks[0]) if len(model.single_blocks) else 0,
        num_single_blocks=len(model.single_blocks),
        embedders_and_final=_numel(model) - in_blocks,
    )
    assert counts.total == _numel(model), "blocks of one kind must all have the same size"
    return counts
