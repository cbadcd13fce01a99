"""`warden`: the operator's command line.

warden validate [--no-analysis] check platform.yaml (the metastore's JDBC driver too) and every
                                job file, their Spark SQL through Spark's analyzer (exit 1 if any
                                is invalid)
warden status                   one row per job: state, last batch, rates, backlog, cores, the
                                autoscaler's recommendation, restarts, open alerts, standby, last
                                alert (state, restarts and open alerts as the job board shows them)
warden migrate                  create or upgrade the ledger's schema (the team stack runs it first)
warden decisions JOB [--limit N | --all]
                                the supervisor's decisions for a job, newest first: the newest 30
                                unless --limit or --all says otherwise
warden start JOB / stop JOB     resume or suspend a job and reconcile it now (stop: its standby too)
warden reconcile JOB            run one supervisor pass now
warden scale JOB --cores N | --auto [--reason R] [--wait SECONDS]
                                pin the job's cores (the batch size follows) until released with
                                --auto to the autoscaler (or the job file); the supervisor rescales
                                (--wait: run its passes here until the driver runs at the scale)
warden savepoint JOB [--reason R]
                                take a savepoint now (the job keeps running), then apply retention
warden savepoints JOB           the job's savepoint catalogue, newest first
warden rewind JOB --savepoint ID|--before T --reason R [--dry-run]
                                rewind a stopped job to a savepoint; later batches replay on start
warden restate JOB --savepoint ID|--before T --reason R [--dry-run]
                                suspend, rewind, replay with the current code, resume, Slack summary
warden upgrade JOB --spec FILE --reason R
                                deploy a new spec from a fresh savepoint; roll back if not ready
warden platform up|down|status  the embedded platform (S3, PostgreSQL, Airflow, generator, drivers)
warden platform generator start|stop
                                the synthetic event generator alone (the jobs drain what it wrote)
warden state JOB [--key K] [--json]
                                a stateful job's latest committed state (per key), e.g. device health
warden view JOB [--key K] [--json]
                                the view a job publishes (pipeline.view): each key's value and the
                                sink batch that wrote it, read from its PostgreSQL table
warden archive [--list SOURCE | --verify SOURCE --hour T]
                                archive the sealed arrival hours of every landing directory now,
                                list a source's archived hours, or check one against its manifest
warden backfill JOB --from T1 --to T2 [--whole-partitions] [--spec FILE] [--max-batch-bytes N]
                [--throttle S] [--dry-run]
warden backfill JOB --bootstrap --to T
                                run the job's own streaming query over the archived arrival hours
                                [T1, T2), as many hours a micro-batch as --max-batch-bytes holds
                                (an hour over it in slices; resumes a killed run); with a table it
                                then publishes the target partitions into the warehouse table
                                through the quality gate; --spec runs a candidate into a side
                                table, diffed against the table, nothing published; --bootstrap
                                ends with a savepoint the live job starts from
warden preview JOB STAGE [--limit N]
                                the newest records a running job's preview tap captured at STAGE
warden table history JOB [--partition KEY]
                                a warehouse table's partition versions: published, blocked, rolled
                                back, rows before/after, audit verdict, newest first
warden table rollback JOB --partition KEY --version N
                                point a warehouse partition back at an earlier published version
warden model push NAME FILE     store a model file (e.g. ONNX) as the next version of NAME in the
                                model store; a job pins a version in pipeline.models
warden model list NAME          a model's stored versions
warden scrape-targets [FILE]    write the Prometheus file_sd targets of the jobs meant to run (default:
                                monitoring.scrape_targets_file; warden_platform does it every minute)

Every command uses the ledger at `ledger.url` of conf/platform.yaml, or at $STREAMWARDEN_LEDGER_URL
when that is set (sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DATABASE).

rewind, restate and upgrade record the operation in the ledger and then run reconcile passes
until the supervisor's loop has finished it, with a progress line on stderr per change. If the
command dies (Ctrl-C, kill -9), the next pass by anyone (the job's supervision DAG, `warden
reconcile JOB`) finishes the operation or rolls it back. A refused request (the savepoint cannot
be restored, the replay input or offsets are gone, another operation is open, ...) is checked
before anything is stopped: the job is left as it was, `warden decisions JOB` shows a `refused`
row naming the cause, and the command exits 2 with the same message.

One module of about 850 lines on purpose: the command table above, a short function per command
over the library, and their parser. The heavy parts (Spark, boto3, the supervisor, the recovery
wing) are imported inside the commands that use them, so `warden status` starts in a fraction of
a second (`benchmarks/cli_latency.py`) and every command is found in one place.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ops.clock import utcnow
from ops.console.status import job_statuses
from ops.control.health import observe
from ops.control.launcher import LocalProcessBackend, driver_job
from ops.control.scaling import cores_label, run_scale
from ops.driver.preview import read_preview
from ops.driver.takeover import read_standby_status
from ops.exceptions import ConfigError, WardenError
from ops.ledger.records import JobRecord, RunRecord
from ops.ledger.schema import SCHEMA_REVISION
from ops.ledger.store import Ledger
from ops.ports import port_holder
from ops.spec.analysis import read_verdict, run_analysis, with_verdicts
from ops.spec.job import METRICS_PORT_FIELD, JobSpec, find_job, job_file, load_jobs, metrics_port_in_use
from ops.spec.pipelines import TeamPipeline
from ops.spec.platform import PlatformConfig, load_platform
from ops.warehouse.metastore import jdbc_driver_jar

# `warden status` reads the ledger, heartbeats and landing directories only. The supervisor (Slack
# client, savepoint store), recovery (pyarrow, boto3), the embedded platform and pyspark are
# imported by the commands that use them, so a status call does not load them (tests/test_layering).
if TYPE_CHECKING:
    from ops.control.supervisor import Supervisor
    from ops.recovery.state_reader import StateTable
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ops import progress
from ops.driver.preview import preview_rows

# `warden decisions` shows this many unless told otherwise: a busy job records thousands.
DEFAULT_DECISIONS = 30
# Off a terminal a table keeps its natural width, however wide, so every row stays one line.
_UNWRAPPED_WIDTH = 100_000


def _table_lines(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A table as lines: columns two spaces apart under a bold header, wrapped to the terminal;
    off a terminal (pipes, CI) plain text with one line per row, so scripts can split it."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(Text(header))
    for row in rows:
        # Text, not str: a cell such as a decision's reason is shown as written, never as markup.
        table.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    console = Console() if sys.stdout.isatty() else Console(width=_UNWRAPPED_WIDTH)
    with console.capture() as capture:
        console.print(table)
    # Cells are padded to their column's width; the last column's padding is noise.
    return [line.rstrip() for line in capture.get().splitlines()]


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print("\n".join(_table_lines(headers, rows)))


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def cmd_validate(args: argparse.Namespace) -> int:
    platform = load_platform()
    loaded = load_jobs(platform.conf_dir)
    if args.analysis and loaded.specs:
        # The one step that needs a JVM; it runs in its own process, so this one stays pyspark-free.
        with progress.track(
            f"analysing {len(loaded.specs)} job file(s) with Spark's analyzer (a local Spark session starts)"
        ):
            run_analysis(platform, sorted(loaded.specs))
    rejected = False
    for name, spec in loaded.specs.items():
        verdict = read_verdict(platform, spec)
        if verdict is not None and verdict.rejected:
            rejected = True
            for error in verdict.errors(job_file(name, platform.conf_dir)):
                print(f"INVALID  {error}")
            continue
        analysed = "analysed by Spark" if verdict is not None else "not analysed by Spark"
        print(f"ok       {name} ({spec.pipeline.kind}, config {spec.config_version}, {analysed})")
        port_line = _metrics_port_line(platform, spec)
        if port_line is not None:
            print(port_line)
            rejected = rejected or port_line.startswith("INVALID")
    for error in loaded.errors.values():
        print(f"INVALID  {error}")
    # Compaction, backfill and republish load the driver only when they run (at night, paging on
    # failure), so its absence is said here.
    try:
        print(f"ok       metastore JDBC driver {jdbc_driver_jar(platform)}")
    except ConfigError as error:
        rejected = True
        print(f"INVALID  {error}")
    return 1 if loaded.errors or rejected else 0


def cmd_new_job(args: argparse.Namespace) -> int:
    from ops.scaffold import new_job

    platform = load_platform()
    written = new_job(platform.conf_dir, args.name, args.kind, args.code)
    for path in written:
        print(f"wrote    {path}")
    tests = args.code.resolve() / "tests"
    print(
        f"next: .venv/bin/pytest {tests}, then .venv/bin/warden validate, then "
        f".venv/bin/warden start {args.name} (or unpause warden_supervise_{args.name})"
    )
    return 0


def _metrics_port_line(platform: PlatformConfig, spec: JobSpec) -> str | None:
    """What `validate` says of a job's metrics port another process holds (None while it is free):
    a warning when the holder may be the job's own driver, which holds it while it runs, else the
    problem the supervisor would refuse the launch for, naming the holder."""
    holder = port_holder(spec.operations.metrics_port)
    if holder is None:
        return None
    path = job_file(spec.name, platform.conf_dir)
    if holder.pid is None or driver_job(holder.command) == spec.name:
        return (
            f"WARNING  {path}: field '{METRICS_PORT_FIELD}': port {holder.port} is held by "
            f"{holder.describe()}, which may be job {spec.name!r}'s own driver: fine while it runs; "
            "otherwise the job is not launched until the port is free"
        )
    return f"INVALID  {path}: {metrics_port_in_use(spec)} (held by {holder.describe()})"


def _supervisor() -> Supervisor:
    """The platform's supervisor, for the commands that act."""
    from ops.control.supervisor import Supervisor

    return Supervisor.for_platform(load_platform())


