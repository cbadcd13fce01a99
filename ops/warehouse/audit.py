"""The audit of write-audit-publish: Great Expectations (GX Core 1.x) on the compacted DataFrame.

Every partition gets the built-in checks, then the job's own (`operations.quality`):

- the row count equals the committed rows of the source partition (compaction lost or
  duplicated nothing);
- `keys` are never null, `unique` columns have no duplicates;
- each partition column holds only the partition's value (no file landed in the wrong place).

Each check has a severity: `block` fails the audit (nothing is published), `warn` is reported.
The built-in ones block. GX's fixed cost is high (seconds per expectation on a small machine),
which is why a partition is audited once, at compaction, never per micro-batch.

The four kinds of expectation the built-in checks use (row count, not null, unique, in set; with
no other arguments, whoever declares them) are counted by one Spark aggregation over the partition
and GX judges the counts, as a one-row frame. Run by GX over the rows, they cost a Spark job each,
a sample job each and, for uniqueness, a sort of every row: three times the write of a 1M-row
partition (benchmarks/RESULTS.md). Uniqueness is counted as the distinct 64-bit hashes of the
column's values against its values; only when they differ (a duplicate, or a hash collision) does
an exact aggregation over the values count the duplicated rows; the other counts are observed
metrics of that job's read. The hashes of a partition of up to `HASHES_IN_DRIVER_MAX_ROWS` rows
come to the driver as Arrow and numpy counts the shared ones (8 bytes a row); larger partitions
group them in a shuffle, which took the audit of 1M rows from 0.31 s to 0.97 s. Each check
reports what GX's own would: the row count, or the unexpected rows and, when there are any, a
sample of their values (fetched from the rows only then). Every other expectation GX runs over
the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd
from great_expectations.core import ExpectationSuiteValidationResult
from great_expectations.data_context.data_context.abstract_data_context import AbstractDataContext
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.expectations.core.expect_column_max_to_be_between import ExpectColumnMaxToBeBetween
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from ops.spec.job import Expectation, QualitySuite

SAMPLE_SIZE = 5
ROW_COUNT = "expect_table_row_count_to_equal"
NOT_NULL = "expect_column_values_to_not_be_null"
UNIQUE = "expect_column_values_to_be_unique"
IN_SET = "expect_column_values_to_be_in_set"
# Columns of `_sums`'s grouping by a unique column: its values' hash, and the rows holding each.
HASH, ROWS = "__hash", "__rows"
# Up to this many rows, a unique column's hashes are counted in the driver (80 MB of them at most),
# rather than grouped by the executors.
HASHES_IN_DRIVER_MAX_ROWS = 10_000_000
# The arguments with which an expectation is counted by `_count` rather than run over the rows.
COUNTED = {ROW_COUNT: {"value"}, NOT_NULL: {"column"}, UNIQUE: {"column"}, IN_SET: {"column", "value_set"}}


@dataclass(frozen=True)
class CheckResult:
    """One expectation's verdict: `observed` is GX's observed value or the count of bad rows."""

    check: str
    severity: str
    passed: bool
    observed: Any
    sample: tuple[Any, ...]

    def line(self) -> str:
        sample = f", e.g. {list(self.sample)}" if self.sample else ""
        return f"{self.check} [{self.severity}]: observed {self.observed}{sample}"


@dataclass(frozen=True)
class AuditResult:
    checks: tuple[CheckResult, ...]

    @property
    def blocking(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.passed and check.severity == "block")

    @property
    def warnings(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.passed and check.severity == "warn")

    @property
    def passed(self) -> bool:
        return not self.blocking

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [asdict(check) for check in self.checks]}


def suite_expectations(
    suite: QualitySuite, expected_rows: int, partition_values: Mapping[str, Any]
) -> list[Expectation]:
    """The built-in checks, then the job's own, as one list."""
    builtin = [Expectation(expectation=ROW_COUNT, kwargs={"value": expected_rows})]
    builtin += [Expectation(expectation=NOT_NULL, kwargs={"column": key}) for key in suite.keys]
    builtin += [Expectation(expectation=UNIQUE, kwargs={"column": column}) for column in suite.unique]
    builtin += [
        Expectation(expectation=IN_SET, kwargs={"column": column, "value_set": [value]})
        for column, value in partition_values.items()
    ]
    return [*builtin, *suite.expectations]


