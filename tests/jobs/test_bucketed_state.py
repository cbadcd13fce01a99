"""A bucket's input chunks made one frame (`jobs.bucketed_state.concat_frames`), as pandas would."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.testing import assert_frame_equal

from jobs.bucketed_state import concat_frames


def chunk(users: list[str], reasons: list[str | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user_id": pd.Series(users, dtype=object),
            "event_time_us": np.arange(len(users), dtype=np.int64),
            "dead_letter_reason": pd.Series(reasons, dtype=object),
            "amount": np.linspace(0.5, 1.5, len(users)),
        }
    )


def test_alike_chunks_with_an_all_null_column_are_joined_as_pandas_joins_them() -> None:
    chunks = [
        chunk(["a", "b"], [None, None]),
        chunk([], []),
        chunk(["c"], ["bad json"]),
        chunk(["d"], [None]),
    ]

    joined = concat_frames(iter(chunks))

    assert joined is not None
    assert_frame_equal(joined, pd.concat([c for c in chunks if not c.empty], ignore_index=True))
    assert joined["dead_letter_reason"].tolist() == [None, None, "bad json", None]


def test_chunks_of_other_dtypes_are_left_to_pandas_and_no_rows_is_none() -> None:
    ints = chunk(["a"], [None])
    floats = ints.assign(event_time_us=ints["event_time_us"].astype(float))

    joined = concat_frames(iter([ints, floats]))

    assert joined is not None
    assert_frame_equal(joined, pd.concat([ints, floats], ignore_index=True))
    assert concat_frames(iter([chunk([], [])])) is None
    assert concat_frames(iter([])) is None
