"""The audit of write-audit-publish: Great Expectations (GX Core 1.x) on the compacted DataFrame.

Every partition gets the built-in checks, then the job's own (`operations.quality`):

- the row count equals the committed rows of the source partition (compaction lost or
  duplicated nothing);
- `keys` are never null, `unique` columns have no duplicates;
- each partition column holds only the partition's value (no file landed in the wrong place).

Each check has a severity: `block` fails the audit (nothing is published), `warn` is reported.
The built-in ones block. GX's fixed cost is high (seconds per expectation on a small machine),
which is why a partition is audited once, at compaction, never per micro-batch.

GX computes its metrics by Spark jobs over the batch (an aggregation per validation, then a
sample per expectation), so the audited frame is cached for the validation. GX's uniqueness check
is a window over the whole partition that it evaluates for every one of those jobs, each a sort
of every row; instead the frame carries, per unique column, the value where it occurs more than
once (one hash aggregation, computed into the cache), and GX checks that column is null: the same
unexpected rows, count and sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
from great_expectations.data_context.types.base import ProgressBarsConfig
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.spec.job import Expectation, QualitySuite

SAMPLE_SIZE = 5
UNIQUE = "expect_column_values_to_be_unique"
# The audited frame's column holding a unique column's duplicated values (null where unique).
DUPLICATES_PREFIX = "__duplicates_of_"


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
    builtin = [Expectation(expectation="expect_table_row_count_to_equal", kwargs={"value": expected_rows})]
    builtin += [
        Expectation(expectation="expect_column_values_to_not_be_null", kwargs={"column": key})
        for key in suite.keys
    ]
    builtin += [
        Expectation(expectation="expect_column_values_to_be_unique", kwargs={"column": column})
        for column in suite.unique
    ]
    builtin += [
        Expectation(
            expectation="expect_column_values_to_be_in_set", kwargs={"column": column, "value_set": [value]}
        )
        for column, value in partition_values.items()
    ]
    return [*builtin, *suite.expectations]


def audit(
    frame: DataFrame, suite: QualitySuite, expected_rows: int, partition_values: Mapping[str, Any]
) -> AuditResult:
    """Run the partition's expectations on `frame` (one GX validation over the cached frame)."""
    expectations = suite_expectations(suite, expected_rows, partition_values)
    unique = [expectation.kwargs["column"] for expectation in expectations if _plain_unique(expectation)]
    checked = with_duplicates(frame, unique).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    try:
        return _validate(checked, expectations)
    finally:
        checked.unpersist()


def with_duplicates(frame: DataFrame, columns: Sequence[str]) -> DataFrame:
    """`frame` with a `__duplicates_of_<column>` column per unique column: the value where more than
    one row holds it, else null (nulls are never duplicates, as in GX's own uniqueness check).

    The repeated values come from one hash aggregation and are broadcast to the rows (a window,
    as GX's check uses, sorts every row: twice the time on a 1M-row partition).
    """
    marked = frame
    for column in dict.fromkeys(columns):
        mark = f"{DUPLICATES_PREFIX}{column}"
        repeated = frame.groupBy(column).count().where(F.col("count") > 1).select(F.col(column).alias(mark))
        marked = marked.join(F.broadcast(repeated), marked[column] == repeated[mark], "left")
    return marked


def _plain_unique(expectation: Expectation) -> bool:
    return expectation.expectation == UNIQUE and set(expectation.kwargs) == {"column"}


def _validate(frame: DataFrame, expectations: list[Expectation]) -> AuditResult:
    context = gx.get_context(mode="ephemeral")
    # Progress bars would interleave with the task's log lines.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_spark(name="compaction")
        .add_dataframe_asset(name="partition")
        .add_batch_definition_whole_dataframe("whole")
    )
    gx_suite = context.suites.add(gx.ExpectationSuite(name="partition"))
    for index, expectation in enumerate(expectations):
        gx_suite.add_expectation(_gx_expectation(expectation, index))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name="audit", data=batch, suite=gx_suite)
    )
    result = validation.run(
        batch_parameters={"dataframe": frame},
        # BASIC: the unexpected count and a sample; SUMMARY would add a Spark job per expectation
        # for value counts that no report shows.
        result_format={"result_format": "BASIC", "partial_unexpected_count": SAMPLE_SIZE},
    )
    checks = []
    for outcome in sorted(result.results, key=_index):
        expectation = expectations[_index(outcome)]
        found = outcome.result
        checks.append(
            CheckResult(
                check=_describe(expectation),
                severity=expectation.severity,
                passed=bool(outcome.success),
                observed=found.get("observed_value", found.get("unexpected_count")),
                sample=tuple(found.get("partial_unexpected_list") or ())[:SAMPLE_SIZE],
            )
        )
    return AuditResult(tuple(checks))


def _index(outcome: Any) -> int:
    """The position in `suite_expectations` of the expectation an outcome is for (kept in its meta)."""
    config = outcome.expectation_config
    assert config is not None, "GX reports each outcome with its expectation"
    return int(config.meta["index"])


def _gx_expectation(expectation: Expectation, index: int) -> Any:
    """The GX expectation object for a spec entry (`expect_column_values_to_be_unique` ->
    `ExpectColumnValuesToBeUnique`); ValueError naming it when GX has no such expectation."""
    name, kwargs = expectation.expectation, expectation.kwargs
    if _plain_unique(expectation):
        # See the module docstring: the duplicated values, computed by `with_duplicates`.
        name, kwargs = "expect_column_values_to_be_null", {"column": f"{DUPLICATES_PREFIX}{kwargs['column']}"}
    class_name = "".join(part.capitalize() for part in name.split("_"))
    expectation_class = getattr(gxe, class_name, None)
    if expectation_class is None:
        raise ValueError(f"Great Expectations has no expectation {expectation.expectation!r}")
    try:
        return expectation_class(**kwargs, meta={"index": index})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{expectation.expectation} {expectation.kwargs}: {error}") from error


def _describe(expectation: Expectation) -> str:
    """`expect_column_values_to_be_unique(column=event_id)`: how the ledger and Slack name a check."""
    arguments = ", ".join(f"{key}={value}" for key, value in expectation.kwargs.items())
    return f"{expectation.expectation}({arguments})" if arguments else expectation.expectation
