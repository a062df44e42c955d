"""What a run trains, recorded in each checkpoint, and the check a resume makes against it.

A resumed run must train exactly what the checkpointed run would have: the sample order and
every random stream derive from the seed and the global batch, the data from the dataset, the
state from the model and the ranks. The identity is binding -> value: the lifecycle's seed and
world size, the training set's size, and what each benchmark adds (its global batch, dataset,
flavor, overrides). A relaunch with the same checkpoint path:

- takes the checkpoint's seed when SEED (common.RunConfig.seed) is not given or negative (a
  negative one would draw a new one), and says so; refuses one that is given and differs;
- refuses any other difference with one line naming the binding and both values (exit 2); a
  world size a task can adapt its checkpoint to (DLRM-HSTU's resharding) is said, not refused;
- goes on without a check, saying so, from a checkpoint written before identities were recorded.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from common.config.checks import ConfigError, binding_name

SEED = "common.RunConfig.seed"
WORLD_SIZE = "world size (ranks)"
TRAIN_SAMPLES = "training samples (the dataset's)"


def _refusal(key: str, saved: Any, now: Any, where: str) -> ConfigError:
    return ConfigError(f"{key}: {where} was trained with {saved!r}, this launch has {now!r}; a resume trains what "
                       "the checkpointed run would: relaunch with its setting, or give another CKPT_PATH")


def resumed_seed(saved: Mapping[str, Any], *, requested: int, given: bool, where: str,
                 resolve: Callable[[int], int]) -> tuple[int, str]:
    """(the seed a resume trains with, the line that says where it comes from)."""
    if SEED not in saved:
        seed = resolve(requested)
        return seed, (f"[identity] {where} records no run identity (written before they were recorded): the seed "
                      f"{seed}, batch, dataset and model of this launch are not checked against it")
    recorded = int(saved[SEED])
    if given and requested >= 0 and requested != recorded:
        raise _refusal(f"{SEED} (SEED)", recorded, requested, where)
    how = "as given" if given and requested == recorded else \
        "SEED not given" if not given else f"SEED={requested} would draw a new one"
    return recorded, f"[identity] seed {recorded} from {where} ({how})"


def check_identity(saved: Mapping[str, Any], now: Mapping[str, Any], *, where: str,
                   adapts_world_size: bool) -> list[str]:
    """Lines to say about legitimate differences; a ConfigError for the first one that is not.
    Keys only one side has are not compared (a checkpoint from an older version records fewer)."""
    said = []
    for key in sorted(set(saved) & set(now)):
        if saved[key] == now[key]:
            continue
        if key == WORLD_SIZE and adapts_world_size:
            said.append(f"[identity] world size {saved[key]} -> {now[key]}: the task adapts the checkpoint to this "
                        "world size (its sharded state is resharded on load)")
            continue
        raise _refusal(key, saved[key], now[key], where)
    return said


def config_identity(config: object, *fields: str) -> dict[str, Any]:
    """`fields` of a gin-configured dataclass as identity entries named by their binding."""
    return {binding_name(config, field): getattr(config, field) for field in fields}
