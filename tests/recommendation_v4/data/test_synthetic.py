from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.data import generation
from recommendation_v4.data import layout, schema, synthetic, synthetic_world
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.preprocess import ensure_processed, stale_reason
from tests.recommendation_v4.conftest import TINY_SIZE


def _all_files(directory: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_events(tiny_dataset_dir: pathlib.Path) -> dict[str, np.ndarray]:
    table = pq.read_table(layout.multi_event_path(tiny_dataset_dir, TINY_SIZE))
    columns = {name: table.column(name).to_numpy(zero_copy_only=False) for name in
               ("uid", "timestamp", "item_id", "is_organic")}
    columns["event_type"] = np.asarray(table.column("event_type").to_pylist())
    for name in ("played_ratio_pct", "track_length_seconds"):
        column = table.column(name)
        columns[name + "_valid"] = column.is_valid().to_numpy(zero_copy_only=False)
        columns[name] = column.fill_null(0).to_numpy().astype(np.int64)
    return columns


def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path: pathlib.Path) -> None:
    first = synthetic.generate(tmp_path / "a", size="tiny", seed=7)
    second = synthetic.generate(tmp_path / "b", size="tiny", seed=7)
    third = synthetic.generate(tmp_path / "c", size="tiny", seed=8)
    files_first, files_second = _all_files(first), _all_files(second)
    assert set(files_first) == {
        "raw/tiny/multi_event.parquet", "shared_metadata/album_item_mapping.parquet",
        "shared_metadata/artist_item_mapping.parquet",
        "synthetic_truth/coefficients.json", "synthetic_truth/item_factors.npy", "synthetic_truth/item_quality.npy",
        "synthetic_truth/user_bias.npy", "synthetic_truth/user_factors.npy",
        "generation.json",  # how it was generated (common.data.generation); the parts are gone
    }
    assert files_first == files_second
    files_third = _all_files(third)
    for name in ("raw/tiny/multi_event.parquet", "shared_metadata/album_item_mapping.parquet"):
        assert files_first[name] != files_third[name]


def test_exact_raw_schema(tiny_dataset_dir: pathlib.Path) -> None:
    metadata = pathlib.Path(layout.shared_metadata_dir(tiny_dataset_dir))
    events = pq.ParquetFile(layout.multi_event_path(tiny_dataset_dir, TINY_SIZE)).schema_arrow
    assert events.names == ["uid", "timestamp", "item_id", "is_organic", "played_ratio_pct",
                            "track_length_seconds", "event_type"]
    expected = {"uid": pa.uint32(), "timestamp": pa.uint32(), "item_id": pa.uint32(), "is_organic": pa.uint8(),
                "played_ratio_pct": pa.uint16(), "track_length_seconds": pa.uint32()}
    for name, dtype in expected.items():
        assert events.field(name).type == dtype, name
    assert pa.types.is_dictionary(events.field("event_type").type)
    assert events.field("event_type").type.index_type == pa.uint32()
    assert [f.name for f in events if f.nullable] == ["played_ratio_pct", "track_length_seconds"]
    assert pq.ParquetFile(metadata / layout.ALBUM_MAPPING_FILE).schema_arrow.names == ["album_id", "item_id"]
    assert pq.ParquetFile(metadata / layout.ARTIST_MAPPING_FILE).schema_arrow.names == ["artist_id", "item_id"]
    schema.validate_raw_dataset(tiny_dataset_dir, TINY_SIZE)


def test_listen_only_columns_are_null_exactly_for_non_listens(tiny_events: dict[str, np.ndarray]) -> None:
    is_listen = tiny_events["event_type"] == "listen"
    assert np.array_equal(tiny_events["played_ratio_pct_valid"], is_listen)
    assert np.array_equal(tiny_events["track_length_seconds_valid"], is_listen)
    assert tiny_events["track_length_seconds"][is_listen].min() >= 30


def test_event_type_mix(tiny_events: dict[str, np.ndarray]) -> None:
    kinds, counts = np.unique(tiny_events["event_type"], return_counts=True)
    share = dict(zip(kinds.tolist(), (counts / counts.sum()).tolist()))
    assert set(share) == set(schema.EVENT_TYPE_NAMES)
    assert share["listen"] > 0.9
    assert 0.01 < share["like"] < 0.06
    for rare in ("dislike", "unlike", "undislike"):
        assert share[rare] < 0.01, rare