def audit(
    frame: DataFrame, suite: QualitySuite, expected_rows: int, partition_values: Mapping[str, Any]
) -> AuditResult:
    """Judge the partition's expectations on `frame`: the counted ones (module docstring) by GX on
    their counts, the others by GX over the rows."""
    expectations = suite_expectations(suite, expected_rows, partition_values)
    counted = {index: e for index, e in enumerate(expectations) if _is_counted(e)}
    over_rows = {index: e for index, e in enumerate(expectations) if index not in counted}
    missing = {e.kwargs["column"] for e in counted.values() if "column" in e.kwargs} - set(frame.columns)
    if missing:
        raise ValueError(f"the quality suite names columns the partition has not: {sorted(missing)}")
    context = gx.get_context(mode="ephemeral")
    # Progress bars would interleave with the task's log lines.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    gx_counted = {index: _gx_judge_of_count(e, index) for index, e in counted.items()}
    gx_over_rows = {index: _gx_expectation(e, index) for index, e in over_rows.items()}
    observed = _count(frame, counted, expected_rows)
    outcomes = {
        **_run(
            context, "counts", pd.DataFrame({str(index): [n] for index, n in observed.items()}), gx_counted
        ),
        **_run(context, "rows", frame, gx_over_rows),
    }
    checks = []
    for index, expectation in enumerate(expectations):
        passed, found = outcomes[index]
        observed_value: Any
        if index in counted:
            # GX judged the count; a sample, as its own check would give, only when it failed.
            sample = () if passed or expectation.expectation == ROW_COUNT else _sample(frame, expectation)
            observed_value = observed[index]
        else:
            sample = tuple(found.get("partial_unexpected_list") or ())[:SAMPLE_SIZE]
            observed_value = found.get("observed_value", found.get("unexpected_count"))
        checks.append(
            CheckResult(_describe(expectation), expectation.severity, passed, observed_value, sample)
        )
    return AuditResult(tuple(checks))


def _is_counted(expectation: Expectation) -> bool:
    return COUNTED.get(expectation.expectation) == set(expectation.kwargs)


def _count(frame: DataFrame, counted: Mapping[int, Expectation], expected_rows: int) -> dict[int, int]:
    """Each counted expectation's observed value: the rows, or its unexpected rows.

    One Spark job per unique column (the first also sums the other checks' per-row flags), or one
    for the flags when there is none. A unique column's rows are counted by their values' 64-bit
    hashes; rows whose hash more than one row holds are its duplicated rows, unless hashes
    collide, so only when there are any does an exact aggregation over the values count them.
    `expected_rows` (the partition's committed rows) says where the hashes are counted."""
    if not counted:
        return {}
    flags = {
        index: F.lit(1) if expectation.expectation == ROW_COUNT else _unexpected(expectation)
        for index, expectation in counted.items()
        if expectation.expectation != UNIQUE
    }
    unique = [(index, e.kwargs["column"]) for index, e in counted.items() if e.expectation == UNIQUE]
    groupings: list[tuple[int, str] | None] = [*unique] or [None]
    observed: dict[int, int] = {}
    for position, grouped_by in enumerate(groupings):
        observed |= _sums(frame, flags if position == 0 else {}, grouped_by, expected_rows)
    for index, column in unique:
        if observed[index]:
            exact = _duplicates(frame, column).agg(F.sum("count")).first()
            observed[index] = int(exact[0] or 0) if exact is not None else 0
    return observed


def _sums(
    frame: DataFrame, flags: Mapping[int, Column], unique: tuple[int, str] | None, expected_rows: int
) -> dict[int, int]:
    """One Spark job: how many rows each of `flags` holds and, for a `unique` (index, column), how
    many non-null rows share their value's hash with another row. The flags are summed by an
    observed metric of the read, so that only the hashes leave it."""
    columns = [flag.cast("long").alias(str(index)) for index, flag in flags.items()]
    sums = [F.sum(str(index)).alias(str(index)) for index in flags]
    if unique is None:
        totals = frame.select(*columns).agg(*sums).first()
        assert totals is not None, "a global aggregation has one row"
        return {int(name): int(total or 0) for name, total in totals.asDict().items()}
    index, column = unique
    value = F.col(column)
    hashes = frame.select(F.when(value.isNotNull(), F.xxhash64(value)).alias(HASH), *columns)
    flagged = Observation()
    if sums:
        hashes = hashes.observe(flagged, *sums)
    if expected_rows <= HASHES_IN_DRIVER_MAX_ROWS:
        duplicated = _shared_in_driver(hashes.select(HASH))
    else:
        duplicated = _shared_by_executors(hashes.select(HASH))
    flag_totals = flagged.get if sums else {}
    return {index: duplicated} | {int(name): int(total or 0) for name, total in flag_totals.items()}


def _shared_in_driver(hashes: DataFrame) -> int:
    """The non-null `HASH` values that more than one row holds, counted per row, in numpy."""
    values = hashes.toArrow().column(HASH).drop_null().to_numpy()
    _, rows = np.unique(values, return_counts=True)
    return int(rows[rows > 1].sum())


