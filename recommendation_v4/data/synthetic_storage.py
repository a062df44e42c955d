"""The storage content of synthetic Yambda: the same files, schema, sizes and marginal statistics as the
learnable content, drawn column by column from lookup tables and written with cheaper parquet encodings
(about 16x faster, nothing to learn). One chunk of users at a time, as the learnable content."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.data.generation import STORAGE
from recommendation_v4.data import schema
from recommendation_v4.data.synthetic_sizes import SyntheticSize

from recommendation_v4.data.synthetic_world import (DAY_SECONDS, MEAN_SESSION_LISTENS, MIN_SESSION_GAP_SECONDS,
                                                    ZIPF_EXPONENT, Catalog, Users, segment_starts)

# ------------------------------------------------------------------------ storage content
# The learnable content's share of listens played past 50 % (listen_plus): its planted logit is
# tuned to it (SignalCoefficients). The storage content draws played ratios and feedback from it.
STORAGE_LISTEN_PLUS_SHARE = 0.55
_FIELD_BITS = 16  # random bits per played ratio and per is_organic draw
_BLOCK_EVENTS = 1 << 16  # events per pass of the per-event draws: a block's temporaries stay in cache
_TRACK_LENGTH_BITS = 10  # track lengths are at most 900 s
# The timeline runs in centiseconds, the unit of track_length_seconds x played_ratio_pct.
_TICKS_PER_SECOND = 100
_TICKS_PER_BIN = schema.TIMESTAMP_BIN_SECONDS * _TICKS_PER_SECOND
# Between the end of a play and the next event: the mean of the learnable content's U(0, 8 s). Without it
# a skipped track would share its bin with the next event far more often than in the learnable content.
_PAUSE_TICKS = 4 * _TICKS_PER_SECOND
# The storage content's parquet encodings: a dictionary only where it pays (event_type, an enum of
# five); byte-stream-split where lz4 alone would not shrink the values (small numbers in 32-bit
# cells), plain elsewhere; statistics where a reader uses them (preprocessing takes the timestamp
# range from them). Against the learnable content's defaults (dictionary and statistics everywhere),
# 4x faster to encode; bytes per event +4 % on "large" (-4 % on tiny, +9 % on small: dictionaries of
# a small catalog's items are small).
_STORAGE_PARQUET_OPTIONS = {
    "use_dictionary": ["event_type"],
    "column_encoding": {"uid": "PLAIN", "timestamp": "PLAIN", "item_id": "BYTE_STREAM_SPLIT",
                        "is_organic": "BYTE_STREAM_SPLIT", "played_ratio_pct": "BYTE_STREAM_SPLIT",
                        "track_length_seconds": "BYTE_STREAM_SPLIT"},
    "write_statistics": ["uid", "timestamp"],
}


def event_log_writer(path: pathlib.Path, content: str) -> pq.ParquetWriter:
    options = _STORAGE_PARQUET_OPTIONS if content == STORAGE else {}
    return pq.ParquetWriter(path, schema.arrow_schema(schema.MULTI_EVENT_COLUMNS), compression="lz4", **options)


@dataclasses.dataclass(frozen=True)
class _FeedbackRates:
    """Explicit feedback per listen, as the learnable content has it on average."""

    like: float
    dislike: float
    unlike_per_like: float
    undislike_per_dislike: float

    @classmethod
    def of(cls, size: SyntheticSize) -> "_FeedbackRates":
        plus = STORAGE_LISTEN_PLUS_SHARE
        return cls(like=size.like_per_listen_plus * plus, dislike=size.dislike_per_skip * (1.0 - plus),
                   unlike_per_like=size.unlike_per_like, undislike_per_dislike=size.undislike_per_dislike)

    @property
    def reactions(self) -> float:
        return self.like + self.dislike

    @property
    def events(self) -> float:
        """Feedback events per listen: the reactions and their retractions."""
        return self.reactions + self.like * self.unlike_per_like + self.dislike * self.undislike_per_dislike


@dataclasses.dataclass
class StorageTables:
    """What a storage job looks up instead of simulating: tables indexed by (a function of) random bits."""

    log_tracks: float  # ln(len(track)): X = exp(u * log_tracks) for u uniform in [0, 1) indexes `track`
    item_id_bits: int  # low bits of a track row: the item id; above them its track length
    track: np.ndarray  # track rows by popularity, each rank r at X in [2r - 1, 2r + 1) (one gather)
    played: np.ndarray  # uint16 played ratio at each of 2**_FIELD_BITS quantiles of the learnable mix
    organic_threshold: np.ndarray  # uint16 per user: is_organic when _FIELD_BITS random bits are below


def _quantile_table(cdf: np.ndarray, bits: int) -> np.ndarray:
    """Where `cdf` passes each of 2**bits evenly spaced quantiles: table[random bits] draws from it."""
    quantiles = (np.arange(1 << bits) + 0.5) / (1 << bits)
    return np.minimum(np.searchsorted(cdf, quantiles * cdf[-1], side="right"), cdf.size - 1)


def _played_ratio_pmf(listen_plus_share: float) -> np.ndarray:
    """P(played_ratio_pct = k) for k = 0..180: the mix _played_ratio draws from."""
    pmf = np.zeros(181)
    pmf[100] += listen_plus_share * 0.65
    pmf[50:100] += listen_plus_share * 0.25 / 50
    pmf[101:181] += listen_plus_share * 0.10 / 80
    survival = np.exp(-np.arange(50) / 7.0)  # floor(exponential(mean 7)), capped at 49
    early_skip = np.append(survival[:-1] - survival[1:], survival[-1])
    pmf[:50] += (1.0 - listen_plus_share) * (0.6 * early_skip + 0.4 / 50)
    return pmf


def build_storage_tables(catalog: Catalog, users: Users, size: SyntheticSize) -> StorageTables:
    if size.num_days * DAY_SECONDS * _TICKS_PER_SECOND >= 1 << 32:
        raise ValueError(f"storage content: the timeline (centiseconds, uint32) holds at most "
                         f"{(1 << 32) // (_TICKS_PER_SECOND * DAY_SECONDS)} days, not {size.num_days}")
    if ZIPF_EXPONENT != 1.0:
        raise ValueError("storage content: the popularity draw inverts the 1/rank law (ZIPF_EXPONENT 1)")
    # The catalog's law, P(rank r) ~ 1/r, in continuous form: X = exp(u ln(2M + 1)) has density 1/x on
    # [1, 2M + 1), and rank r takes X in [2r - 1, 2r + 1), so P(r) = ln((r + 1/2) / (r - 1/2)) / ln(2M + 1):
    # 1/r to within 1 % from rank 3 on (rank 1: 9 % more). One exp and a gather from a table read
    # mostly at its head, where a table of quantiles (16 MB for "large") missed the cache on every draw.
    num_items = catalog.item_cdf.size
    by_popularity = np.argsort(-np.diff(catalog.item_cdf, prepend=0.0), kind="stable")
    rank = np.maximum(np.arange(2 * num_items + 1) + 1, 2) // 2  # of X's integer part (0 is never drawn)
    item = by_popularity[rank - 1]
    item_id_bits = max(1, (num_items - 1).bit_length())
    row_type = np.uint32 if item_id_bits + _TRACK_LENGTH_BITS <= 32 else np.uint64
    track = item.astype(row_type) | (catalog.track_length[item].astype(row_type) << row_type(item_id_bits))
    played_cdf = np.cumsum(_played_ratio_pmf(STORAGE_LISTEN_PLUS_SHARE))
    return StorageTables(
        log_tracks=float(np.log(track.size)), item_id_bits=item_id_bits, track=track,
        played=_quantile_table(played_cdf, _FIELD_BITS).astype(np.uint16),
        organic_threshold=np.minimum(np.round(users.organic_propensity * (1 << _FIELD_BITS)), 65535).astype(np.uint16),
    )


@dataclasses.dataclass
class _Feedback:
    """Feedback episodes: a reaction (like / dislike) on the event after a listen, maybe retracted
    (unlike / undislike) on the event after it."""

    reaction: np.ndarray  # event index of each reaction, increasing, at least 3 apart
    is_like: np.ndarray
    retracted: np.ndarray

    def events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(event index, event_type code, index of the listen it is about) of every feedback event."""
        per_episode = 1 + self.retracted
        position = np.repeat(self.reaction, per_episode)
        code = np.repeat(np.where(self.is_like, schema.LIKE, schema.DISLIKE).astype(np.uint32), per_episode)
        second = np.flatnonzero(position[1:] == position[:-1]) + 1  # the retraction of a pair
        position[second] += 1
        code[second] = np.where(code[second] == schema.LIKE, schema.UNLIKE, schema.UNDISLIKE)
        return position, code, np.repeat(self.reaction - 1, per_episode)