def test_played_ratio_is_bimodal_with_rewinds(tiny_events: dict[str, np.ndarray]) -> None:
    played = tiny_events["played_ratio_pct"][tiny_events["event_type"] == "listen"]
    assert 0.4 < (played >= 50).mean() < 0.7
    assert (played <= 20).mean() > 0.2
    assert ((played >= 90) & (played <= 100)).mean() > 0.25
    assert 0.01 < (played > 100).mean() < 0.1


def test_item_popularity_is_heavy_tailed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pop"
    synthetic.generate(path, size="tiny", seed=3)
    counts = np.bincount(pq.read_table(layout.multi_event_path(path, TINY_SIZE),
                                       columns=["item_id"]).column(0).to_numpy())
    counts = np.sort(counts[counts > 0])[::-1]
    top = counts[: max(1, counts.size // 20)].sum() / counts.sum()
    assert top > 0.25  # the top 5 % of tracks take far more than 5 % of the plays
    ranks = np.arange(1, counts.size + 1)
    head = slice(0, counts.size // 2)
    slope = np.polyfit(np.log(ranks[head]), np.log(counts[head]), 1)[0]
    assert -1.6 < slope < -0.4


def test_user_activity_is_skewed(tiny_events: dict[str, np.ndarray]) -> None:
    per_user = np.bincount(tiny_events["uid"])
    assert per_user.max() > 3 * np.median(per_user)


def test_timestamps_are_binned_sorted_and_sessions_are_separated(tiny_events: dict[str, np.ndarray]) -> None:
    uid, ts = tiny_events["uid"].astype(np.int64), tiny_events["timestamp"].astype(np.int64)
    assert np.all(ts % schema.TIMESTAMP_BIN_SECONDS == 0)
    assert ts.max() < synthetic.get_size("tiny").num_days * synthetic_world.DAY_SECONDS
    same_user = np.diff(uid) == 0
    assert np.all(np.diff(uid) >= 0)
    gaps = np.diff(ts)[same_user]
    assert np.all(gaps >= 0)
    listen = tiny_events["event_type"] == "listen"
    listen_gaps = np.diff(ts[listen])[np.diff(uid[listen]) == 0]
    # Inside a session consecutive listens are one (partly played) track apart, at most
    # ~1700 s; sessions are separated by more than the 1800 s cut. Nothing falls in between.
    inside = listen_gaps[listen_gaps <= 1800]
    assert np.median(inside) < 400
    longest_play, shortest_gap = synthetic_world.MAX_PLAY_SECONDS + 20, synthetic_world.MIN_SESSION_GAP_SECONDS - 10
    no_mans_land = (listen_gaps > longest_play) & (listen_gaps < shortest_gap)
    assert no_mans_land.sum() == 0
    between = (listen_gaps > 1800).sum()
    assert 0.03 < between / listen_gaps.size < 0.2


def test_feedback_follows_a_listen_of_the_same_item(tiny_events: dict[str, np.ndarray]) -> None:
    listens = set(zip(tiny_events["uid"][tiny_events["event_type"] == "listen"].tolist(),
                      tiny_events["item_id"][tiny_events["event_type"] == "listen"].tolist()))
    likes = tiny_events["event_type"] == "like"
    liked = zip(tiny_events["uid"][likes].tolist(), tiny_events["item_id"][likes].tolist())
    assert all(pair in listens for pair in liked)


def test_mappings_nest_albums_in_artists_and_leave_a_few_items_unmapped(tiny_dataset_dir: pathlib.Path) -> None:
    metadata = pathlib.Path(layout.shared_metadata_dir(tiny_dataset_dir))
    albums = pq.read_table(metadata / layout.ALBUM_MAPPING_FILE).to_pydict()
    artists = pq.read_table(metadata / layout.ARTIST_MAPPING_FILE).to_pydict()
    pairs = list(zip(albums["album_id"], albums["item_id"]))
    assert pairs == sorted(pairs)  # sorted by album, like the published file
    item_artist = dict(zip(artists["item_id"], artists["artist_id"]))
    album_artists: dict[int, set[int]] = {}
    for album, item in zip(albums["album_id"], albums["item_id"]):
        album_artists.setdefault(album, set()).add(item_artist[item])
    assert all(len(a) == 1 for a in album_artists.values())  # an album belongs to one artist
    size = synthetic.get_size("tiny")
    assert len(set(artists["artist_id"])) <= size.num_artists
    num_items = np.load(layout.synthetic_truth_dir(tiny_dataset_dir) / "item_quality.npy").size
    assert len(albums["item_id"]) < num_items  # some tracks have no mapping


def test_is_organic_mixes(tiny_events: dict[str, np.ndarray]) -> None:
    assert 0.2 < tiny_events["is_organic"].mean() < 0.7


def test_truth_files_describe_the_generator(tiny_dataset_dir: pathlib.Path) -> None:
    truth = layout.synthetic_truth_dir(tiny_dataset_dir)
    meta = json.loads((truth / synthetic.TRUTH_COEFFICIENTS_FILE).read_text())
    assert meta["size"] == "tiny" and meta["seed"] == 0 and meta["factor_dim"] == synthetic.FACTOR_DIM
    assert np.load(truth / "user_factors.npy").shape == (synthetic.get_size("tiny").num_users, synthetic.FACTOR_DIM)


def test_existing_output_needs_overwrite_and_ensure_reuses(tmp_path: pathlib.Path) -> None:
    out = synthetic.generate(tmp_path / "d", size="tiny", seed=1)
    with pytest.raises(FileExistsError, match="overwrite"):
        synthetic.generate(out, size="tiny", seed=1)
    stamp = pathlib.Path(layout.multi_event_path(out, TINY_SIZE)).stat().st_mtime_ns
    synthetic.ensure_synthetic(out, size="tiny", seed=1)
    assert pathlib.Path(layout.multi_event_path(out, TINY_SIZE)).stat().st_mtime_ns == stamp
    synthetic.ensure_synthetic(out, size="tiny", seed=2)  # a different seed regenerates
    assert json.loads((layout.synthetic_truth_dir(out) / synthetic.TRUTH_COEFFICIENTS_FILE).read_text())["seed"] == 2
    assert not list(tmp_path.glob("d/.synthetic-staging-*"))


def test_unknown_size_is_rejected(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="unknown synthetic size 'huge'"):
        synthetic.generate(tmp_path, size="huge", seed=0)


def test_cli_writes_default_named_directory(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert synthetic._main(["--size", "tiny", "--seed", "4", "--data-root", str(tmp_path)]) == 0
    dataset = tmp_path / "yambda-synthetic-tiny-seed4"
    assert (dataset / "raw" / "tiny" / "multi_event.parquet").is_file()
    assert (dataset / "shared_metadata" / "artist_item_mapping.parquet").is_file()
    assert not (dataset / "processed_tiny").exists()  # no --cache: the trainer preprocesses on first use
    assert "events" in capsys.readouterr().out


def test_a_regenerated_dataset_drops_what_was_derived_from_the_old_one(tmp_path: pathlib.Path) -> None:
    out = synthetic.generate(tmp_path / "d", size="tiny", seed=1)
    processed = ensure_processed(out, TINY_SIZE)
    synthetic.ensure_synthetic(out, size="tiny", seed=1)  # the same dataset: kept, and its processing
    assert processed.is_dir()
    synthetic.ensure_synthetic(out, size="tiny", seed=2)
    assert not processed.exists()  # processed from seed 1's events: gone with them
    assert stale_reason(out, TINY_SIZE) == "not built yet"


@pytest.mark.parametrize("seed", range(8))
def test_the_largest_item_id_is_always_mapped(seed: int) -> None:
    # half the catalog unmapped: without the rule the largest id would be left out for half the seeds
    config = dataclasses.replace(synthetic.get_size("tiny"), unmapped_item_fraction=0.5)
    catalog = synthetic.build_catalog(config, np.random.default_rng([seed, 0]))
    num_items = catalog.item_album.size
    assert catalog.item_mapped[-1] and 0.3 < catalog.item_mapped.mean() < 0.7
    for columns in (schema.ALBUM_MAPPING_COLUMNS, schema.ARTIST_MAPPING_COLUMNS):
        table = synthetic._mapping_table(catalog.item_album, catalog.item_mapped, columns)
        assert max(table.column("item_id").to_pylist()) == num_items - 1


def test_item_maps_accept_the_popularity_even_when_most_tracks_are_unmapped(tmp_path: pathlib.Path) -> None:
    """The mappings define the vocabulary (the reference's dataset refuses an item_popularity.npy of
    another length): with the largest id mapped it is the catalog, and the preprocessing sizes the
    popularity to it, whichever tracks were played."""
    config = dataclasses.replace(synthetic.get_size("tiny"), unmapped_item_fraction=0.9)
    plan = synthetic.SyntheticPlan("tiny", config, seed=0)
    generation.generate(plan, tmp_path, progress=False, log=lambda line: None)
    processed = ensure_processed(tmp_path, TINY_SIZE)
    maps = ItemMaps.load(tmp_path, processed)
    popularity = np.load(processed / layout.ITEM_POPULARITY_FILE)
    num_items = np.load(layout.synthetic_truth_dir(tmp_path) / "item_quality.npy").size
    assert maps.num_items == popularity.size == num_items
    played = pq.read_table(layout.multi_event_path(tmp_path, TINY_SIZE), columns=["item_id"]).column(0)
    mapped = pq.read_table(pathlib.Path(layout.shared_metadata_dir(tmp_path)) / layout.ARTIST_MAPPING_FILE)
    # without the rule the mappings' vocabulary would end before the played tracks do: refused
    others = [item for item in mapped.column("item_id").to_pylist() if item != num_items - 1]
    assert max(played.to_pylist()) > max(others)


def test_the_tiny_dataset_item_maps_and_popularity_agree(tiny_dataset_dir: pathlib.Path) -> None:
    processed = pathlib.Path(layout.processed_dir(tiny_dataset_dir, TINY_SIZE))
    maps = ItemMaps.load(tiny_dataset_dir, processed)
    assert maps.num_items == np.load(processed / layout.ITEM_POPULARITY_FILE).size
    assert maps.num_items == np.load(layout.synthetic_truth_dir(tiny_dataset_dir) / "item_quality.npy").size


def _cache_files(cache: pathlib.Path) -> dict[str, bytes]:
    # the lock files are the build's, not the cache's
    return {p.name: p.read_bytes() for p in sorted(cache.iterdir()) if not p.name.endswith("lock")}


def test_the_cache_option_preprocesses_and_builds_what_a_trainer_reads(
        tmp_path: pathlib.Path, tiny_cache_dir: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    from recommendation_v4.data_setup import materialise
    from recommendation_v4.run_config import DataConfig

    name = layout.synthetic_dataset_name("tiny", 0)
    assert synthetic._main(["--size", "tiny", "--seed", "0", "--data-root", str(tmp_path), "--no-progress",
                            "--cache", "60:5", "--cache", "30"]) == 0
    dataset = tmp_path / name
    out = capsys.readouterr().out
    assert stale_reason(dataset, TINY_SIZE) is None
    for history_length, min_history in ((60, 5), (30, 30)):
        cache = pathlib.Path(layout.cache_dir(dataset, TINY_SIZE, history_length))
        assert cf.is_ready(cache) and f"{cache}: flat-event cache (min_history {min_history})" in out
        assert (cache / cf.positions_file(history_length, history_length)).is_file()
        assert (cache / cf.positions_file(history_length, min_history)).is_file()
        assert (cache / cf.anchor_ts_file(history_length, min_history)).is_file()
    cache = pathlib.Path(layout.cache_dir(dataset, TINY_SIZE, 60))
    built = _cache_files(cache)
    assert set(built) == {*(f"{c}.npy" for c in (*cf.EVENT_COLUMNS, *cf.USER_COLUMNS)), cf.STORE_META_FILE, cf.READY_FILE,
                          "positions_L60.npy", "positions_L60_m5.npy", "anchor_ts_L60_m5.npy"}
    # what the steps one by one build (the session fixture), byte for byte
    assert built == {name: (tiny_cache_dir / name).read_bytes() for name in built}

    # a trainer of history 60 and min_history 5 finds everything it reads: nothing is built or rewritten
    def stamps() -> dict[str, int]:
        return {str(p): p.stat().st_mtime_ns for p in dataset.rglob("*")
                if p.is_file() and not p.name.endswith("lock")}

    before = stamps()
    assert materialise(DataConfig(data_root=str(tmp_path), dataset=name), history_length=60, min_history=5) == dataset
    assert stamps() == before


@pytest.mark.parametrize("spec", ["x", "60:y", "2", "60:-1"])
def test_a_bad_cache_option_is_a_usage_error(spec: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as raised:
        synthetic._main(["--size", "tiny", "--out", str(tmp_path / "d"), "--cache", spec])
    assert raised.value.code == 2 and "--cache" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
