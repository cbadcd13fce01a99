"""Script UDFs that change while their job runs: the store of decided versions on its own, and a
router job under the supervisor whose UDF file is edited between batches: each later batch runs
the new version in the same run, the ledger names the version from each batch on, a broken edit
keeps the version before it and pages once, and the next good edit resolves the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ops.control.recorder import UDF_VERSIONS_ACTION
from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.udf_versions import (
    KEPT_DECISIONS,
    Refusal,
    UdfDecision,
    decided_batches,
    forget_after,
    previous_decision,
    record_decision,
    version_of,
)
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import caught_up, edit_job, wait_for
from tests.support.slack import SlackReceiver

QUERY = "5f0c9d2e-query"


def test_the_first_decision_of_a_batch_stands_and_a_rewind_forgets_the_later_ones(tmp_path: Path) -> None:
    first = UdfDecision(3, {"flagged": "aaa"})
    second = UdfDecision(3, {"flagged": "bbb"}, {"other": Refusal("ccc", "SyntaxError")})

    assert record_decision(tmp_path, QUERY, first) == first
    # Another task of batch 3 decided on a newer file: the first decision is the batch's.
    assert record_decision(tmp_path, QUERY, second) == first
    for batch in range(4, 4 + KEPT_DECISIONS):
        record_decision(tmp_path, QUERY, UdfDecision(batch, {"flagged": f"v{batch}"}))

    assert decided_batches(tmp_path, QUERY) == list(range(4, 4 + KEPT_DECISIONS))
    assert previous_decision(tmp_path, QUERY, 10) == UdfDecision(9, {"flagged": "v9"})
    assert forget_after(tmp_path, QUERY, 50) == list(range(51, 4 + KEPT_DECISIONS))
    assert previous_decision(tmp_path, QUERY, 200) == UdfDecision(50, {"flagged": "v50"})
    assert not list(tmp_path.rglob(".*.tmp"))


def flag_module(threshold: float) -> str:
    return f"def flagged(amount):\n    return amount > {threshold}\n"


def with_flag_route(spec: dict[str, Any]) -> None:
    """The router with one route whose filter calls the script UDF `flagged`, a file per batch."""
    spec["pipeline"]["udfs"] = [
        {"name": "flagged", "file": "udfs/flag.py", "function": "flagged", "returns": "boolean"}
    ]
    spec["pipeline"]["routes"] = [
        {"name": "flagged", "filter": "flagged(amount)", "columns": ["event_id", "amount"]}
    ]
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"]["autoscaling"] = {"mode": "off"}


@pytest.mark.spark
def test_a_udf_file_edited_while_its_job_runs_changes_the_logic_at_the_next_batch_without_a_restart(
    platform_conf: PlatformConfig,
    ledger: Ledger,
    slack_webhook: SlackReceiver,
    spark: SparkSession,
) -> None:
    platform = platform_conf
    udf_file = platform.conf_dir / "jobs" / "udfs" / "flag.py"
    udf_file.parent.mkdir()
    udf_file.write_text(flag_module(100))
    edit_job(platform, "router", with_flag_route)
    landing = platform.landing_root / "events"
    supervisor = Supervisor.for_platform(platform)
    thresholds: list[float] = []
    batches = []

    def reconciled_until(state: str) -> bool:
        return supervisor.reconcile("router").state == state

    def next_batch(threshold: float, source: str | None = None) -> None:
        """The UDF file as `source` (by default flagging above `threshold`), then one input file
        the job reads in a batch of its own."""
        udf_file.write_text(source or flag_module(threshold))
        thresholds.append(threshold)
        batches.append(write_batch(landing, 200, 0.0, seed=len(batches) + 1))
        wait_for(lambda: caught_up(platform, "router", files=len(batches)), 120, f"input file {len(batches)}")

    try:
        wait_for(lambda: reconciled_until("RUNNING"), 300, "the router RUNNING")
        next_batch(100)
        next_batch(10)
        # A broken edit: the batch keeps the version before it.
        next_batch(10, source="def flagged(amount):\n    return amount >\n")
        wait_for(lambda: reconciled_until("DEGRADED"), 60, "the refused version reported")
        for _ in range(3):
            assert supervisor.reconcile("router").state == "DEGRADED"
        next_batch(50)
        wait_for(lambda: reconciled_until("RUNNING"), 60, "the fixed version running")
    finally:
        stop_all_jobs(platform)

    rows = spark.read.parquet(str(platform.lake_root / "router")).where("route = 'flagged'").collect()
    flagged = {row["event_id"] for row in rows}
    expected = {
        event["event_id"]
        for batch, threshold in zip(batches, thresholds, strict=True)
        for event in batch.events
        if (event.get("amount") or 0) > threshold
    }
    assert flagged == expected
    assert len(rows) == len(flagged)

    assert len(ledger.runs("router")) == 1, "the job was restarted"
    named = [
        (d.inputs["from_batch"], d.inputs["versions"]["flagged"])
        for d in reversed(ledger.decisions("router", action=UDF_VERSIONS_ACTION))
    ]
    assert named == [
        (0, version_of(flag_module(100).encode())),
        (1, version_of(flag_module(10).encode())),
        (3, version_of(flag_module(50).encode())),
    ]

    pages = [m["text"] for m in slack_webhook.messages if "udf refused" in m["text"]]
    assert len(pages) == 2, pages
    assert "udf 'flagged' version" in pages[0] and "SyntaxError" in pages[0], pages
    assert pages[1].startswith("✅ resolved: router udf refused"), pages