def _standby_cell(platform: PlatformConfig, ledger: Ledger, backend: LocalProcessBackend, job: str) -> str:
    """The job's warm standby as `warden status` shows it: what it says of itself and its pid."""
    standby = ledger.current_standby(job)
    if standby is None:
        return "-"
    if not backend.is_alive(standby.as_run()):
        return f"gone (pid {standby.pid})"
    status = read_standby_status(platform.job_runtime_dir(job), standby.run_id)
    return f"{status.state if status else 'starting'} (pid {standby.pid})"


def cmd_status(_: argparse.Namespace) -> int:
    platform = load_platform()
    ledger = Ledger.open(platform.resolved_ledger_url)
    backend = LocalProcessBackend(platform)
    loaded = with_verdicts(platform, load_jobs(platform.conf_dir))
    now = utcnow()
    specs: dict[str, JobSpec | ConfigError] = {**loaded.specs}
    specs.update({path.stem: error for path, error in loaded.errors.items()})
    records = {job.name: job for job in ledger.jobs()}
    rows = []
    for name, status in job_statuses(ledger, specs, now).items():
        job, spec = records.get(name), loaded.specs.get(name)
        observation = observe(platform, ledger, backend, spec, now) if spec is not None else None
        heartbeat = observation.heartbeat if observation else None
        sample = heartbeat.last_sample if heartbeat else None
        alerts = ledger.alerts(name, limit=1)
        last_alert = (
            f"{alerts[0].kind} {alerts[0].status} {alerts[0].created_at:%m-%d %H:%M}" if alerts else "-"
        )
        rows.append(
            [
                name,
                status.state,
                status.desired_state,
                heartbeat.batch_id
                if heartbeat and heartbeat.batch_id is not None
                else (job.last_batch_id if job else None) or "-",
                _rate(sample.input_rows_per_second if sample else None),
                _rate(sample.processed_rows_per_second if sample else None),
                "-"
                if observation is None or observation.backlog_files is None
                else observation.backlog_files,
                _cores_cell(job, observation.run if observation else None, spec),
                job.recommended_cores if job and job.recommended_cores is not None else "-",
                status.restarts_24h,
                ",".join(status.open_alerts) or "-",
                _standby_cell(platform, ledger, backend, name),
                last_alert,
            ]
        )
    headers = [
        "job",
        "state",
        "desired",
        "last batch",
        "input",
        "processed",
        "backlog (files)",
        "cores",
        "recommended",
        "restarts 24h",
        "open alerts",
        "standby",
        "last alert",
    ]
    _print_table(headers, rows)
    for error in loaded.errors.values():
        print(f"INVALID  {error}")
    return 0


