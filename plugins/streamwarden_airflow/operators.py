"""Operators that run supervisor passes and operator requests; all logic lives in `ops/`."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ops.clock import utcnow
from ops.console.authoring import create_job, edit_job
from ops.control.fleet import FleetWatch
from ops.control.supervisor import PassSummary, Supervisor
from ops.exceptions import WardenError
from ops.ledger.store import Ledger
from ops.spec.platform import SUPERVISE_DAG_PREFIX, PlatformConfig, load_platform
from streamwarden_airflow.triggers import JobWatchTrigger


class SupervisorOperator(BaseOperator):
    """Base for operators that need the platform's supervisor."""

    @cached_property
    def platform(self) -> PlatformConfig:
        return load_platform()

    @cached_property
    def supervisor(self) -> Supervisor:
        return Supervisor.for_platform(self.platform)

    def run_url(self, context: Context) -> str:
        """The Airflow UI link of this DAG run, quoted in alerts."""
        dag_run = context["dag_run"]
        return f"{self.platform.airflow.base_url}/dags/{dag_run.dag_id}/runs/{dag_run.run_id}"

    def reconcile(self, job: str, context: Context) -> PassSummary:
        summary = self.supervisor.reconcile(job, run_url=self.run_url(context))
        self.log.info("%s", summary.line())
        return summary


