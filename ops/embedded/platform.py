"""The embedded platform on one machine: S3 server, PostgreSQL, ledger, Airflow, generator, drivers.

`up()` starts SeaweedFS (when `s3.endpoint_url` is on loopback), PostgreSQL (unless
`postgres: null`; the ledger is there when `ledger.url` points at it), the Spark standalone cluster
(when `spark.master` is `embedded`, `ops.embedded.cluster`), migrates the ledger and Airflow's
metadata database, starts Airflow's four components (scheduler, dag-processor, triggerer,
api-server) and the synthetic event generator, waits until Airflow is healthy and unpauses every
supervision DAG. `down()` stops all of it, the streaming drivers included, and is safe to run at any
time. `status()` lists the services. Each service is a `ManagedProcess`: pid files in
`<runtime_root>/pids/`, logs in `<runtime_root>/logs/`.

Airflow's components run as separate services rather than under `airflow standalone`, because
standalone starts the scheduler and triggerer with their log servers, which listen on every
interface at fixed ports (8793, 8794) with no setting to change the address: everything here stays
on 127.0.0.1, and two platforms on one machine must not clash. Without those servers the api-server
reads task logs straight from the shared `AIRFLOW_HOME/logs`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from ops import progress
from ops.embedded.cluster import SparkCluster
from ops.embedded.services import (
    POSTGRES_DATABASES,
    EmbeddedPostgres,
    ManagedProcess,
    SeaweedS3,
    venv_bin_dir,
)
from ops.exceptions import ServiceError
from ops.ledger.store import Ledger
from ops.spec.job import load_jobs
from ops.spec.platform import (
    CONF_DIR_ENV,
    FLEET_DAG_ID,
    SUPERVISE_DAG_PREFIX,
    PlatformConfig,
    url_without_password,
)

# Where the code lives (dags/, plugins/, the ops and jobs packages); the conf dir may be elsewhere.
CODE_ROOT = Path(__file__).resolve().parents[2]
# Each component with the flags that keep it off the network beyond its own job. The team stack's
# docker-compose.yml runs the same commands (tests/deploy checks it).
SCHEDULER = "airflow-scheduler"
AIRFLOW_COMMANDS = {
    SCHEDULER: ["scheduler", "--skip-serve-logs"],
    "airflow-dag-processor": ["dag-processor"],
    "airflow-triggerer": ["triggerer", "--skip-serve-logs"],
    "airflow-api-server": ["api-server"],
}
# Creates or upgrades Airflow's metadata database; the team stack's `airflow-db-migrate` runs it too.
AIRFLOW_MIGRATE_COMMAND = ["db", "migrate"]
GENERATOR_RATE = 200
AIRFLOW_COMPONENTS = ("scheduler", "dag_processor", "triggerer")
AIRFLOW_STOP_TIMEOUT = 60.0
# One API call; a busy 2-core machine has kept the api-server 5 s behind.
API_CALL_TIMEOUT_S = 30.0
TASK_HEARTBEAT_TIMEOUT_S = int(4 * API_CALL_TIMEOUT_S)

Echo = Callable[[str], None]


class ServiceStatus(NamedTuple):
    """One row of `warden platform status`."""

    name: str
    running: bool
    pid: int | None
    url: str | None


def _base_env(platform: PlatformConfig) -> dict[str, str]:
    """The environment every platform process shares: the venv first on PATH, conf and Spark."""
    env = {
        **os.environ,
        "PATH": f"{venv_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
        CONF_DIR_ENV: str(platform.conf_dir),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    # No S3 keys here: every task reads them where `s3` in platform.yaml says they are (the
    # variables it inherits, a file, an Airflow connection), like this process did.
    return env


def airflow_env(platform: PlatformConfig) -> dict[str, str]:
    """The environment of every Airflow component and Airflow CLI call for this platform."""
    env = {
        # An AIRFLOW_HOME or AIRFLOW__* variable from the caller's shell would point the embedded
        # platform at another metadata database or settings; its config lives here only.
        name: value
        for name, value in _base_env(platform).items()
        if name != "AIRFLOW_HOME" and not name.startswith("AIRFLOW__")
    }
    api_url = platform.airflow.base_url
    env.update(
        {
            "AIRFLOW_HOME": str(platform.runtime_root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(CODE_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(CODE_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            # Embedded use on loopback: everyone is admin, no login page.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__HOST": platform.airflow.host,
            "AIRFLOW__API__PORT": str(platform.airflow.port),
            "AIRFLOW__API__BASE_URL": api_url,
            # Task processes reach the api-server here; Airflow's default assumes localhost:8080.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
            # Task processes' calls to the execution API: Airflow's 5 s failed a first start's burst
            # of tasks on a busy 2-core machine (each call timed out five times over); our own calls
            # to the same api-server get 30 s for the same reason.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": str(API_CALL_TIMEOUT_S),
            # A task whose supervisor died with it is failed (and retried) once its heartbeat is
            # this old. Airflow's 300 s left a fleet unsupervised for five minutes when the fleet
            # task went that way (`python -m benchmarks.fleet --kill-fleet-task`); four of the
            # heartbeat calls' timeouts still keeps a live task on a slow api-server from being
            # taken for dead. The supervisor heartbeats every 5 s.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TASK_HEARTBEAT_TIMEOUT_S),
        }
    )
    postgres = EmbeddedPostgres.for_platform(platform)
    if platform.airflow.metadata_database == "postgres" and postgres is not None:
        url = postgres.url("airflow")
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = url
    return env


def airflow_processes(platform: PlatformConfig) -> list[ManagedProcess]:
    """Airflow's components as managed services (`up` starts the scheduler after the others)."""
    env = airflow_env(platform)
    airflow = str(venv_bin_dir() / "airflow")
    return [
        ManagedProcess.under(platform.runtime_root, name, [airflow, *command], env, cwd=CODE_ROOT)
        for name, command in AIRFLOW_COMMANDS.items()
    ]