def cmd_migrate(_: argparse.Namespace) -> int:
    """Create or upgrade the ledger's schema, as `warden platform up` does before Airflow starts;
    the team stack runs it once before its schedulers, so they never race to migrate."""
    url = load_platform().resolved_ledger_url
    ledger = Ledger.open(url)
    # The URL may carry a password (PostgreSQL): it never goes to a terminal or a log.
    print(f"ledger at {ledger.engine.url.render_as_string(hide_password=True)}: schema {SCHEMA_REVISION}")
    return 0


def cmd_decisions(args: argparse.Namespace) -> int:
    supervisor = _supervisor()
    decisions = supervisor.ledger.decisions(args.job, limit=args.limit)
    rows = [
        [d.id, f"{d.at:%Y-%m-%d %H:%M:%S}", d.action, d.reason, d.outcome or "", d.run_id or ""]
        for d in decisions
    ]
    _print_table(["id", "at (UTC)", "action", "reason", "outcome", "run"], rows)
    if args.limit is not None and len(decisions) == args.limit:
        # On stderr, so a script splitting the table's lines never reads it as a row.
        print(f"the newest {args.limit} decisions shown; older ones with --limit N or --all", file=sys.stderr)
    return 0


def cmd_savepoint(args: argparse.Namespace) -> int:
    supervisor = _supervisor()
    print(f"taking a savepoint of {args.job} (the job keeps running)...", flush=True)
    print(supervisor.savepoint(args.job, args.reason).line())
    return 0


