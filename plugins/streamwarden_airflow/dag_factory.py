"""Builds Streamwarden's DAGs from conf: one supervision DAG per valid job, plus the manual
request DAGs (the job board's New job and Edit forms among them) and the platform housekeeping DAG.

A job file that does not validate gets no supervision DAG (its driver is left as it is); the
platform DAG pages about it, and every other job's DAG still loads. That includes a file whose
current version Spark's analyzer rejected (a route filter that does not analyze, say): parsing
never starts Spark, it reads the verdict `warden validate` or the platform DAG's
`analyse_job_files` task stored for that version (`ops.spec.analysis`). A version not analysed yet
keeps its DAG until a verdict says otherwise; its driver runs the same check before it starts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from ops.backfill.submit import application_file
from ops.clock import utcnow
from ops.console.job_form import FORM_KINDS
from ops.control.supervisor import Supervisor
from ops.exceptions import ConfigError, LedgerError
from ops.ledger.schema import SCHEMA_REVISION, schema_revision
from ops.ledger.store import Ledger
from ops.prometheus_targets import refresh_scrape_targets
from ops.spec.analysis import with_verdicts
from ops.spec.job import CompactionPolicy, JobLoadResult, RestatementSchedule, load_jobs
from ops.spec.platform import FLEET_DAG_ID, SUPERVISE_DAG_PREFIX, SupervisionConfig, load_platform
from streamwarden_airflow.compaction import (
    BackfillPublishOperator,
    CompactOperator,
    PlatformSparkSubmitOperator,
    RepublishOperator,
    page_compaction_failure,
)
from streamwarden_airflow.operators import (
    BackfillReportOperator,
    CreateJobOperator,
    EditJobOperator,
    JobRequestOperator,
    PrepareBackfillOperator,
    ReconcileOperator,
    RestateOperator,
    SavepointOperator,
    ScaleOperator,
    SuperviseFleetOperator,
    WatchJobOperator,
)

START = datetime(2026, 1, 1)
REQUESTS = {
    "suspend": "Stop the job gracefully and keep it stopped until resumed.",
    "resume": "Run the job again (also resets its restart budget after a restart storm).",
    "restart": "Stop the job gracefully and start it again from its checkpoint.",
}


def supervision_dag(job: str, description: str, *, watched: bool = True) -> DAG:
    """A continuous DAG: each run is one reconcile pass, then a watch that reacts within seconds.
    Under the fleet watch (`watched=False`) it is one pass, run by hand."""
    with DAG(
        dag_id=f"{SUPERVISE_DAG_PREFIX}{job}",
        description=description or f"Supervises streaming job {job}",
        schedule="@continuous" if watched else None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,
        tags=["streamwarden", "supervision", job],
        default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    ) as dag:
        reconcile = ReconcileOperator(task_id="reconcile", job=job)
        if watched:
            reconcile >> WatchJobOperator(task_id="watch", job=job)
    return dag


def fleet_dag(supervision: SupervisionConfig) -> DAG:
    """A continuous DAG supervising every job from one task (`ops.control.fleet`); each run's task
    hands over to the next run's after `fleet_task_minutes`."""
    with DAG(
        dag_id=FLEET_DAG_ID,
        description="Supervises every job of the fleet: a sweep a second, a pass for each job that needs one",
        schedule="@continuous",
        start_date=START,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=False,
        tags=["streamwarden", "supervision", "fleet"],
        default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    ) as dag:
        SuperviseFleetOperator(
            task_id="supervise",
            minutes=supervision.fleet_task_minutes,
            pass_every_seconds=supervision.pass_every_seconds,
        )
    return dag


def _job_param(jobs: list[str], description: str) -> Param:
    """A required choice of job with nothing preselected: a default would be the first name
    alphabetically, which the person triggering the form has not chosen."""
    return Param(type="string", description=description, **({"enum": jobs} if jobs else {}))


def _job_and_reason(jobs: list[str]) -> dict[str, Param]:
    """The trigger-form fields every operator DAG asks for."""
    return {
        "job": _job_param(jobs, "The job to act on."),
        "reason": Param(type="string", minLength=3, description="Why; quoted in the ledger and in alerts."),
    }


