"""The Kappa+ backfill without its fixed-cost cuts: `python -m benchmarks.backfill_uncut --run-dir DIR`.

The backfill application (`jobs.backfill`) unchanged, but for its gated query's shuffle partitions,
which are the job's own (4 for the sessionizer) instead of no more than the cores
(`jobs.backfill.gated_partitions`): the application as it ran before that cut.
`benchmarks.backfill` measures the fixed cost of an empty micro-batch with both.

A benchmark tool only: the replacement is installed in this process before the query starts.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from jobs import backfill
from ops.spec.job import JobSpec


def jobs_partitions(_spark: SparkSession, spec: JobSpec) -> int:
    return spec.operations.resources.shuffle_partitions


def main() -> int:
    backfill.gated_partitions = jobs_partitions  # type: ignore[assignment]
    return backfill.main()


if __name__ == "__main__":
    raise SystemExit(main())
