"""Housekeeping run by the platform DAG: Spark's analyzer over the job file versions not analysed
yet, one page per invalid job file, closed when it is fixed, and the ledger's retention. (The
platform DAG's other housekeeping, orphaned output and savepoint retention, lives with its room:
`ops.control.sink_cleanup`, `ops.control.savepointing`.)"""

from __future__ import annotations

from ops.alerts import Alert
from ops.control.context import Control
from ops.spec.analysis import run_analysis, unanalysed, with_verdicts
from ops.spec.job import load_jobs
from ops.states import INVALID


def config_invalid(job: str, reason: str, run_url: str | None) -> Alert:
    """The page for a job file that does not validate (the last valid one stays in force)."""
    return Alert(
        job=job,
        kind="config_invalid",
        severity="critical",
        state=INVALID,
        reason=reason,
        last_batch=None,
        run_url=run_url,
    )


def analyse_job_files(control: Control) -> list[str]:
    """Run Spark's analyzer on the job files whose current version has no verdict yet (one
    local Spark session for all of them, none when every version has one); a line per job."""
    pending = unanalysed(control.platform, load_jobs(control.platform.conf_dir))
    verdicts = run_analysis(control.platform, pending)
    return [
        f"{name}: {'rejected' if verdict.rejected else 'accepted'} (config {verdict.config_version})"
        for name, verdict in verdicts.items()
    ]


def check_job_files(control: Control) -> list[str]:
    """Page once per invalid job file (invalid by itself or rejected by Spark's analyzer);
    close the page when the file is fixed."""
    alerts = control.alerts
    parsed = load_jobs(control.platform.conf_dir)
    loaded = with_verdicts(control.platform, parsed)
    problems = []
    for path, error in loaded.errors.items():
        job = path.stem
        problems.append(str(error))
        open_kinds = {a.kind for a in alerts.open_incidents(job)}
        # A driver that already refused this version paged `spec_rejected`: one page per cause.
        rejected_by_driver = job in parsed.specs and "spec_rejected" in open_kinds
        if "config_invalid" not in open_kinds and not rejected_by_driver:
            alerts.raise_alert(config_invalid(job, str(error), None))
    # A job can have a valid file and a refused one (router.yaml and router.yml): still invalid.
    invalid = {path.stem for path in loaded.errors}
    for name in set(loaded.specs) - invalid:
        if "config_invalid" in {a.kind for a in alerts.open_incidents(name)}:
            alerts.resolve(name, "config_invalid", "job file validates again")
    alerts.deliver_due()
    return problems


def prune_ledger(control: Control) -> list[str]:
    """The ledger's rows older than the platform's retention deleted; a line per table."""
    retention = control.platform.ledger.retention
    deleted = control.ledger.prune(retention, control.clock())
    return [f"{table}: {count} rows deleted" for table, count in deleted.items()]
