"""Bounded Spark work through the Spark provider's SparkSubmitOperator on the master of
platform.yaml (compaction, a restatement's republish, backfill), the nightly compaction task, and
its Slack page when it fails.

Compaction is bounded batch work, so it runs through spark-submit (streams never do: docs/architecture.md
§2). The master, the metastore confs and the Python the driver runs are the platform's, read
when the task runs, never when the DAG file is parsed.
"""

from __future__ import annotations

import os
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from ops.alerts import Alert, AlertCenter
from ops.backfill.submit import publish_application_file
from ops.ledger.store import Ledger
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig, load_platform
from ops.warehouse.metastore import metastore_conf

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPACTION_APPLICATION = REPO_ROOT / "ops" / "warehouse" / "compaction.py"
COMPACTION_FAILED_KIND = "compaction_failed"


class PlatformSparkSubmitOperator(SparkSubmitOperator):
    """The Spark provider's SparkSubmitOperator on the platform's Spark master (local[N], the
    embedded cluster, or a spark:// URL: the one every Streamwarden driver uses, not an Airflow
    connection's), with its network settings, and this interpreter and the repository for the
    driver and its Python workers. Bounded batch work (compaction, backfill) runs through it;
    streams never do (docs/architecture.md §2)."""

    @cached_property
    def platform(self) -> PlatformConfig:
        return load_platform()

    def platform_conf(self, platform: PlatformConfig) -> dict[str, str]:
        """The Spark confs the application gets from the platform."""
        return platform.spark.network_conf()

    def execute(self, context: Context) -> None:
        platform = self.platform
        self.conf = {**self.platform_conf(platform), **(self.conf or {})}
        bin_dir = str(Path(sys.executable).parent)
        self.env_vars = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
            CONF_DIR_ENV: str(platform.conf_dir),
            **platform.spark.network_env(),
            **(self.env_vars or {}),
        }
        try:
            super().execute(context)
        finally:
            # The hook reads spark-submit's output to its end but never closes the pipe (provider
            # 6.3.4); left to the garbage collector, it is an unclosed-file warning in a later task.
            process = self._hook._submit_sp if self._hook is not None else None
            if process is not None and process.stdout is not None:
                process.stdout.close()

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        hook._connection["master"] = self.platform.spark.master_url
        return hook


class CompactOperator(PlatformSparkSubmitOperator):
    """spark-submit `ops/warehouse/compaction.py --job JOB --now <the run's interval end>` (plus the
    `partitions` the trigger form names, templated) on the platform's Spark master."""

    def __init__(self, *, job: str, partitions: str = "", **kwargs: Any) -> None:
        super().__init__(
            application=str(COMPACTION_APPLICATION),
            name=f"streamwarden-compaction-{job}",
            application_args=["--job", job, "--now", "{{ data_interval_end.isoformat() }}"],
            **kwargs,
        )
        self.job = job
        self.partitions = partitions

    template_fields = (*SparkSubmitOperator.template_fields, "partitions")

    def platform_conf(self, platform: PlatformConfig) -> dict[str, str]:
        return {**super().platform_conf(platform), **metastore_conf(platform)}

    def execute(self, context: Context) -> None:
        self.application_args = [*self.application_args, *_partition_args(self.partitions)]
        super().execute(context)


class RepublishOperator(PlatformSparkSubmitOperator):
    """spark-submit `ops/warehouse/compaction.py` for exactly the warehouse partitions a finished
    restatement of `job` changed (`ops.recovery.restate.plan_republish`), as the restatement's
    versions; the `republish` decision row gets a line per partition, or the failure. Nothing
    to submit after a dry run, for a job without compaction, or when nothing published changed."""

    template_fields = (*SparkSubmitOperator.template_fields, "job", "reason", "dry_run")

    def __init__(self, *, job: str, reason: str, dry_run: Any, **kwargs: Any) -> None:
        super().__init__(application=str(COMPACTION_APPLICATION), name="streamwarden-republish", **kwargs)
        self.job = job
        self.reason = reason
        self.dry_run = dry_run

    def platform_conf(self, platform: PlatformConfig) -> dict[str, str]:
        return {**super().platform_conf(platform), **metastore_conf(platform)}

    def execute(self, context: Context) -> str | None:
        # Imported here: recovery loads pyarrow and boto3, which no DAG parse needs.
        from ops.recovery.restate import plan_republish, republish_failed, republished

        if str(self.dry_run).lower() in ("true", "1"):
            self.log.info("dry run: nothing was restated, nothing to republish")
            return None
        ledger = Ledger.open(self.platform.resolved_ledger_url)
        dag_run = context["dag_run"]
        run_url = f"{self.platform.airflow.base_url}/dags/{dag_run.dag_id}/runs/{dag_run.run_id}"
        plan = plan_republish(self.platform, ledger, self.job, reason=f"{self.reason} (via {run_url})")
        if plan is None:
            self.log.info("no published partition of %s changed: nothing to republish", self.job)
            return None
        if plan.changed:
            self.application_args = plan.compaction_args()
            try:
                super().execute(context)
            except AirflowException as error:
                raise republish_failed(ledger, plan, f"spark-submit: {error}") from error
        summary = republished(ledger, plan)
        self.log.info("%s", summary)
        return summary


class BackfillPublishOperator(PlatformSparkSubmitOperator):
    """spark-submit `ops/warehouse/publish.py --run-dir DIR` (templated) with the metastore confs:
    a finished backfill's staged output into the warehouse table through the quality gate, or a
    candidate's diff against it. A job without a warehouse table has nothing to publish."""

    template_fields = (*SparkSubmitOperator.template_fields, "run_dir")

    def __init__(self, *, run_dir: str, **kwargs: Any) -> None:
        super().__init__(
            application=str(publish_application_file()),
            name="streamwarden-backfill-publish",
            application_args=["--run-dir", run_dir],
            **kwargs,
        )
        self.run_dir = run_dir

    def platform_conf(self, platform: PlatformConfig) -> dict[str, str]:
        return {**super().platform_conf(platform), **metastore_conf(platform)}

    def execute(self, context: Context) -> None:
        from ops.backfill.run import publishes
        from ops.driver.backfill import BackfillRun

        plan = BackfillRun(Path(self.run_dir)).read_plan()
        if not publishes(self.platform, plan):
            self.log.info("%s has no warehouse table (operations.compaction): nothing to publish", plan.job)
            return
        super().execute(context)


def _partition_args(partitions: str) -> list[str]:
    """`--partition KEY` for each non-empty line or comma-separated key of the form field."""
    keys = [key.strip() for line in partitions.splitlines() for key in line.split(",")]
    return [arg for key in keys if key for arg in ("--partition", key)]


def page_compaction_failure(context: Context) -> None:
    """on_failure_callback: page that a job's compaction task failed (after its retries)."""
    platform = load_platform()
    ledger = Ledger.open(platform.resolved_ledger_url)
    task = context["task"]
    job = getattr(task, "job", "unknown")
    dag_run = context["dag_run"]
    AlertCenter(ledger, platform.slack).raise_alert(
        Alert(
            job=job,
            kind=COMPACTION_FAILED_KIND,
            severity="critical",
            state="compaction failed",
            reason=f"{dag_run.dag_id} run {dag_run.run_id}: {context.get('exception')}",
            last_batch=None,
            run_url=f"{platform.airflow.base_url}/dags/{dag_run.dag_id}/runs/{dag_run.run_id}",
        )
    )