def cmd_savepoints(args: argparse.Namespace) -> int:
    supervisor = _supervisor()
    rows = [
        [
            sp.id,
            sp.batch_id,
            f"{sp.created_at:%Y-%m-%d %H:%M:%S}",
            f"{sp.total_bytes / 1e6:.1f} MB",
            f"{sp.uploaded_bytes / 1e6:.1f} MB",
            sp.status,
            sp.config_version,
        ]
        for sp in supervisor.ledger.savepoints(args.job)
    ]
    if not rows:
        print(f"no savepoints of {args.job} yet (warden savepoint {args.job})")
        return 0
    _print_table(["id", "batch", "created (UTC)", "size", "uploaded", "status", "config"], rows)
    return 0


def _request_and_reconcile(job: str, action: str, reason: str) -> int:
    supervisor = _supervisor()
    print(supervisor.request(job, action, reason))
    print(supervisor.reconcile(job).line())
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    return _request_and_reconcile(args.job, "resume", args.reason)


def cmd_stop(args: argparse.Namespace) -> int:
    return _request_and_reconcile(args.job, "suspend", args.reason)


def cmd_scale(args: argparse.Namespace) -> int:
    """Record the pin or its release; the job's supervision passes carry out the rescale, or with
    --wait this command runs them until the job's driver runs at its scale (exit 1 on timeout)."""
    supervisor = _supervisor()
    print(supervisor.scale(args.job, None if args.auto else args.cores, args.reason))
    if args.wait is None:
        return 0
    if supervisor.await_scale(args.job, timeout=args.wait, progress=_progress):
        scale = supervisor.scale_of(find_job(args.job, supervisor.platform.conf_dir))
        print(f"{args.job}: runs at {scale.describe()}")
        return 0
    print(
        f"{args.job}: not at its scale after {args.wait:g}s; the supervision DAG carries on", file=sys.stderr
    )
    return 1


def _cores_cell(job: JobRecord | None, run: RunRecord | None, spec: JobSpec | None) -> str:
    """The cores the job's driver runs with (its run's scale), marked when an operator pinned them."""
    if run is None or spec is None:
        return "-"
    return cores_label(run_scale(run, spec).cores, job is not None and job.scale_pinned)


def cmd_reconcile(args: argparse.Namespace) -> int:
    print(_supervisor().reconcile(args.job).line())
    return 0


def cmd_platform(args: argparse.Namespace) -> int:
    from ops.embedded import platform as embedded

    platform = load_platform()
    match args.action:
        case "up":
            embedded.up(platform)
        case "down":
            embedded.down(platform)
        case "status":
            rows = [
                [s.name, "running" if s.running else "stopped", s.pid or "-", s.url or "-"]
                for s in embedded.status(platform)
            ]
            _print_table(["service", "state", "pid", "url"], rows)
        case "generator":
            print(
                embedded.start_generator(platform)
                if args.switch == "start"
                else embedded.stop_generator(platform)
            )
    return 0


def _bytes_argument(text: str) -> int:
    """A byte count, plain or with a JVM-style unit (`256m`, `1g`)."""
    from ops.driver.backfill import memory_bytes

    try:
        value = int(text) if text.isdigit() else memory_bytes(text)
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r} (e.g. 268435456, 256m, 1g)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive byte count: {text!r}")
    return value


def _moment_argument(text: str) -> datetime:
    from ops.recovery.rewind import parse_moment

    try:
        return parse_moment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_int(text: str, what: str) -> int:
    try:
        number = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError(f"{what} must be at least 1, not {number}")
    return number


def _count_argument(text: str) -> int:
    return _positive_int(text, "a count")


def _cores_argument(text: str) -> int:
    return _positive_int(text, "a number of cores")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _dry_run(args: argparse.Namespace, kind: str) -> int:
    """The plan of a rewind or restate, checked as the real one would be; nothing changes."""
    from ops.recovery.rewind import rewind_job

    plan = rewind_job(
        _supervisor(),
        args.job,
        reason=args.reason,
        savepoint_id=args.savepoint,
        before=args.before,
        dry_run=True,
        kind=kind,
    )
    print(plan.describe())
    print("dry run: nothing changed")
    return 0


def cmd_rewind(args: argparse.Namespace) -> int:
    from ops.recovery.rewind import rewind

    if args.dry_run:
        return _dry_run(args, "rewind")
    supervisor = _supervisor()
    plan = rewind(
        supervisor,
        args.job,
        reason=args.reason,
        savepoint_id=args.savepoint,
        before=args.before,
        progress=_progress,
    )
    print(plan.describe())
    print(f"rewound; the batches replay when the job next runs (warden start {args.job})")
    return 0


