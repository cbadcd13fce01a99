"""The Kappa+ backfill's floor: `python -m benchmarks.backfill_floor --run-dir DIR`.

The backfill application (`jobs.backfill`) over a planned run, unchanged but for the sessionizer's
pandas call, which reads every row it is given and does nothing else: no state kept, no session
and no output row. Everything else a partition's micro-batch pays runs as in the real backfill:
the gated archive source, the parse, the shuffle to the state operator, the Arrow transfer of
every row to the Python workers, the RocksDB load and commit of every shuffle partition,
the (empty) sink commit and the driver's bookkeeping. Its wall time is therefore what the issue's
design (the streaming job's own plan, one archive partition per micro-batch) costs before any
sessionizing: `benchmarks.backfill` sets it against the one-shot batch run, which does sessionize.

A benchmark tool only: the replacement is installed in this process before the job's plan is
built, and pickled by reference, so Spark's Python workers import it from this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.state import GroupState

from jobs import backfill
from jobs.sessionizer import transform


class ReadOnlySessionizer(transform.StreamSessionizer):
    """Reads each bucket's new rows and returns nothing (no state, no output)."""

    def __call__(
        self, _key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        for _ in frames:
            pass
        return iter(())


def main() -> int:
    transform.StreamSessionizer = ReadOnlySessionizer  # type: ignore[misc]
    return backfill.main()


if __name__ == "__main__":
    raise SystemExit(main())