def _geometric_gaps(rng: np.random.Generator, p: float, count: int) -> np.ndarray:
    """Geometric(p) draws (1, 2, ...), from exponentials: a third of numpy's geometric's time."""
    return 1 + (rng.standard_exponential(count) / -np.log1p(-p)).astype(np.int64)


def _storage_feedback(is_first: np.ndarray, total: int, rates: _FeedbackRates,
                      rng: np.random.Generator) -> _Feedback:
    """Sparse episodes drawn as gaps of at least 3 events, so every reaction follows a listen of its
    own user; `is_first` marks each user's first event, and one past the last event."""
    per_event = rates.reactions / (1.0 + rates.events)
    # enough gaps to span the chunk but for a 6-sigma shortfall (then its last events have no feedback)
    count = int(total * per_event + 6.0 * np.sqrt(total * per_event) + 16)
    reaction = np.minimum(np.cumsum(2 + _geometric_gaps(rng, 1.0 / (1.0 / per_event - 2.0), count)), total)
    is_like = rng.random(count) < rates.like / rates.reactions
    retracted = rng.random(count) < np.where(is_like, rates.unlike_per_like, rates.undislike_per_dislike)
    keep = (reaction < total) & ~is_first[reaction] & ~(retracted & is_first[np.minimum(reaction + 1, total)])
    return _Feedback(reaction=reaction[keep], is_like=is_like[keep], retracted=retracted[keep])