def migrate_airflow_db(platform: PlatformConfig) -> None:
    """Create or upgrade Airflow's metadata database (SQLite in AIRFLOW_HOME, or the embedded
    PostgreSQL server's `airflow` database)."""
    migration = subprocess.run(
        [str(venv_bin_dir() / "airflow"), *AIRFLOW_MIGRATE_COMMAND],
        env=airflow_env(platform),
        cwd=CODE_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if migration.returncode != 0:
        output = "\n".join((migration.stdout + migration.stderr).splitlines()[-30:])
        raise ServiceError(f"airflow db migrate failed with exit code {migration.returncode}:\n{output}")


def generator_process(platform: PlatformConfig) -> ManagedProcess:
    """The synthetic event generator writing JSON files into `<landing_root>/events`."""
    argv = [
        sys.executable,
        "-m",
        "synthetic.generator",
        "--landing",
        str(platform.landing_root / "events"),
        "--rate",
        str(GENERATOR_RATE),
    ]
    return ManagedProcess.under(platform.runtime_root, "generator", argv, _base_env(platform), cwd=CODE_ROOT)


def start_generator(platform: PlatformConfig) -> str:
    """Start the event generator alone (`warden platform generator start`), unless it runs; what
    happened."""
    generator = generator_process(platform)
    running = generator.pid()
    if running is not None:
        return f"generator: already running (pid {running})"
    pid = generator.start()
    return (
        f"generator: started (pid {pid}, {GENERATOR_RATE} events/s into {platform.landing_root / 'events'})"
    )


def stop_generator(platform: PlatformConfig) -> str:
    """Stop the event generator alone (`warden platform generator stop`): the jobs keep running and
    drain what it wrote; what happened."""
    return f"generator: {generator_process(platform).stop()}"


def _airflow_api(platform: PlatformConfig, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One JSON call to the embedded api-server (no token: all users are admin there)."""
    request = urllib.request.Request(
        f"{platform.airflow.base_url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=API_CALL_TIMEOUT_S) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise ServiceError(f"Airflow answered {exc.code} to {method} {path}: {exc.read()[:500]!r}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServiceError(
            f"Airflow at {platform.airflow.base_url} does not answer {method} {path}: {exc}"
        ) from exc


def _api_server_down(platform: PlatformConfig) -> list[str]:
    """["api_server"] until the api-server answers its health endpoint, then []."""
    try:
        _airflow_api(platform, "GET", "/api/v2/monitor/health")
    except ServiceError:
        return ["api_server"]
    return []


def _unhealthy_airflow_components(platform: PlatformConfig) -> list[str]:
    """The Airflow components not yet healthy (all of them while the api-server is down)."""
    try:
        health = _airflow_api(platform, "GET", "/api/v2/monitor/health")
    except ServiceError:
        return ["api_server", *AIRFLOW_COMPONENTS]
    return [name for name in AIRFLOW_COMPONENTS if (health.get(name) or {}).get("status") != "healthy"]


def _wait(
    what: str, pending: Callable[[], list[str]], processes: list[ManagedProcess], timeout: float
) -> None:
    """Poll `pending()` until it is empty, showing what it still waits for as progress; ServiceError
    on timeout or when a process exits."""
    started = time.monotonic()
    with progress.track(f"waiting for {what}") as task:
        while True:
            waiting_for = pending()
            if not waiting_for:
                return
            task.status(", ".join(waiting_for))
            for process in processes:
                if not process.is_running():
                    raise ServiceError(
                        f"{process.name} exited while waiting for {what}; "
                        f"last lines of {process.log_path}:\n{process.log_tail()}"
                    )
            if time.monotonic() - started >= timeout:
                logs = ", ".join(str(process.log_path) for process in processes)
                raise ServiceError(
                    f"timed out after {timeout:g}s waiting for {what} ({', '.join(waiting_for)}); see {logs}"
                )
            time.sleep(1.0)


def _unpause_supervision_dags(
    platform: PlatformConfig, airflow: list[ManagedProcess], timeout: float, echo: Echo
) -> None:
    """Wait until the dag-processor has registered every job's supervision DAG, then unpause those
    of `autostart_jobs`. A fleet's (`supervision.fleet_from_jobs` jobs or more) are passes run by
    hand: `warden_fleet`, which registers unpaused, starts those jobs itself."""
    jobs = load_jobs(platform.conf_dir).specs
    unknown = sorted(set(platform.autostart_jobs) - set(jobs))
    if unknown:
        raise ServiceError(
            f"platform.yaml autostart_jobs names {unknown}, which are not valid jobs "
            f"in {platform.conf_dir / 'jobs'}"
        )
    fleet = platform.supervision.watches_a_fleet(len(jobs))
    expected = {f"{SUPERVISE_DAG_PREFIX}{name}" for name in jobs} | ({FLEET_DAG_ID} if fleet else set())
    query = f"/api/v2/dags?dag_id_prefix_pattern={quote(SUPERVISE_DAG_PREFIX)}&limit=100"

    def registered() -> set[str]:
        try:
            dags: set[str] = set()
            # Page by page: the api-server answers at most `api.maximum_page_limit` (100) a call.
            while True:
                page = _airflow_api(platform, "GET", f"{query}&offset={len(dags)}")
                dags |= {dag["dag_id"] for dag in page["dags"]}
                if not page["dags"] or len(dags) >= page["total_entries"]:
                    break
            if fleet:
                dags.add(_airflow_api(platform, "GET", f"/api/v2/dags/{FLEET_DAG_ID}")["dag_id"])
        except ServiceError:
            return set()
        return dags

    _wait("supervision DAGs", lambda: sorted(expected - registered()), airflow, timeout)
    paused = [] if fleet else sorted(f"{SUPERVISE_DAG_PREFIX}{name}" for name in platform.autostart_jobs)

    def still_paused() -> list[str]:
        # A busy api-server may time out on a call; unpausing is idempotent, so try again, and show
        # the last error of each DAG still paused.
        errors = []
        for dag_id in list(paused):
            try:
                _airflow_api(platform, "PATCH", f"/api/v2/dags/{quote(dag_id)}", {"is_paused": False})
            except ServiceError as exc:
                errors.append(f"{dag_id} ({exc})")
                continue
            paused.remove(dag_id)
            echo(f"  unpaused {dag_id}")
        return errors

    _wait("the autostart DAGs to unpause", still_paused, airflow, timeout)


def up(platform: PlatformConfig, *, timeout: float = 300.0, echo: Echo = print) -> None:
    """Start the embedded platform and return once Airflow is healthy and supervising.

    Services already running are left as they are, so `up` after a partial start completes it.
    Raises ServiceError (with the failing service's log tail) if a service does not come up within
    `timeout` seconds; what did start keeps running until `down()`.
    """
    seaweed = SeaweedS3.for_platform(platform)
    if seaweed is None:
        echo(f"S3: external store at {platform.s3.endpoint_url or 'Amazon S3'}")
    else:
        echo(f"starting SeaweedFS S3 on {seaweed.endpoint_url} ...")
        seaweed.start(timeout=min(timeout, 60.0))
    postgres = EmbeddedPostgres.for_platform(platform)
    if postgres is not None:
        echo(f"starting PostgreSQL on {postgres.endpoint} (databases {', '.join(POSTGRES_DATABASES)}) ...")
        postgres.start(timeout=min(timeout, 60.0))
    cluster = SparkCluster.for_platform(platform)
    if cluster is not None:
        echo(f"starting the Spark cluster at {cluster.master_url} ({cluster.config.workers} workers) ...")
        cluster.start(timeout=min(timeout, 120.0))
    echo(f"migrating the ledger at {url_without_password(platform.resolved_ledger_url)} ...")
    Ledger.open(platform.resolved_ledger_url)

    echo("migrating Airflow's metadata database ...")
    with progress.track("migrating Airflow's metadata database"):
        migrate_airflow_db(platform)
    airflow = airflow_processes(platform)
    echo(f"starting Airflow: {', '.join(component.name for component in airflow)}")
    # The scheduler last: each task it runs reports to the api-server's execution API from its
    # first second, and at a first start on a busy machine the api-server listened 12 s after the
    # scheduler ran the first tasks, which all failed (the dag-processor and triggerer call that API
    # in-process).
    scheduler = next(component for component in airflow if component.name == SCHEDULER)
    first = [component for component in airflow if component is not scheduler]
    for component in first:
        component.start()
    _wait("Airflow's api-server", lambda: _api_server_down(platform), first, timeout)
    scheduler.start()
    generator = generator_process(platform)
    echo(f"starting the event generator ({GENERATOR_RATE} events/s into {platform.landing_root / 'events'})")
    generator.start()

    _wait("Airflow", lambda: _unhealthy_airflow_components(platform), airflow, timeout)
    _unpause_supervision_dags(platform, airflow, timeout, echo)
    if not generator.is_running():
        raise ServiceError(
            f"the event generator exited; last lines of {generator.log_path}:\n{generator.log_tail()}"
        )

    echo("")
    echo("Streamwarden is up.")
    echo(f"  Airflow UI:  {platform.airflow.base_url}  (embedded: no login needed, everyone is admin)")
    if seaweed is not None:
        echo(f"  S3:          {seaweed.endpoint_url}  bucket {platform.s3.bucket!r}")
    if cluster is not None:
        echo(f"  Spark:       {cluster.master_url}  (master UI {cluster.ui_url})")
    if postgres is not None:
        echo(f"  PostgreSQL:  {postgres.url('ledger')}  (and .../metastore)")
    echo(f"  ledger:      {url_without_password(platform.resolved_ledger_url)}")
    echo(f"  logs:        {platform.runtime_root / 'logs'}  (drivers: {platform.runtime_root / 'jobs'})")
    echo("  stop with:   make stop  (or .venv/bin/warden platform down)")


def down(platform: PlatformConfig, *, echo: Echo = print) -> None:
    """Stop the generator, Airflow, every streaming driver, the Spark cluster, SeaweedFS and
    PostgreSQL; a no-op when all are down.

    Airflow goes before the drivers so no supervision pass relaunches a driver being stopped;
    PostgreSQL goes last, because stopping the drivers records their runs in the ledger.
    """
    # Imported here: only `down` needs the supervisor stack, and `up`/`status` must work without it.
    from ops.control.supervisor import stop_all_jobs

    echo(stop_generator(platform))
    for component in reversed(airflow_processes(platform)):
        echo(f"{component.name}: {component.stop(AIRFLOW_STOP_TIMEOUT)}")
    seaweed = SeaweedS3.for_platform(platform)
    postgres = EmbeddedPostgres.for_platform(platform)
    try:
        for line in stop_all_jobs(platform):
            echo(f"driver {line}")
    finally:
        # Drivers may fail to stop (a broken ledger); the servers must still go down.
        cluster = SparkCluster.for_platform(platform)
        for name, ended in cluster.stop() if cluster is not None else []:
            echo(f"{name}: {ended}")
        if seaweed is not None:
            echo(f"seaweedfs: {seaweed.stop()}")
        if postgres is not None:
            echo(f"postgres: {postgres.stop()}")


def status(platform: PlatformConfig) -> list[ServiceStatus]:
    """Each embedded service: name, whether it runs, its pid and where it answers."""
    rows = []
    seaweed = SeaweedS3.for_platform(platform)
    if seaweed is not None:
        pid = seaweed.process.pid()
        rows.append(ServiceStatus("seaweedfs", pid is not None, pid, seaweed.endpoint_url))
    postgres = EmbeddedPostgres.for_platform(platform)
    if postgres is not None:
        pid = postgres.process.pid()
        rows.append(ServiceStatus("postgres", pid is not None, pid, postgres.endpoint))
    cluster = SparkCluster.for_platform(platform)
    if cluster is not None:
        for process in cluster.processes():
            pid = process.pid()
            url = cluster.master_url if process.name == "spark-master" else None
            rows.append(ServiceStatus(process.name, pid is not None, pid, url))
    for component in airflow_processes(platform):
        pid = component.pid()
        url = platform.airflow.base_url if component.name == "airflow-api-server" else None
        rows.append(ServiceStatus(component.name, pid is not None, pid, url))
    pid = generator_process(platform).pid()
    rows.append(ServiceStatus("generator", pid is not None, pid, None))
    return rows