def cmd_restate(args: argparse.Namespace) -> int:
    from ops.recovery.restate import restate

    if args.dry_run:
        return _dry_run(args, "restate")
    summary = restate(
        _supervisor(),
        args.job,
        reason=args.reason,
        savepoint_id=args.savepoint,
        before=args.before,
        timeout=args.timeout,
        progress=_progress,
    )
    print(summary)
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    from ops.recovery.upgrade import upgrade

    supervisor = _supervisor()
    result = upgrade(
        supervisor,
        args.job,
        args.spec,
        reason=args.reason,
        readiness_timeout=args.readiness_timeout,
        progress=_progress,
    )
    print(result.line())
    return 0 if result.outcome == "upgraded" else 1


def _cell(value: object) -> object:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return value


def state_lines(table: StateTable) -> list[str]:
    """A state table as printed by `warden state`: a summary line, then one row per key."""
    summary = f"{table.job}: state '{table.state_var}' as of batch {table.batch_id}, {len(table.rows)} keys"
    rows = [[_cell(cell) for cell in row] for row in table.rows]
    return [summary, *_table_lines(table.columns, rows)]


def cmd_state(args: argparse.Namespace) -> int:
    # Only this command needs Spark; importing it here keeps every other command free of pyspark.
    from ops.recovery.state_reader import local_session, read_value_state

    platform = load_platform()
    spec = find_job(args.job, platform.conf_dir)
    table = read_value_state(local_session(platform), platform, spec, key=args.key)
    if args.json:
        print(json.dumps(table.as_json(), default=str))
    else:
        print("\n".join(state_lines(table)))
    if args.key is not None and not table.rows:
        print(f"warden: no state for key {args.key!r} in job {args.job!r}", file=sys.stderr)
        return 1
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from ops import views

    platform = load_platform()
    spec = find_job(args.job, platform.conf_dir)
    if not isinstance(spec.pipeline, TeamPipeline) or spec.pipeline.view is None:
        print(
            f"warden: job {args.job!r} publishes no view (its job file has no pipeline.view)", file=sys.stderr
        )
        return 2
    with views.connected(views.database_url(platform)) as connection:
        rows = views.read_view(connection, spec.name, args.key)
    if args.json:
        print(json.dumps([{"key": row.key, "value": row.value, "batch": row.batch} for row in rows]))
    else:
        _print_table(["key", "value", "batch"], [(row.key, json.dumps(row.value), row.batch) for row in rows])
    if args.key is not None and not rows:
        print(f"warden: no key {args.key!r} in the view of job {args.job!r}", file=sys.stderr)
        return 1
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    platform = load_platform()
    spec = find_job(args.job, platform.conf_dir)
    preview = read_preview(platform, spec, args.stage)
    title, rows = preview_rows(preview, args.limit)
    print("\n".join([title, *_table_lines(preview.columns, rows)]))
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from ops import archive

    platform = load_platform()
    if args.list:
        for partition in archive.partitions(platform, args.list):
            entries = archive.read_manifest(platform, partition) or []
            print(f"{partition}  {len(entries)} files  {sum(entry.size for entry in entries) / 1e6:.1f} MB")
        return 0
    if args.verify:
        if args.hour is None:
            print("warden: --verify needs --hour (e.g. 2026-11-24T10)", file=sys.stderr)
            return 2
        hour = args.hour.replace(minute=0, second=0, microsecond=0)
        scratch = platform.runtime_root / "archive-verify" / args.verify
        problems = archive.verify(platform, archive.Partition(args.verify, hour), scratch)
        print("\n".join(problems) if problems else f"{args.verify} {hour:%Y-%m-%d %H}:00: every file matches")
        return 1 if problems else 0
    lines = archive.archive_all(platform, utcnow())
    print("\n".join(lines) if lines else "nothing to archive: every closed hour is sealed")
    return 0


def cmd_model_push(args: argparse.Namespace) -> int:
    from ops.models import push_model

    stored = push_model(load_platform(), args.name, args.file)
    print(f"{stored.name} version {stored.version}: {stored.size:,} bytes at {stored.key}")
    return 0