def _place_feedback(step: np.ndarray, feedback: _Feedback, rng: np.random.Generator) -> None:
    """Puts each episode inside the play of its listen (`step` at the reaction: the ticks from that
    listen to the next event) and the next listen where that play ends, 5 s after the feedback at
    least: listen times stay one play apart, and the next listen falls in a later bin (Yambda's type
    order sorts a listen before the feedback of its bin)."""
    reaction = feedback.reaction
    play = step[reaction].astype(np.float64)
    react = np.floor(play * rng.uniform(0.2, 1.0, reaction.size))
    step[reaction] = react
    last = react.copy()  # ticks from the listen to the episode's last feedback
    pair = np.flatnonzero(feedback.retracted)
    retract = np.floor((play[pair] - react[pair]) * rng.random(pair.size))
    step[reaction[pair] + 1] = retract
    last[pair] += retract
    after = reaction + 1 + feedback.retracted
    rest = np.maximum(play - last, _TICKS_PER_BIN)
    inside = np.searchsorted(after, step.size)  # only the chunk's last episode may end it
    step[after[:inside]] = rest[:inside]


def _storage_timestamps(
    *, step: np.ndarray, first: np.ndarray, is_first: np.ndarray, event_type: np.ndarray, feedback: _Feedback,
    window_start: np.ndarray, window_end: np.ndarray, period: float, rng: np.random.Generator,
) -> np.ndarray:
    """uint32 timestamps, 5 s bins, sorted within each user, as the learnable content has them: the
    next event one play (and a pause) later, feedback inside the play, sessions split by gaps above
    the 1800 s cut that share out the rest of the user's active window. `step` (the ticks from the
    event before) becomes the timestamps.

    In centiseconds, one uint32 running sum over the chunk: each user's first step jumps from the
    previous user's last tick to its own start (mod 2**32; the sum's wrap-around undoes it)."""
    total = step.size
    _place_feedback(step, feedback, rng)
    step[first] = 0
    busy = np.add.reduceat(step, first, dtype=np.uint32).astype(np.float64)  # a user's ticks fit in uint32

    session = np.cumsum(_geometric_gaps(rng, 1.0 / MEAN_SESSION_LISTENS, int(total / MEAN_SESSION_LISTENS * 1.1) + 16))
    session = session[: np.searchsorted(session, total)]
    session = session[(event_type[session] == schema.LISTEN) & ~is_first[session]]
    bounds = np.searchsorted(session, first)
    sessions_per_user = np.diff(np.append(bounds, session.size))
    min_gap = MIN_SESSION_GAP_SECONDS * _TICKS_PER_SECOND
    start = np.floor(window_start * _TICKS_PER_SECOND)
    slack = np.maximum(window_end * _TICKS_PER_SECOND - start - busy - sessions_per_user * min_gap, 0.0)
    lead_share = rng.exponential(1.0, first.size)
    share = rng.exponential(1.0, session.size)
    share_sum = np.concatenate(([0.0], np.cumsum(share)))
    scale = slack / (lead_share + share_sum[bounds + sessions_per_user] - share_sum[bounds])
    gap = (share * np.repeat(scale, sessions_per_user) + min_gap).astype(np.uint32)  # rounded down
    step[session] += gap

    gap_sum = np.concatenate(([0], np.cumsum(gap, dtype=np.int64)))
    user_start = (start + np.floor(lead_share * scale)).astype(np.int64)
    user_end = user_start + busy.astype(np.int64) + gap_sum[bounds + sessions_per_user] - gap_sum[bounds]
    jump = user_start - np.concatenate(([0], user_end[:-1]))
    step[first] = (jump % (1 << 32)).astype(np.uint32)
    np.cumsum(step, dtype=np.uint32, out=step)
    last_tick = int(np.ceil(period / schema.TIMESTAMP_BIN_SECONDS)) * _TICKS_PER_BIN - 1
    if user_end.max() > last_tick:  # a user whose plays alone overfill the window: its last bins pile up
        np.minimum(step, last_tick, out=step)
    step //= _TICKS_PER_BIN
    step *= schema.TIMESTAMP_BIN_SECONDS
    return step