def _savepoint_choices(jobs: list[str]) -> dict[str, str]:
    """The jobs' complete savepoints, newest first, id -> how the form shows it ("router: batch 42,
    2026-11-24 10:03 UTC"), read from the ledger at parse time (one query). Empty when the ledger
    does not exist yet or is at another schema revision: parsing never creates or migrates it."""
    try:
        platform = load_platform()
        url = platform.resolved_ledger_url
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
            return {}
        ledger = Ledger.open(url, upgrade=False)
        if schema_revision(ledger.engine) != SCHEMA_REVISION:
            return {}
        savepoints = ledger.all_savepoints(status="complete")
    except (ConfigError, LedgerError):
        return {}
    return {
        savepoint.id: (
            f"{savepoint.job}: batch {savepoint.batch_id}, {savepoint.created_at:%Y-%m-%d %H:%M} UTC"
        )
        for savepoint in savepoints
        if savepoint.job in jobs
    }


def _form_dag(
    dag_id: str, description: str, topic: str | None, params: dict[str, Param], **options: Any
) -> DAG:
    """A DAG an operator triggers with its form (Airflow's, or the job board's through Airflow's
    REST API): no schedule, tagged `operator` (and `topic`). Unpaused: a paused DAG would queue the
    form's run instead of carrying it out."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=None,
        start_date=START,
        catchup=False,
        is_paused_upon_creation=False,
        tags=["streamwarden", "operator", *([topic] if topic else [])],
        params=params,
        **options,
    )


def request_dag(action: str, jobs: list[str]) -> DAG:
    """A manual DAG whose trigger form asks for the job and a reason."""
    with _form_dag(f"warden_{action}", REQUESTS[action], None, _job_and_reason(jobs)) as dag:
        JobRequestOperator(
            task_id=action, action=action, job="{{ params.job }}", reason="{{ params.reason }}"
        )
    return dag


def savepoint_dag(jobs: list[str]) -> DAG:
    """Take a savepoint of a job now, from the trigger form."""
    with _form_dag(
        "warden_savepoint",
        "Copy a job's checkpoint to the savepoint store now; the job keeps running",
        "savepoint",
        _job_and_reason(jobs),
    ) as dag:
        SavepointOperator(task_id="savepoint", job="{{ params.job }}", reason="{{ params.reason }}")
    return dag


def scale_dag(jobs: list[str]) -> DAG:
    """Pin a job's cores (an operator's override of the autoscaler) or release the pin."""
    with _form_dag(
        "warden_scale",
        "Pin a job's cores until released, or release them to the autoscaler",
        "scale",
        {
            "job": _job_param(jobs, "The job to scale."),
            "cores": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                description=(
                    "Cores to pin the job at (the batch size follows), kept until released; leave "
                    "empty to release the pin to the autoscaler (or the job file's cores)."
                ),
            ),
            "reason": Param(type="string", minLength=3, description="Why; quoted in the ledger."),
        },
    ) as dag:
        ScaleOperator(
            task_id="scale",
            job="{{ params.job }}",
            cores="{{ params.cores or '' }}",
            reason="{{ params.reason }}",
        )
    return dag


def _job_file_param(description: str) -> Param:
    """A job file's YAML, which the board's form drafts and checks before it triggers the DAG."""
    return Param(type="string", minLength=1, format="multiline", description=description)


def new_job_dag() -> DAG:
    """Create a router or SQL job from its job file: the board's New job form triggers it through
    Airflow's REST API, so Airflow checks the user's right to; `create` checks the file as the board
    did (Spark's analyzer included) and writes `conf/jobs/<name>.yaml`. The job's supervision DAG
    appears at the next parse, paused until someone starts it."""
    with _form_dag(
        "warden_new_job",
        "Create a router or SQL job from a job file Spark's analyzer accepts",
        "authoring",
        {
            "job_file": _job_file_param(
                "The new job's file (YAML), as the job board's New job form drafts it; refused, with "
                "nothing written, when its name is taken or it does not validate."
            )
        },
    ) as dag:
        CreateJobOperator(task_id="create", job_file="{{ params.job_file }}")
    return dag


def edit_job_dag(jobs: list[str]) -> DAG:
    """Deploy a new version of a router or SQL job through `warden upgrade`: the board's Edit form
    triggers it through Airflow's REST API, so Airflow checks the user's right to."""
    with _form_dag(
        "warden_edit_job",
        "Deploy a new version of a router or SQL job's file through warden upgrade",
        "authoring",
        {
            "job": _job_param(jobs, "The job to deploy a new version of."),
            "job_file": _job_file_param(
                "The job's new file (YAML), as the job board's Edit form drafts it: a savepoint, a dry "
                "run on a copy of it, then the deploy, rolled back if the new version does not get ready."
            ),
            "reason": Param(type="string", minLength=3, description="Why; quoted in the ledger and Slack."),
        },
    ) as dag:
        EditJobOperator(
            task_id="upgrade",
            job="{{ params.job }}",
            job_file="{{ params.job_file }}",
            reason="{{ params.reason }}",
        )
    return dag


def restate_dag(jobs: list[str], schedule: RestatementSchedule | None = None) -> DAG:
    """Restate a job from a savepoint: the trigger form asks which job, from where and why.

    `republish` then submits the compaction of the warehouse partitions the replay changed through
    SparkSubmitOperator, like the nightly compaction.
    With a `schedule` (one job's `operations.restatement`) it is that job's scheduled restatement,
    `warden_restate_<job>`: it runs for real on the cron, from the newest savepoint taken
    `lookback_hours` before, and its form still allows a manual run with other values.
    """
    scheduled = schedule is not None
    savepoints = _savepoint_choices(jobs)
    with DAG(
        dag_id=f"warden_restate_{jobs[0]}" if scheduled else "warden_restate",
        description=(
            f"Scheduled restatement of {jobs[0]} from the newest savepoint {schedule.lookback_hours:g} h old"
            if schedule is not None
            else "Rewind a job to a savepoint and recompute its later output with the current code"
        ),
        schedule=schedule.cron if schedule is not None else None,
        start_date=START,
        catchup=False,
        # Unpaused: a paused DAG would queue the trigger form's run; a schedule in a job file is
        # the owner's decision to run it.
        is_paused_upon_creation=False,
        max_active_runs=1,
        tags=["streamwarden", "operator", "restate"],
        params={
            # A scheduled restatement's one job is its default: the cron run has no form.
            "job": Param(jobs[0], type="string", enum=jobs, description="The job to restate.")
            if scheduled
            else _job_param(jobs, "The job to restate."),
            # Either a savepoint or a time, so neither is required; null is "left empty".
            "savepoint": Param(
                None,
                type=["null", "string"],
                examples=list(savepoints),
                values_display=savepoints,
                description=(
                    "A savepoint of the job, from its catalogue (newest first; the job board's "
                    "'restate from here' fills it in); or leave empty and give `before`."
                ),
            ),
            "before": Param(
                None,
                type=["null", "string"],
                description=(
                    "Or leave `savepoint` empty: restate from the newest savepoint taken before this "
                    "ISO 8601 time (UTC), e.g. 2026-11-24T10:00."
                ),
            ),
            "reason": Param(
                "scheduled restatement" if scheduled else None,
                type="string",
                minLength=3,
                description="Why; quoted in the ledger and Slack.",
            ),
            "dry_run": Param(
                not scheduled,
                type="boolean",
                description="Only report the batches, files and rows it would redo.",
            ),
        },
    ) as dag:
        restated = RestateOperator(
            task_id="restate",
            job="{{ params.job }}",
            savepoint="{{ params.savepoint or '' }}",
            before="{{ params.before or '' }}",
            reason="{{ params.reason }}",
            dry_run="{{ params.dry_run }}",
            lookback_hours=schedule.lookback_hours if schedule is not None else None,
        )
        republished = RepublishOperator(
            task_id="republish",
            job="{{ params.job }}",
            reason="{{ params.reason }}",
            dry_run="{{ params.dry_run }}",
        )
        restated >> republished
    return dag


def compaction_dag(job: str, policy: CompactionPolicy) -> DAG:
    """A job's nightly write-audit-publish (`operations.compaction`): retries, a page when it still
    fails. Triggered with a form, it compacts the partitions named there now, closed or not.

    No Airflow catch-up: a run compacts every closed partition that changed since it was published,
    so the first run after missed nights catches all of them up; catch-up runs would each start a
    Spark application that finds nothing left to do."""
    with DAG(
        dag_id=f"warden_compact_{job}",
        description=f"Nightly compaction of {job}'s sink into warehouse.{job}",
        schedule=policy.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        # Like a scheduled restatement: the job file's schedule is the decision to run it.
        is_paused_upon_creation=False,
        tags=["streamwarden", "compaction", job],
        default_args={
            "retries": 2,
            "retry_delay": timedelta(minutes=5),
            "on_failure_callback": page_compaction_failure,
        },
        params={
            "partitions": Param(
                "",
                type="string",
                description="Partitions to compact now, one per line, e.g. "
                "route=purchases/event_date=2026-11-24/event_hour=10; empty: every closed partition "
                "that changed since it was published.",
            )
        },
    ) as dag:
        CompactOperator(task_id="compact", job=job, partitions="{{ params.partitions }}")
    return dag


def backfill_dag(jobs: list[str]) -> DAG:
    """Backfill a job the Kappa+ way: `prepare` plans the range (its micro-batches under the byte
    budget) and stages the archive partitions, the Spark provider's SparkSubmitOperator runs the
    bounded work (the job's own query, its log a line per micro-batch), `publish` (another
    spark-submit) takes the staged output through the quality gate into the warehouse table (a
    candidate: diffs it), `report` checks the staged output and logs a row per micro-batch and per
    published partition, failing when the gate blocked. A dry run stops after `prepare`'s plan."""
    with _form_dag(
        "warden_backfill",
        "Run a job's streaming query over archived input, as many arrival hours a micro-batch as its "
        "byte budget holds",
        "backfill",
        {
            "job": _job_param(jobs, "The job to backfill."),
            "start": Param(
                None,
                type=["null", "string"],
                description=(
                    "The first arrival hour, ISO 8601 UTC (2026-11-24T06); "
                    "left empty with bootstrap: the oldest archived hour."
                ),
            ),
            "end": Param(type="string", description="The arrival hour to stop before, ISO 8601 UTC."),
            "spec": Param(
                None,
                type=["null", "string"],
                description="A candidate job file (path): run into a side table and diffed, never published.",
            ),
            "throttle_seconds": Param(
                0, type="number", minimum=0, description="Pause after each micro-batch."
            ),
            "max_batch_bytes": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                description="The archived bytes one micro-batch reads; empty: the platform's "
                "backfill.max_batch_bytes (by default a quarter of the job's task memory).",
            ),
            "bootstrap": Param(
                False, type="boolean", description="End with a savepoint the live job starts from."
            ),
            "whole_partitions": Param(
                False,
                type="boolean",
                description="Widen the range to the arrival hours that make every warehouse partition it "
                "writes whole (otherwise a range covering a partition only in part is refused).",
            ),
            "dry_run": Param(False, type="boolean", description="Only list the micro-batches it would run."),
        },
        max_active_runs=1,
    ) as dag:
        prepared = PrepareBackfillOperator(
            task_id="prepare",
            job="{{ params.job }}",
            start="{{ params.start or '' }}",
            end="{{ params.end }}",
            candidate="{{ params.spec or '' }}",
            throttle_seconds="{{ params.throttle_seconds }}",
            max_batch_bytes="{{ params.max_batch_bytes or '' }}",
            bootstrap="{{ params.bootstrap }}",
            whole_partitions="{{ params.whole_partitions }}",
            dry_run="{{ params.dry_run }}",
        )
        submitted = PlatformSparkSubmitOperator(
            task_id="run_partitions",
            application=str(application_file()),
            application_args=["--run-dir", "{{ ti.xcom_pull(task_ids='prepare') }}"],
            name="streamwarden-backfill",
        )
        published = BackfillPublishOperator(
            task_id="publish", run_dir="{{ ti.xcom_pull(task_ids='prepare') }}"
        )
        report = BackfillReportOperator(task_id="report", run_dir="{{ ti.xcom_pull(task_ids='prepare') }}")
        prepared >> submitted >> published >> report
    return dag


def platform_dag() -> DAG:
    """Housekeeping every minute: page about invalid job files, deliver alerts still in the outbox,
    apply savepoint retention (also for jobs that are down) and the ledger's, remove sink files of
    batches that never committed, keep Prometheus' list of the drivers meant to run current."""
    with DAG(
        dag_id="warden_platform",
        description=(
            "Validates job files, delivers alerts left in the outbox, prunes old savepoints and ledger rows, "
            "removes orphaned sink output, archives landing input by arrival hour, "
            "rewrites Prometheus' driver targets when the jobs meant to run change"
        ),
        schedule=timedelta(minutes=1),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=False,
        tags=["streamwarden", "platform"],
    ) as dag:

        @task
        def analyse_job_files() -> list[str]:
            return Supervisor.for_platform(load_platform()).analyse_job_files()

        # Pages about invalid files even when the analysis could not run.
        @task(trigger_rule="all_done")
        def check_job_files() -> list[str]:
            return Supervisor.for_platform(load_platform()).check_job_files()

        # Savepoint retention and the ledger's, in one task: one process a minute, not two.
        @task
        def apply_retention() -> list[str]:
            supervisor = Supervisor.for_platform(load_platform())
            return [*supervisor.prune_all_savepoints(), *supervisor.prune_ledger()]

        @task
        def remove_orphaned_output() -> list[str]:
            return Supervisor.for_platform(load_platform()).remove_all_orphaned_output()

        @task
        def archive_landing() -> list[str]:
            # Imported here: boto3 must not load when the DAG file is parsed.
            from ops.archive import archive_all

            return archive_all(load_platform(), utcnow())

        @task
        def write_scrape_targets() -> str:
            platform = load_platform()
            return refresh_scrape_targets(platform, Ledger.open(platform.resolved_ledger_url))

        analyse_job_files() >> check_job_files()
        apply_retention()
        remove_orphaned_output()
        archive_landing()
        write_scrape_targets()
    return dag


def _valid_jobs() -> tuple[JobLoadResult, SupervisionConfig]:
    """The job files that validate, less the versions Spark's analyzer rejected (no Spark here),
    and how they are supervised."""
    loaded = load_jobs()
    try:
        platform = load_platform()
    except ConfigError:
        # Without platform.yaml there is no runtime root holding verdicts; the DAGs still load
        # (supervised as the defaults say) and every task reports the broken platform file.
        return loaded, SupervisionConfig()
    return with_verdicts(platform, loaded), platform.supervision


def build_dags() -> list[DAG]:
    """Every Streamwarden DAG for the current conf directory."""
    loaded, supervision = _valid_jobs()
    jobs = sorted(loaded.specs)
    fleet = supervision.watches_a_fleet(len(jobs))
    dags = [supervision_dag(name, loaded.specs[name].description, watched=not fleet) for name in jobs]
    if fleet:
        dags.append(fleet_dag(supervision))
    dags += [request_dag(action, jobs) for action in REQUESTS]
    dags.append(savepoint_dag(jobs))
    dags.append(scale_dag(jobs))
    dags.append(restate_dag(jobs))
    dags += [
        restate_dag([name], spec.operations.restatement)
        for name, spec in loaded.specs.items()
        if spec.operations.restatement is not None
    ]
    dags += [
        compaction_dag(name, spec.operations.compaction)
        for name, spec in loaded.specs.items()
        if spec.operations.compaction is not None
    ]
    dags.append(backfill_dag(jobs))
    dags.append(new_job_dag())
    dags.append(edit_job_dag([name for name in jobs if loaded.specs[name].pipeline.kind in FORM_KINDS]))
    dags.append(platform_dag())
    return dags