def cmd_model_list(args: argparse.Namespace) -> int:
    from ops.models import model_versions

    versions = model_versions(load_platform(), args.name)
    if not versions:
        print(f"model {args.name!r} has no version yet (warden model push {args.name} FILE)")
    for stored in versions:
        print(f"{stored.name} version {stored.version}: {stored.size:,} bytes at {stored.key}")
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    from ops.backfill.plan import BackfillRequest, describe, plan_backfill
    from ops.backfill.run import publication_lines, publish_output, publishes, report_lines, run_backfill

    if args.start is None and not args.bootstrap:
        print(
            "warden: --from is required (only --bootstrap starts at the oldest archived hour)",
            file=sys.stderr,
        )
        return 2
    platform = load_platform()
    request = BackfillRequest(
        args.job,
        end=args.end,
        start=args.start,
        candidate=args.spec,
        throttle_seconds=args.throttle,
        bootstrap=args.bootstrap,
        whole_partitions=args.whole_partitions,
        max_batch_bytes=args.max_batch_bytes,
    )
    if args.dry_run:
        run, plan, _ = plan_backfill(platform, request, utcnow())
        print("\n".join(describe(plan, run)))
        return 0
    plan, staged = run_backfill(platform, request, utcnow())
    if publishes(platform, plan):
        publish_output(platform, staged.run, plan)
    print("\n".join(report_lines(plan, staged)))
    published, blocked = publication_lines(staged.run)
    if published:
        print("\n".join(published))
    elif not plan.candidate:
        print(f"not published: {args.job} has no warehouse table (its file sets no operations.compaction)")
    if staged.run.diff_file.is_file():
        diff = json.loads(staged.run.diff_file.read_text())
        rows = [[entry["partition"], entry["added"], entry["removed"], entry["changed"]] for entry in diff]
        print(
            f"candidate {args.spec} against {plan.compare_with} "
            f"(side table {staged.sink}; nothing published):"
        )
        print("\n".join(_table_lines(["partition", "added", "removed", "changed"], rows)))
    if args.bootstrap:
        from ops.backfill.bootstrap import bootstrap_savepoint

        savepoint = bootstrap_savepoint(platform, Ledger.open(platform.resolved_ledger_url), staged.run)
        print(
            f"savepoint {savepoint.id} holds {args.job}'s state at {plan.end:%Y-%m-%dT%H}:00 (batch "
            f"{savepoint.batch_id}); start the job from it: warden rewind {args.job} --savepoint "
            f"{savepoint.id} --reason bootstrap, then warden start {args.job}"
        )
    return 1 if blocked else 0


def cmd_scrape_targets(args: argparse.Namespace) -> int:
    from ops.prometheus_targets import write_driver_targets

    platform = load_platform()
    path = args.file or platform.scrape_targets_file
    if path is None:
        print("warden: give FILE: monitoring.scrape_targets_file is null in platform.yaml", file=sys.stderr)
        return 2
    targets = write_driver_targets(platform, Ledger.open(platform.resolved_ledger_url), path)
    print(f"{path}: {len(targets)} driver targets")
    return 0


def cmd_table_history(args: argparse.Namespace) -> int:
    platform = load_platform()
    versions = Ledger.open(platform.resolved_ledger_url).partition_versions(args.job, args.partition)
    if not versions:
        print(f"no versions of warehouse.{args.job}{' ' + args.partition if args.partition else ''} yet")
        return 0
    rows = [
        [
            version.partition,
            version.version,
            version.status + (" (expired)" if version.expired_at else ""),
            version.source,
            f"{version.published_at or version.created_at:%Y-%m-%d %H:%M:%S}",
            f"{version.input_files} -> {version.output_files}",
            "-" if version.rows_before is None else version.rows_before,
            "-" if version.output_rows is None else version.output_rows,
            _audit_verdict(version.audit),
        ]
        for version in versions
    ]
    _print_table(
        ["partition", "version", "status", "source", "at (UTC)", "files", "rows before", "rows", "audit"],
        rows,
    )
    return 0


def _audit_verdict(audit: dict[str, object] | None) -> str:
    """`passed`, or the failed checks' lines, as `warden table history` shows an audit."""
    if audit is None:
        return "-"
    checks = audit.get("checks")
    failed = [
        f"{check['check']} [{check['severity']}] observed {check['observed']}"
        for check in (checks if isinstance(checks, list) else [])
        if not check["passed"]
    ]
    return "; ".join(failed) if failed else "passed"


