"""The compaction audit: real Great Expectations on a real Spark DataFrame."""

from __future__ import annotations

import great_expectations as gx
import pytest
from pyspark.sql import SparkSession

from ops.spec.job import QualitySuite
from ops.warehouse import audit as audit_module
from ops.warehouse.audit import _gx_expectation, _is_counted, _run, audit, suite_expectations

ROWS = [
    ("e1", "u1", 10.0, "2026-11-24", 10),
    ("e2", "u2", 20.0, "2026-11-24", 10),
    ("e2", None, -5.0, "2026-11-24", 10),
]
COLUMNS = ["event_id", "user_id", "amount", "event_date", "event_hour"]


def test_the_built_in_and_declared_checks_report_each_verdict_with_observed_values(
    spark: SparkSession,
) -> None:
    frame = spark.createDataFrame(ROWS, COLUMNS)
    suite = QualitySuite.model_validate(
        {
            "keys": ["event_id", "user_id"],
            "unique": ["event_id"],
            "expectations": [
                {
                    "expectation": "expect_column_values_to_be_between",
                    "kwargs": {"column": "amount", "min_value": 0},
                    "severity": "warn",
                },
                {"expectation": "expect_column_to_exist", "kwargs": {"column": "amount"}},
            ],
        }
    )
    result = audit(
        frame, suite, expected_rows=3, partition_values={"event_date": "2026-11-24", "event_hour": 10}
    )
    verdicts = {check.check: (check.severity, check.passed, check.observed) for check in result.checks}
    assert verdicts == {
        "expect_table_row_count_to_equal(value=3)": ("block", True, 3),
        "expect_column_values_to_not_be_null(column=event_id)": ("block", True, 0),
        "expect_column_values_to_not_be_null(column=user_id)": ("block", False, 1),
        "expect_column_values_to_be_unique(column=event_id)": ("block", False, 2),
        "expect_column_values_to_be_in_set(column=event_date, value_set=['2026-11-24'])": ("block", True, 0),
        "expect_column_values_to_be_in_set(column=event_hour, value_set=[10])": ("block", True, 0),
        "expect_column_values_to_be_between(column=amount, min_value=0)": ("warn", False, 1),
        "expect_column_to_exist(column=amount)": ("block", True, None),
    }
    assert not result.passed
    assert [check.check for check in result.blocking] == [
        "expect_column_values_to_not_be_null(column=user_id)",
        "expect_column_values_to_be_unique(column=event_id)",
    ]
    [duplicates] = [check for check in result.blocking if "unique" in check.check]
    assert (
        duplicates.line()
        == "expect_column_values_to_be_unique(column=event_id) [block]: observed 2, e.g. ['e2', 'e2']"
    )
    assert [check.check for check in result.warnings] == [
        "expect_column_values_to_be_between(column=amount, min_value=0)"
    ]
    assert result.to_dict()["passed"] is False


def test_an_expectation_gx_does_not_have_is_refused_by_name(spark: SparkSession) -> None:
    suite = QualitySuite.model_validate({"expectations": [{"expectation": "expect_rows_to_be_nice"}]})
    with pytest.raises(ValueError, match="Great Expectations has no expectation 'expect_rows_to_be_nice'"):
        audit(spark.createDataFrame(ROWS, COLUMNS), suite, expected_rows=3, partition_values={})


@pytest.mark.parametrize("hashes_counted_by", ["driver", "executors"])
def test_the_counted_checks_report_what_gx_finds_scanning_the_rows(
    hashes_counted_by: str, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row count, not null, unique and in set are counted by one aggregation and GX judges the
    counts; each reports the observed value and sample GX's own check over the rows gives, whether
    the unique columns' hashes are counted in the driver (a partition as large as the limit) or
    grouped by the executors (a larger one)."""
    if hashes_counted_by == "executors":
        monkeypatch.setattr(audit_module, "HASHES_IN_DRIVER_MAX_ROWS", 4)
    rows = [
        ("e1", "u1", "2026-11-24"),
        ("e2", "u2", "2026-11-24"),
        ("e2", None, "2026-11-24"),
        ("e3", "u3", "2026-11-23"),
        (None, "u4", "2026-11-24"),
        (None, None, None),
    ]
    frame = spark.createDataFrame(rows, "event_id string, user_id string, event_date string")
    suite = QualitySuite.model_validate({"keys": ["user_id"], "unique": ["event_id", "user_id"]})
    expectations = suite_expectations(suite, 5, {"event_date": "2026-11-24"})
    assert all(_is_counted(expectation) for expectation in expectations)

    context = gx.get_context(mode="ephemeral")
    by_gx = _run(context, "rows", frame, {i: _gx_expectation(e, i) for i, e in enumerate(expectations)})
    scanned = [
        (
            passed,
            found.get("observed_value", found.get("unexpected_count")),
            sorted(found.get("partial_unexpected_list") or (), key=str),
        )
        for passed, found in (by_gx[index] for index in range(len(expectations)))
    ]
    counted = [
        (check.passed, check.observed, sorted(check.sample, key=str))
        for check in audit(frame, suite, 5, {"event_date": "2026-11-24"}).checks
    ]
    assert (
        counted
        == scanned
        == [
            (False, 6, []),
            (False, 2, [None, None]),
            (False, 2, ["e2", "e2"]),
            (True, 0, []),
            (False, 1, ["2026-11-23"]),
        ]
    )


def test_a_counted_kind_with_other_arguments_is_run_by_gx_over_the_rows(spark: SparkSession) -> None:
    suite = QualitySuite.model_validate(
        {
            "expectations": [
                {
                    "expectation": "expect_column_values_to_not_be_null",
                    "kwargs": {"column": "user_id", "mostly": 0.5},
                }
            ]
        }
    )
    result = audit(spark.createDataFrame(ROWS, COLUMNS), suite, expected_rows=3, partition_values={})
    assert [check.line() for check in result.checks] == [
        "expect_table_row_count_to_equal(value=3) [block]: observed 3",
        "expect_column_values_to_not_be_null(column=user_id, mostly=0.5) [block]: observed 1, e.g. [None]",
    ]
    assert result.passed


def test_a_suite_naming_a_column_the_partition_has_not_is_refused(spark: SparkSession) -> None:
    suite = QualitySuite.model_validate({"keys": ["user"], "unique": ["event_id"]})
    with pytest.raises(ValueError, match=r"names columns the partition has not: \['user'\]"):
        audit(spark.createDataFrame(ROWS, COLUMNS), suite, expected_rows=3, partition_values={})
