import pytest

from recommendation_v4.data import features as F
from recommendation_v4.parallel.sharding import ShardingConfig, ShardingConfigError, table_constraints

TABLES = list(F.TABLE_FEATURES)


def test_overrides_become_constraints():
    cfg = ShardingConfig(
        default_sharding_type="row_wise",
        sharding_overrides={"artist_id": "column_wise", "uid": "table_wise"},
        placement_overrides={"item_id": "uvm_caching"},
    )
    got = table_constraints(table_names=TABLES, config=cfg, device_type="cuda")
    assert got["artist_id"].sharding_types == ["column_wise"]
    assert got["uid"].sharding_types == ["table_wise"]
    assert got["album_id"].sharding_types == ["row_wise"]
    assert got["item_id"].compute_kernels == ["fused_uvm_caching"]
    assert got["album_id"].compute_kernels is None  # "auto": the planner chooses


def test_cpu_forces_the_fused_kernel():
    got = table_constraints(table_names=TABLES, config=ShardingConfig(), device_type="cpu")
    assert {tuple(c.compute_kernels) for c in got.values()} == {("fused",)}
    assert all(c.sharding_types is None for c in got.values())


@pytest.mark.parametrize(
    "cfg,message",
    [
        (ShardingConfig(sharding_overrides={"items": "row_wise"}), r"unknown table\(s\) \['items'\]"),
        (ShardingConfig(placement_overrides={"user": "hbm"}), r"placement_overrides names unknown table\(s\) \['user'\]"),
        (ShardingConfig(sharding_overrides={"uid": "diagonal"}), "table uid: unknown sharding type 'diagonal'"),
        (ShardingConfig(placement_overrides={"uid": "ssd"}), "table uid: unknown placement 'ssd'"),
        (ShardingConfig(sharding_overrides={"uid": "data_parallel"}), "data_parallel sharding of an EmbeddingCollection does not work on CPU"),
        (ShardingConfig(placement_overrides={"uid": "uvm"}), "placement 'uvm' needs a GPU"),
    ],
)
def test_bad_overrides_name_the_table_and_the_problem(cfg, message):
    with pytest.raises(ShardingConfigError, match=message):
        table_constraints(table_names=TABLES, config=cfg, device_type="cpu")