class ReusedArrays:
    """Arrays kept from one chunk to the next. Fresh ones for a chunk's columns and temporaries (about
    25 bytes per event) cost a page fault and a zeroed page per 4 KiB: measured a fifth of the drawing
    time. A storage chunk's table is made of views of them, valid until the next chunk is drawn."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        nbytes = size * np.dtype(dtype).itemsize
        array = self._arrays.get(name)
        if array is None or array.size < nbytes:
            array = self._arrays[name] = np.empty(nbytes, np.uint8)
        return array[:nbytes].view(dtype)


@dataclasses.dataclass
class _EventFields:
    """A chunk's per-event draws, independent of one another and of the user but for is_organic."""

    item: np.ndarray  # uint32
    track_length: np.ndarray  # uint32 seconds
    played: np.ndarray  # uint16 played_ratio_pct
    organic: np.ndarray  # bool
    step: np.ndarray  # uint32 ticks from the event before: its play and a pause (0 for the first event)


def _draw_event_fields(tables: StorageTables, organic_threshold: np.ndarray, rng: np.random.Generator,
                       arrays: ReusedArrays) -> _EventFields:
    """One 64-bit draw per event, cut into fields: the track's popularity from the high 32 bits, the
    played ratio and is_organic from the low 16-bit lanes (views, no copies). Block by block, so that
    a block's passes and the table gathers stay in cache: twice as fast as whole columns."""
    total = organic_threshold.size
    fields = _EventFields(
        item=arrays.get("item", total, np.uint32), track_length=arrays.get("track_length", total, np.uint32),
        played=arrays.get("played", total, np.uint16), organic=arrays.get("organic", total, bool),
        step=arrays.get("step", total + 1, np.uint32))  # step[k + 1]: the play of event k
    x = arrays.get("x", min(total, _BLOCK_EVENTS), np.float64)
    index = arrays.get("index", x.size, np.intp)
    track = arrays.get("track", x.size, tables.track.dtype)
    row = tables.track.dtype.type
    for start in range(0, total, _BLOCK_EVENTS):
        end = min(start + _BLOCK_EVENTS, total)
        bits = rng.bit_generator.random_raw(end - start)
        lanes = bits.view(np.uint16).reshape(-1, 4)
        block_x, block_index, block_track = x[: end - start], index[: end - start], track[: end - start]
        np.multiply(bits.view(np.uint32)[1::2], tables.log_tracks / 2**32, out=block_x)
        np.exp(block_x, out=block_x)
        block_index[...] = block_x
        # mode="clip" writes straight into `out` ("raise" buffers it), and keeps a rounded-up X in range
        tables.track.take(block_index, out=block_track, mode="clip")
        np.bitwise_and(block_track, row((1 << tables.item_id_bits) - 1), out=fields.item[start:end], casting="unsafe")
        np.right_shift(block_track, row(tables.item_id_bits), out=fields.track_length[start:end], casting="unsafe")
        tables.played.take(lanes[:, 0], out=fields.played[start:end], mode="clip")
        np.less(lanes[:, 1], organic_threshold[start:end], out=fields.organic[start:end])
        play = fields.step[start + 1 : end + 1]
        np.multiply(fields.track_length[start:end], fields.played[start:end], out=play)  # in centiseconds
        play += _PAUSE_TICKS
    fields.step = fields.step[:total]
    fields.step[0] = 0
    return fields