class ReconcileOperator(SupervisorOperator):
    """One reconcile pass for `job`: observe, record, validate, decide, act."""

    def __init__(self, *, job: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job

    def execute(self, context: Context) -> str:
        return self.reconcile(self.job, context).state


class WatchJobOperator(SupervisorOperator):
    """Defers to `JobWatchTrigger`; when it fires, records what it saw and reconciles at once."""

    def __init__(
        self, *, job: str, poll_interval: float = 1.0, max_wait: float = 60.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.poll_interval = poll_interval
        self.max_wait = max_wait

    def execute(self, context: Context) -> None:
        trigger = JobWatchTrigger(
            job=self.job,
            conf_dir=str(self.platform.conf_dir),
            poll_interval=self.poll_interval,
            timeout=self.max_wait,
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        if event["reason"] is None:
            self.log.info("%s: nothing to do for %ss; periodic pass", self.job, self.max_wait)
        else:
            self.supervisor.record_detection(self.job, event["reason"], event["detected_at"])
            self.log.info("%s: %s (seen at %s)", self.job, event["reason"], event["detected_at"])
        return self.reconcile(self.job, context).state


class SuperviseFleetOperator(SupervisorOperator):
    """Supervises every job of a fleet for `minutes`, then ends (the continuous `warden_fleet` DAG
    starts the next run's at once). Every `poll_interval` seconds it sweeps the fleet
    (`ops.control.fleet.FleetWatch`) and runs a pass, in this process, for each job that needs
    one: a detection is recorded first, as a job's own watch records it. A job whose pass raises
    is logged and looked at again at the next sweep; the rest of the fleet goes on. A sweep that
    raises (the ledger unreachable for a moment, a job file that cannot be read) is logged and
    tried again a poll later: failing the task would leave every job unwatched until its retry."""

    def __init__(
        self, *, minutes: float, pass_every_seconds: float, poll_interval: float = 1.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.minutes = minutes
        self.pass_every_seconds = pass_every_seconds
        self.poll_interval = poll_interval

    def execute(self, context: Context) -> str:
        watch = FleetWatch(self.supervisor, self.pass_every_seconds, self.poll_interval)
        run_url = self.run_url(context)
        deadline = time.monotonic() + self.minutes * 60
        passes = acted = 0
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                needing = watch.sweep()
            except Exception:  # the whole fleet's watch must outlast a moment's failure
                self.log.exception("the fleet sweep failed; sweeping again in %.0f s", self.poll_interval)
                needing = []
            for due in needing:
                try:
                    if due.reason is not None:
                        self.supervisor.record_detection(due.job, due.reason, utcnow().isoformat())
                    summary = self.supervisor.reconcile(due.job, run_url=run_url)
                except Exception:  # one job's broken pass must not leave the rest unwatched
                    self.log.exception("%s: the pass failed; the next sweep looks at it again", due.job)
                    continue
                finally:
                    watch.passed(due.job)
                passes += 1
                # The pass logs its own line.
                acted += due.reason is not None or bool(summary.actions)
            time.sleep(max(0.0, self.poll_interval - (time.monotonic() - started)))
        return f"{passes} passes, {acted} of them for a reason or with an action"


class JobRequestOperator(SupervisorOperator):
    """Records an operator request (suspend, resume or restart) for the supervisor to carry out."""

    template_fields: Sequence[str] = ("job", "reason")

    def __init__(self, *, action: str, job: str, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.action = action
        self.job = job
        self.reason = reason

    def execute(self, context: Context) -> str:
        message = self.supervisor.request(
            self.job, self.action, f"{self.reason} (via {self.run_url(context)})"
        )
        self.log.info("%s", message)
        return message


class ScaleOperator(SupervisorOperator):
    """Pins a job's cores until released, or releases them (`cores` empty); the job's supervision
    passes rescale its driver."""

    template_fields: Sequence[str] = ("job", "cores", "reason")

    def __init__(self, *, job: str, cores: str, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.cores = cores
        self.reason = reason

    def execute(self, context: Context) -> str:
        cores = int(self.cores) if self.cores else None
        message = self.supervisor.scale(self.job, cores, f"{self.reason} (via {self.run_url(context)})")
        self.log.info("%s", message)
        return message


class SavepointOperator(SupervisorOperator):
    """Takes a savepoint of a job now (it keeps running) and applies its retention."""

    template_fields: Sequence[str] = ("job", "reason")

    def __init__(self, *, job: str, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.reason = reason

    def execute(self, context: Context) -> str:
        line = self.supervisor.savepoint(self.job, f"{self.reason} (via {self.run_url(context)})").line()
        self.log.info("%s", line)
        return line


class RestateOperator(SupervisorOperator):
    """Restates a job from a savepoint (by id, or the newest before a time); a dry run only reports.

    The real run is `ops.recovery.restate.restate`: it records the restatement in the ledger and
    runs reconcile passes (stop, rewind, replay with the current code, a ledger entry and a Slack
    summary) until the supervisor's loop has finished it, logging each step. If this task dies,
    the job's supervision DAG finishes the restatement. The DAG's next task republishes the
    warehouse partitions it changed (`RepublishOperator`, through spark-submit). A scheduled
    restatement gives neither id nor time but `lookback_hours`: the newest savepoint taken that
    long before the run starts.
    """

    template_fields: Sequence[str] = ("job", "savepoint", "before", "reason", "dry_run")

    def __init__(
        self,
        *,
        job: str,
        savepoint: str,
        before: str,
        reason: str,
        dry_run: Any,
        lookback_hours: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.savepoint = savepoint
        self.before = before
        self.reason = reason
        self.dry_run = dry_run
        self.lookback_hours = lookback_hours

    def execute(self, context: Context) -> str:
        # Imported here: recovery loads pyarrow and boto3, which no DAG parse needs.
        from ops.recovery.restate import restate
        from ops.recovery.rewind import parse_moment, rewind_job

        savepoint_id = self.savepoint.strip() or None
        before = parse_moment(self.before) if self.before.strip() else None
        if savepoint_id is None and before is None and self.lookback_hours is not None:
            before = utcnow() - timedelta(hours=self.lookback_hours)
        if (savepoint_id is None) == (before is None):
            raise WardenError("give exactly one of `savepoint` (an id) or `before` (an ISO 8601 time)")
        reason = f"{self.reason} (via {self.run_url(context)})"
        if str(self.dry_run).lower() in ("true", "1"):
            plan = rewind_job(
                self.supervisor,
                self.job,
                reason=reason,
                savepoint_id=savepoint_id,
                before=before,
                dry_run=True,
                kind="restate",
            )
            self.log.info("dry run, nothing changed:\n%s", plan.describe())
            return plan.describe()
        summary = restate(
            self.supervisor,
            self.job,
            reason=reason,
            savepoint_id=savepoint_id,
            before=before,
            progress=lambda line: self.log.info("%s", line),
            # The DAG's `republish` task submits the compaction of what it changed.
            republish=False,
        )
        self.log.info("%s", summary)
        return summary


class CreateJobOperator(BaseOperator):
    """Writes a new job's file drafted on the board's New job form once it checks out again
    (`ops.console.authoring.create_job`); the job's supervision DAG appears at the next parse of
    the DAG files, paused until someone starts it."""

    template_fields: Sequence[str] = ("job_file",)

    def __init__(self, *, job_file: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_file = job_file

    def execute(self, context: Context) -> str:
        platform = load_platform()
        spec = create_job(platform, self.job_file)
        self.log.info(
            "wrote %s/jobs/%s.yaml (config %s, analysed by Spark); %s%s appears paused at the next parse",
            platform.conf_dir,
            spec.name,
            spec.config_version,
            SUPERVISE_DAG_PREFIX,
            spec.name,
        )
        return spec.name


class EditJobOperator(SupervisorOperator):
    """Deploys a job's new version drafted on the board's Edit form through `warden upgrade`
    (`ops.console.authoring.edit_job`): a savepoint, a dry run, the deploy, a rollback if the new
    version does not get ready; the task fails unless it ends upgraded. If the task dies, the job's
    supervision DAG finishes the upgrade, as for `warden upgrade`."""

    template_fields: Sequence[str] = ("job", "job_file", "reason")

    def __init__(self, *, job: str, job_file: str, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.job_file = job_file
        self.reason = reason

    def execute(self, context: Context) -> str:
        result = edit_job(
            self.supervisor,
            self.job,
            self.job_file,
            reason=f"{self.reason} (via {self.run_url(context)})",
            progress=lambda line: self.log.info("%s", line),
        )
        self.log.info("%s", result.line())
        if result.outcome != "upgraded":
            raise AirflowFailException(result.line())
        return result.line()


class PrepareBackfillOperator(BaseOperator):
    """Plan a backfill and stage its archive partitions; returns the run directory for the Spark
    submit. A dry run logs the plan and skips the rest of the DAG run."""

    template_fields = (
        "job",
        "start",
        "end",
        "candidate",
        "throttle_seconds",
        "max_batch_bytes",
        "bootstrap",
        "whole_partitions",
        "dry_run",
    )

    def __init__(
        self,
        *,
        job: str,
        end: str,
        start: str = "",
        candidate: str = "",
        throttle_seconds: str = "0",
        max_batch_bytes: str = "",
        bootstrap: str = "False",
        whole_partitions: str = "False",
        dry_run: str = "False",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.start = start
        self.end = end
        self.candidate = candidate
        self.throttle_seconds = throttle_seconds
        self.max_batch_bytes = max_batch_bytes
        self.bootstrap = bootstrap
        self.whole_partitions = whole_partitions
        self.dry_run = dry_run

    def execute(self, context: Context) -> str:
        # Imported here: planning loads boto3 and pyarrow, which no DAG parse needs.
        from ops.backfill.plan import BackfillRequest, describe, plan_backfill
        from ops.backfill.run import prepare_backfill
        from ops.recovery.rewind import parse_moment

        platform = load_platform()
        request = BackfillRequest(
            self.job,
            end=parse_moment(self.end),
            start=parse_moment(self.start) if self.start.strip() else None,
            candidate=Path(self.candidate) if self.candidate.strip() else None,
            throttle_seconds=float(self.throttle_seconds),
            max_batch_bytes=int(self.max_batch_bytes) if self.max_batch_bytes.strip() else None,
            bootstrap=_flag(self.bootstrap),
            whole_partitions=_flag(self.whole_partitions),
        )
        if _flag(self.dry_run):
            run, plan, _ = plan_backfill(platform, request, utcnow())
            self.log.info("dry run, nothing staged:\n%s", "\n".join(describe(plan, run)))
            raise AirflowSkipException("dry run")
        run, plan = prepare_backfill(platform, request, utcnow())
        self.log.info("%s", "\n".join(describe(plan, run)))
        return str(run.root)


class BackfillReportOperator(BaseOperator):
    """Check a finished backfill's staged output and log a row per micro-batch and what the publish
    did with each target partition (failing when the quality gate blocked it); with bootstrap, take
    the savepoint the live job starts from."""

    template_fields = ("run_dir",)

    def __init__(self, *, run_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_dir = run_dir

    def execute(self, context: Context) -> list[str]:
        from ops.backfill.bootstrap import bootstrap_savepoint
        from ops.backfill.run import publication_lines, report_lines, verify_output
        from ops.driver.backfill import BackfillRun

        platform = load_platform()
        run = BackfillRun(Path(self.run_dir))
        plan = run.read_plan()
        lines = report_lines(plan, verify_output(platform, run))
        published, blocked = publication_lines(run)
        lines += published
        if run.diff_file.is_file():
            lines += [f"diff {entry}" for entry in json.loads(run.diff_file.read_text())]
        if plan.bootstrap:
            savepoint = bootstrap_savepoint(platform, Ledger.open(platform.resolved_ledger_url), run)
            lines.append(f"bootstrap savepoint {savepoint.id} (batch {savepoint.batch_id})")
        for line in lines:
            self.log.info("%s", line)
        if blocked:
            raise AirflowFailException(
                f"backfill {plan.run_id}: the quality gate blocked the publish (paged)"
            )
        return lines


def _flag(value: str) -> bool:
    return str(value).lower() in ("true", "1")
