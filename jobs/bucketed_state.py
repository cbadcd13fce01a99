"""Pandas state per hash bucket: the plumbing the sessionizer, impressions_plays and campaign_uniques share.

These jobs hash their keys into `state_buckets` groups and make one pandas call per bucket and
micro-batch (`applyInPandasWithState`, event-time timeouts) or per bucket at rest in batch
(`applyInPandas`). A bucket's state row holds its pending events as one Arrow IPC blob: PySpark's
worker cannot parse an array-typed state schema (KeyError 'elementType' on 4.3), and a blob is
also the cheapest way in and out of pandas. One call per bucket rather than per key is what makes
the Python path affordable on many small keys: the per-call cost (pandas frame, state conversion)
is paid `state_buckets` times per batch, not once per active key.

Late events: every job applies Spark's own rule, an event is late when its event time is at or
behind the watermark of the micro-batch it arrives in. Spark drops such rows in front of a
FlatMapGroupsWithState function, silently; the jobs route them to a `late` output instead, so
the operator's watermark column is null on every row (`operator_watermark`: Spark's late filter
keeps rows whose predicate is null) while the watermark itself is computed upstream and handed to
the function by `GroupState.getCurrentWatermarkMs`. attack_chains, keyed rather than bucketed,
uses the same column and `timeout_reaching`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState

BUCKET = "_bucket"

StreamFunction = Callable[[tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]
BatchFunction = Callable[[pd.DataFrame], pd.DataFrame]


def bucket_of(columns: list[Column], buckets: int) -> Column:
    """The bucket (0 .. buckets-1) of a row's key columns; null columns are skipped by the hash."""
    return F.pmod(F.xxhash64(*columns), F.lit(buckets)).cast("int").alias(BUCKET)


def operator_watermark(events: DataFrame, column: str) -> list[Column]:
    """The watermark column the stateful operator sees: all nulls, with the watermark metadata.

    With it Spark gives the function the batch's watermark and fires event-time timeouts; being
    null, its late filter drops no row, so the function can send late events to `late`.
    Nothing in batch, where there is no watermark.
    """
    if not events.isStreaming:
        return []
    metadata = events.schema[column].metadata
    return [F.lit(None).cast("timestamp").alias(column, metadata=metadata)]


def timeout_reaching(at_us: int) -> int:
    """The event-time timeout (ms) that wakes a group once the watermark reaches `at_us`.

    Spark fires a timeout when the watermark is past it, so this is the millisecond before.
    """
    return -(-at_us // 1000) - 1


def frame_to_ipc(frame: pd.DataFrame) -> bytes:
    """A pandas frame as Arrow IPC stream bytes (the index is not kept)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    # pyarrow is untyped here (no stubs installed); to_pybytes() returns bytes.
    return cast(bytes, sink.getvalue().to_pybytes())


def frame_from_ipc(blob: bytes) -> pd.DataFrame:
    with pa.ipc.open_stream(blob) as reader:
        return reader.read_pandas()


# A bucket's state row: its events, and the layout they were written with (`state_layout`).
STATE_SCHEMA = T.StructType(
    [T.StructField("events", T.BinaryType()), T.StructField("layout", T.StringType())]
)


def state_layout(buckets: int, key_fields: Sequence[str] = ()) -> str:
    """What a bucket's state row is only valid for, fixed by the checkpoint: the bucket count
    (another count puts keys in other buckets) and, where the job lets them be chosen, the key
    fields (a same-typed rename would pass Spark's key schema check)."""
    layout = f"state_buckets={buckets}"
    return f"{layout} key_fields={','.join(key_fields)}" if key_fields else layout


def read_state(state: GroupState, job: str, layout: str) -> pd.DataFrame | None:
    """The events a bucket's state holds (None when it holds none); refuses state written with
    another layout, naming both."""
    if not state.exists:
        return None
    events, written_with = state.get
    if written_with != layout:
        raise ValueError(
            f"incompatible {job} state: the checkpoint has {written_with}, the job has {layout}; "
            f"start the new version from a fresh checkpoint"
        )
    return frame_from_ipc(events)


def write_state(state: GroupState, events: pd.DataFrame, layout: str, wake_ms: Callable[[], int]) -> None:
    """Keep a bucket's events and wake it at `wake_ms()` of event time (asked only then), or drop
    its state row when there are none."""
    if events.empty:
        state.remove()
        return
    state.update((frame_to_ipc(events), layout))
    state.setTimeoutTimestamp(wake_ms())


def concat_frames(frames: Iterator[pd.DataFrame]) -> pd.DataFrame | None:
    """One bucket's input frames as one frame; None when there are no rows (a timeout call)."""
    batch = [frame for frame in frames if not frame.empty]
    if not batch:
        return None
    if len(batch) == 1:
        return batch[0]
    return _concat_alike(batch) if _alike(batch) else pd.concat(batch, ignore_index=True)


def _alike(frames: list[pd.DataFrame]) -> bool:
    """Whether `frames` have the same columns with the same NumPy dtypes (the chunks PySpark hands
    one bucket of a micro-batch have)."""
    columns, dtypes = list(frames[0].columns), list(frames[0].dtypes)
    return all(isinstance(dtype, np.dtype) for dtype in dtypes) and all(
        list(frame.columns) == columns and list(frame.dtypes) == dtypes for frame in frames[1:]
    )


def _concat_alike(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """`pd.concat(frames, ignore_index=True)` of alike frames, column by column.

    pandas 2's concat looks at every value, in a Python loop, of a column that is all null in one
    of the frames (to decide the result's dtype, which alike frames already share): a bucket's
    dead-letter reason, null in almost every row, cost the sessionizer's backfill 5 of its 60 CPU
    seconds in the state function (py-spy over 30 arrival hours).
    """
    return pd.DataFrame(
        {name: np.concatenate([frame[name].to_numpy() for frame in frames]) for name in frames[0].columns}
    )


def range_pairs(
    row_key: np.ndarray,
    row_time: np.ndarray,
    query_key: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    include_high: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, query) with the same integer key and `low <= row_time <= high` (`< high` unless
    `include_high`), as two arrays of positions: rows, then queries.

    A range join: rows sorted by (key, time), two binary searches per query, so the cost is the
    sort plus the pairs, not rows x queries per key. Times are replaced by their rank among the
    rows' distinct times, so (key, rank) packs into one int64 whatever the time span.
    """
    times = np.unique(row_time)
    stride = len(times) + 1
    order = np.lexsort((row_time, row_key))
    packed = row_key[order] * stride + np.searchsorted(times, row_time[order])
    base = query_key * stride
    first = np.searchsorted(packed, base + np.searchsorted(times, low, "left"), "left")
    high_rank = np.searchsorted(times, high, "right" if include_high else "left")
    end = np.searchsorted(packed, base + high_rank, "left")
    counts = end - first
    starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
    return order[starts + np.arange(counts.sum())], np.repeat(np.arange(len(query_key)), counts)


# PySpark picks the kind of a pandas function from its signature, so it gets plain functions
# wrapping the jobs' callable objects.
def batch_function(apply_bucket: BatchFunction) -> BatchFunction:
    def apply(rows: pd.DataFrame) -> pd.DataFrame:
        return apply_bucket(rows)

    return apply


def stream_function(apply_bucket: StreamFunction) -> StreamFunction:
    def apply(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        return apply_bucket(key, frames, state)

    return apply