def _listen_only_array(values: np.ndarray, dtype: pa.DataType, listen_bits: pa.Buffer, nulls: int) -> pa.Array:
    return pa.Array.from_buffers(dtype, values.size, [listen_bits, pa.py_buffer(values)], null_count=nulls)


def storage_chunk(*, tables: StorageTables, users: Users, user_range: range, size: SyntheticSize,
                   rng: np.random.Generator, arrays: ReusedArrays) -> pa.Table:
    """The storage content's events of a chunk of users, drawn column by column, in order. The
    table's columns are views of `arrays`: write it before the next chunk is drawn."""
    uids = np.arange(user_range.start, user_range.stop)
    rates = _FeedbackRates.of(size)
    listens = users.num_listens[uids]
    events_per_user = listens + np.rint(listens * rates.events).astype(np.int64)
    first = segment_starts(events_per_user)
    total = int(events_per_user.sum())
    is_first = arrays.get("is_first", total + 1, bool)  # and one past the last event
    is_first.fill(False)
    is_first[first] = True
    is_first[total] = True
    uid = arrays.get("uid", total, np.uint32)  # a running count of the users' first events
    uid.fill(0)
    uid[first[1:]] = 1
    uid[0] = user_range.start
    np.cumsum(uid, out=uid)

    fields = _draw_event_fields(tables, np.repeat(tables.organic_threshold[uids], events_per_user), rng, arrays)
    feedback = _storage_feedback(is_first, total, rates, rng)
    position, code, listen = feedback.events()
    event_type = arrays.get("event_type", total, np.uint32)
    event_type.fill(schema.LISTEN)
    event_type[position] = code
    fields.item[position] = fields.item[listen]
    fields.organic[position] = fields.organic[listen]
    timestamp = _storage_timestamps(
        step=fields.step, first=first, is_first=is_first, event_type=event_type, feedback=feedback,
        window_start=users.window_start[uids], window_end=users.window_end[uids],
        period=float(size.num_days * DAY_SECONDS), rng=rng)

    is_listen = np.equal(event_type, schema.LISTEN, out=arrays.get("is_listen", total, bool))
    listen_bits = pa.py_buffer(np.packbits(is_listen, bitorder="little"))
    return pa.table(
        {
            "uid": pa.array(uid),
            "timestamp": pa.array(timestamp),
            "item_id": pa.array(fields.item),
            "is_organic": pa.array(fields.organic.view(np.uint8)),
            "played_ratio_pct": _listen_only_array(fields.played, pa.uint16(), listen_bits, position.size),
            "track_length_seconds": _listen_only_array(fields.track_length, pa.uint32(), listen_bits, position.size),
            "event_type": pa.DictionaryArray.from_arrays(
                pa.array(event_type), pa.array(schema.EVENT_TYPE_NAMES, pa.large_string()), safe=False),
        },
        schema=schema.arrow_schema(schema.MULTI_EVENT_COLUMNS),
    )