def _shared_by_executors(hashes: DataFrame) -> int:
    """`_shared_in_driver`'s count, grouped by the executors.

    The hashes are repartitioned into one partition per core before they are grouped, so that
    every core aggregates its share, rather than the one task reading a staged file aggregating
    every row first (a third faster on 1M rows); the number is explicit because adaptive
    execution would coalesce a repartition by column alone into one partition."""
    cores = hashes.sparkSession.sparkContext.defaultParallelism
    per_hash = hashes.repartition(cores, HASH).groupBy(HASH).agg(F.count(F.lit(1)).alias(ROWS))
    shared = F.col(HASH).isNotNull() & (F.col(ROWS) > 1)
    duplicated = per_hash.agg(F.sum(F.when(shared, F.col(ROWS)))).first()
    assert duplicated is not None, "a global aggregation has one row"
    return int(duplicated[0] or 0)


def _unexpected(expectation: Expectation) -> Column:
    """The rows a not-null or in-set check counts as unexpected (nulls are never outside a set)."""
    value = F.col(expectation.kwargs["column"])
    if expectation.expectation == NOT_NULL:
        return value.isNull()
    return value.isNotNull() & ~value.isin(list(expectation.kwargs["value_set"]))


def _duplicates(frame: DataFrame, column: str) -> DataFrame:
    """The values of `column` held by more than one row, with how many rows hold each (`count`)."""
    return frame.where(F.col(column).isNotNull()).groupBy(column).count().where(F.col("count") > 1)


def _sample(frame: DataFrame, expectation: Expectation) -> tuple[Any, ...]:
    """Up to SAMPLE_SIZE values of a failed counted check's unexpected rows."""
    column = expectation.kwargs["column"]
    if expectation.expectation == UNIQUE:
        repeated = F.array_repeat(F.col(column), F.col("count").cast("int"))
        values = _duplicates(frame, column).select(F.explode(repeated))
    else:
        values = frame.where(_unexpected(expectation)).select(column)
    return tuple(row[0] for row in values.limit(SAMPLE_SIZE).collect())


def _gx_judge_of_count(expectation: Expectation, index: int) -> Any:
    """The GX expectation that judges a counted check's observed value, in the counts frame's
    column `index`: the expected rows exactly, or no unexpected rows."""
    wanted = expectation.kwargs["value"] if expectation.expectation == ROW_COUNT else 0
    return ExpectColumnMaxToBeBetween(
        column=str(index), min_value=wanted, max_value=wanted, meta={"index": index}
    )


def _run(
    context: AbstractDataContext, name: str, frame: DataFrame | pd.DataFrame, expectations: Mapping[int, Any]
) -> dict[int, tuple[bool, dict[str, Any]]]:
    """One GX validation of `expectations` over `frame` (pandas or Spark): by index, whether each
    passed and its result."""
    if not expectations:
        return {}
    source = (
        context.data_sources.add_pandas(name)
        if isinstance(frame, pd.DataFrame)
        else context.data_sources.add_spark(name)
    )
    batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(name)
    gx_suite = context.suites.add(gx.ExpectationSuite(name=name))
    for expectation in expectations.values():
        gx_suite.add_expectation(expectation)
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=batch, suite=gx_suite)
    )
    result: ExpectationSuiteValidationResult = validation.run(
        batch_parameters={"dataframe": frame},
        # BASIC: the unexpected count and a sample; SUMMARY would add a Spark job per expectation
        # for value counts that no report shows.
        result_format={"result_format": "BASIC", "partial_unexpected_count": SAMPLE_SIZE},
    )
    return {_index(outcome): (bool(outcome.success), dict(outcome.result)) for outcome in result.results}


def _index(outcome: Any) -> int:
    """The position in `suite_expectations` of the expectation an outcome is for (kept in its meta)."""
    config = outcome.expectation_config
    assert config is not None, "GX reports each outcome with its expectation"
    return int(config.meta["index"])


def _gx_expectation(expectation: Expectation, index: int) -> Any:
    """The GX expectation object for a spec entry (`expect_column_values_to_be_between` ->
    `ExpectColumnValuesToBeBetween`); ValueError naming it when GX has no such expectation."""
    class_name = "".join(part.capitalize() for part in expectation.expectation.split("_"))
    expectation_class = getattr(gxe, class_name, None)
    if expectation_class is None:
        raise ValueError(f"Great Expectations has no expectation {expectation.expectation!r}")
    try:
        return expectation_class(**expectation.kwargs, meta={"index": index})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{expectation.expectation} {expectation.kwargs}: {error}") from error


def _describe(expectation: Expectation) -> str:
    """`expect_column_values_to_be_unique(column=event_id)`: how the ledger and Slack name a check."""
    arguments = ", ".join(f"{key}={value}" for key, value in expectation.kwargs.items())
    return f"{expectation.expectation}({arguments})" if arguments else expectation.expectation