def cmd_table_rollback(args: argparse.Namespace) -> int:
    from ops.ledger.locks import job_lock
    from ops.warehouse.metastore import open_session
    from ops.warehouse.table import WarehouseTable, rollback

    platform = load_platform()
    ledger = Ledger.open(platform.resolved_ledger_url)
    columns = tuple(part.partition("=")[0] for part in args.partition.strip("/").split("/"))
    table = WarehouseTable.of(platform, args.job, columns)
    with job_lock(platform, args.job, "table rollback", timeout=60):
        spark = open_session(platform, f"streamwarden-rollback-{args.job}")
        try:
            record = rollback(
                spark, ledger, table, table.partition_key(table.parse_partition(args.partition)), args.version
            )
        finally:
            spark.stop()
    print(
        f"{table.name} {record.partition} now shows version {args.version}'s files "
        f"(recorded as version {record.version}, {record.output_rows} rows; before: {record.rows_before})"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warden", description="Operate Streamwarden's streaming jobs.")
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser(
        "validate",
        help="validate platform.yaml and every job file, Spark SQL included; check that each job's "
        "metrics port is free",
    )
    validate.add_argument(
        "--no-analysis",
        dest="analysis",
        action="store_false",
        help="skip Spark's analyzer (no JVM); stored verdicts on the current files still count",
    )
    validate.set_defaults(run=cmd_validate)
    new_job_command = commands.add_parser(
        "new-job", help="write a team's job to start from: its job file, its code and its test"
    )
    new_job_command.add_argument("name", help="the job's name (conf/jobs/<name>.yaml)")
    new_job_command.add_argument("--kind", choices=("python", "sql"), required=True)
    new_job_command.add_argument(
        "--code", type=Path, required=True, help="the team's directory for the job's code and tests"
    )
    new_job_command.set_defaults(run=cmd_new_job)
    commands.add_parser("status", help="a table of every job's health").set_defaults(run=cmd_status)
    commands.add_parser("migrate", help="create or upgrade the ledger's schema").set_defaults(run=cmd_migrate)
    decisions = commands.add_parser("decisions", help="the supervisor's decisions for a job, newest first")
    decisions.add_argument("job")
    shown = decisions.add_mutually_exclusive_group()
    shown.add_argument(
        "--limit",
        type=_count_argument,
        default=DEFAULT_DECISIONS,
        metavar="N",
        help=f"show the newest N decisions (default: {DEFAULT_DECISIONS})",
    )
    shown.add_argument("--all", dest="limit", action="store_const", const=None, help="show every decision")
    decisions.set_defaults(run=cmd_decisions)
    for name, run, verb in (("start", cmd_start, "resume"), ("stop", cmd_stop, "suspend")):
        command = commands.add_parser(name, help=f"{verb} a job and reconcile it now")
        command.add_argument("job")
        command.add_argument("--reason", default=f"{name} from the warden CLI")
        command.set_defaults(run=run)
    scale = commands.add_parser("scale", help="pin a job's cores until released, or release them")
    scale.add_argument("job")
    pin = scale.add_mutually_exclusive_group(required=True)
    pin.add_argument("--cores", type=_cores_argument, help="the cores to pin the job at")
    pin.add_argument("--auto", action="store_true", help="release the pin to the autoscaler")
    scale.add_argument("--reason", default="scale from the warden CLI")
    scale.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="run reconcile passes until the driver runs at the new scale (at most SECONDS)",
    )
    scale.set_defaults(run=cmd_scale)
    reconcile = commands.add_parser("reconcile", help="run one supervisor pass for a job")
    reconcile.add_argument("job")
    reconcile.set_defaults(run=cmd_reconcile)
    savepoint = commands.add_parser("savepoint", help="take a savepoint of a job now")
    savepoint.add_argument("job")
    savepoint.add_argument("--reason", default="savepoint from the warden CLI")
    savepoint.set_defaults(run=cmd_savepoint)
    savepoints = commands.add_parser("savepoints", help="a job's savepoint catalogue")
    savepoints.add_argument("job")
    savepoints.set_defaults(run=cmd_savepoints)
    for name, run, summary in (
        ("rewind", cmd_rewind, "rewind a stopped job to a savepoint; its later batches replay on start"),
        ("restate", cmd_restate, "suspend, rewind, replay with the current code, resume, report"),
    ):
        command = commands.add_parser(name, help=summary)
        command.add_argument("job")
        target = command.add_mutually_exclusive_group(required=True)
        target.add_argument("--savepoint", help="the savepoint id (see `warden savepoints JOB`)")
        target.add_argument(
            "--before", type=_moment_argument, help="the newest savepoint taken before this time"
        )
        command.add_argument("--reason", required=True, help="why, for the ledger and Slack")
        command.add_argument("--dry-run", action="store_true", help="only report what would change")
        if name == "restate":
            command.add_argument(
                "--timeout", type=float, default=1800.0, help="seconds to wait for the replay"
            )
        command.set_defaults(run=run)
    upgrade_command = commands.add_parser("upgrade", help="deploy a new spec from a fresh savepoint")
    upgrade_command.add_argument("job")
    upgrade_command.add_argument("--spec", type=Path, required=True, help="the candidate job file")
    upgrade_command.add_argument("--reason", required=True)
    upgrade_command.add_argument("--readiness-timeout", type=float, default=300.0)
    upgrade_command.set_defaults(run=cmd_upgrade)
    # The readers of what a job holds per key: one row per key, or one key, as a table or JSON.
    for name, summary, key_help, json_help, run in (
        (
            "state",
            "a stateful job's latest committed state, one row per key",
            "only this key (the first key column, e.g. a device id)",
            "one JSON object (columns, rows) instead of a table",
            cmd_state,
        ),
        (
            "view",
            "the view a job publishes, one row per key",
            "only this key",
            "a JSON list of {key, value, batch} instead of a table",
            cmd_view,
        ),
    ):
        reader = commands.add_parser(name, help=summary)
        reader.add_argument("job")
        reader.add_argument("--key", help=key_help)
        reader.add_argument("--json", action="store_true", help=json_help)
        reader.set_defaults(run=run)
    platform = commands.add_parser("platform", help="the embedded platform")
    platform_commands = platform.add_subparsers(dest="action", required=True)
    for action, summary in (
        ("up", "start every service, Airflow and the event generator; supervise the autostart jobs"),
        ("down", "stop everything, the streaming drivers included"),
        ("status", "each service: running or not, its pid and address"),
    ):
        platform_commands.add_parser(action, help=summary)
    generator = platform_commands.add_parser(
        "generator", help="start or stop the synthetic event generator alone; the rest keeps running"
    )
    generator.add_argument("switch", choices=["start", "stop"])
    platform.set_defaults(run=cmd_platform)
    archive = commands.add_parser("archive", help="archive landing input to S3 by arrival hour")
    archive.add_argument("--list", metavar="SOURCE", help="a source's archived hours (e.g. events)")
    archive.add_argument("--verify", metavar="SOURCE", help="download one archived hour and check it")
    archive.add_argument("--hour", type=_moment_argument, help="the arrival hour --verify checks")
    archive.set_defaults(run=cmd_archive)
    backfill = commands.add_parser("backfill", help="run a job's streaming query over archived input")
    backfill.add_argument("job")
    backfill.add_argument("--from", dest="start", type=_moment_argument, help="the first arrival hour")
    backfill.add_argument(
        "--to", dest="end", type=_moment_argument, required=True, help="the hour to stop at"
    )
    backfill.add_argument("--spec", type=Path, help="a candidate job file: run into a side table and diffed")
    backfill.add_argument(
        "--throttle", type=float, default=0.0, metavar="SECONDS", help="pause after each micro-batch"
    )
    backfill.add_argument(
        "--max-batch-bytes",
        type=_bytes_argument,
        metavar="N",
        help="the archived bytes one micro-batch reads (e.g. 268435456, 256m, 1g); default: the platform's "
        "backfill.max_batch_bytes, or a quarter of the job's task memory",
    )
    backfill.add_argument("--dry-run", action="store_true", help="print the micro-batches it would run")
    backfill.add_argument(
        "--bootstrap", action="store_true", help="end with a savepoint the live job continues from"
    )
    backfill.add_argument(
        "--whole-partitions",
        action="store_true",
        help="widen the range to the arrival hours that make every warehouse partition it writes whole "
        "(without it, a range covering a partition only in part is refused)",
    )
    backfill.set_defaults(run=cmd_backfill)
    preview = commands.add_parser("preview", help="the newest records a job's preview tap captured")
    preview.add_argument("job")
    preview.add_argument("stage", help="a tapped stage (operations.preview.stages), e.g. parsed, output")
    preview.add_argument("--limit", type=int, default=None, help="show only the newest N records")
    preview.set_defaults(run=cmd_preview)
    table = commands.add_parser("table", help="a job's warehouse table: history and rollback")
    table_commands = table.add_subparsers(dest="table_command", required=True)
    history = table_commands.add_parser("history", help="the versions of a table's partitions")
    history.add_argument("job")
    history.add_argument(
        "--partition", help="one partition, e.g. route=purchases/event_date=2025-01-01/event_hour=0"
    )
    history.set_defaults(run=cmd_table_history)
    roll_back = table_commands.add_parser("rollback", help="show an earlier version of a partition again")
    roll_back.add_argument("job")
    roll_back.add_argument("--partition", required=True)
    roll_back.add_argument(
        "--version", type=int, required=True, help="a published version (warden table history)"
    )
    roll_back.set_defaults(run=cmd_table_rollback)
    model = commands.add_parser("model", help="the model store: versions of the models jobs score with")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    push = model_commands.add_parser("push", help="store a model file as the model's next version")
    push.add_argument("name", help="the model's name, e.g. purchase_risk")
    push.add_argument("file", type=Path, help="the model file, e.g. an .onnx graph")
    push.set_defaults(run=cmd_model_push)
    listed = model_commands.add_parser("list", help="a model's stored versions")
    listed.add_argument("name")
    listed.set_defaults(run=cmd_model_list)
    targets = commands.add_parser(
        "scrape-targets", help="write the Prometheus file_sd targets of the jobs meant to run"
    )
    targets.add_argument(
        "file",
        type=Path,
        nargs="?",
        help="default: monitoring.scrape_targets_file (conf/prometheus/targets/drivers.json)",
    )
    targets.set_defaults(run=cmd_scrape_targets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Long operations (savepoints, rewinds, platform start) show their progress on stderr, so
    # stdout holds only what the command reports.
    with progress.showing(sys.stderr):
        try:
            return int(args.run(args))
        except WardenError as error:
            print(f"warden: {error}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
