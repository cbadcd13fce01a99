"""The typed, frozen model of `conf/platform.yaml` and its loader.

Relative paths in platform.yaml resolve against the repo root (the parent of the conf directory),
so the same file works from any working directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ops.exceptions import ConfigError
from ops.secrets import check_reference
from ops.spec.model import SECRET_REFERENCE_ERROR, Model, describe_error, read_yaml

CONF_DIR_ENV = "STREAMWARDEN_CONF_DIR"
# Overrides `ledger.url` of platform.yaml for every process that loads it (warden, Airflow, drivers).
LEDGER_URL_ENV = "STREAMWARDEN_LEDGER_URL"
# The ledger databases Streamwarden runs on; a URL of any other database is refused at load.
SQLITE_PREFIX = "sqlite:///"
POSTGRES_DRIVER = "postgresql+psycopg"
LEDGER_URL_FORMS = "sqlite:///PATH or postgresql+psycopg://USER[:PASSWORD]@HOST:PORT/DATABASE"
# The embedded PostgreSQL server's address and superuser role (trusted on 127.0.0.1 without a
# password, like every embedded service), and its database of the views jobs publish.
POSTGRES_HOST = "127.0.0.1"
POSTGRES_ROLE = "streamwarden"
VIEWS_DATABASE = "views"
DEFAULT_CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# Each job's supervision DAG is `<prefix><job>`; the DAG factory and `warden platform up` agree here.
SUPERVISE_DAG_PREFIX = "warden_supervise_"
# The one DAG that supervises every job of a platform with `supervision.fleet_from_jobs` jobs or more.
FLEET_DAG_ID = "warden_fleet"


def _secret_reference(value: object) -> str:
    try:
        return check_reference(value)
    except ValueError as error:
        # Its own error type, so describe_error never echoes the input: it may be a pasted secret.
        raise PydanticCustomError(SECRET_REFERENCE_ERROR, "{problem}", {"problem": str(error)}) from None


# Where a secret comes from, never the secret itself: `env:NAME`, `file:/PATH` or
# `airflow:CONN_ID[#FIELD]` (ops.secrets); null for none.
SecretRef = Annotated[str, BeforeValidator(_secret_reference)]


class StorageConfig(Model):
    runtime_root: Path = Path(".runtime")
    landing_root: Path = Path(".runtime/landing")
    lake_root: Path = Path(".runtime/lake")
    checkpoint_root: Path = Path(".runtime/checkpoints")


class LedgerRetention(Model):
    """How long the ledger keeps the rows only history reads; the platform DAG prunes older ones
    (`Ledger.prune`). Open runs, undelivered alerts and an open incident's newest alert are kept
    whatever their age."""

    decisions_days: float = Field(90.0, gt=0)
    alerts_days: float = Field(90.0, gt=0)
    runs_days: float = Field(180.0, gt=0, description="Closed runs and standbys.")


class LedgerConfig(Model):
    """Where the ledger lives: a SQLAlchemy URL, `sqlite:///PATH` or `postgresql+psycopg://...`
    (`postgresql://` means the same: psycopg 3 is the driver installed). Checked at load by
    `ledger_url_problem`, outside pydantic, whose errors would quote the URL, password and all."""

    url: str = "sqlite:///.runtime/ledger.db"
    retention: LedgerRetention = Field(default_factory=LedgerRetention)


def normalized_ledger_url(url: str) -> str:
    """`url` with a PostgreSQL URL of no or the generic driver made psycopg 3's; unchanged otherwise."""
    for generic in ("postgresql://", "postgres://"):
        if url.startswith(generic):
            return f"{POSTGRES_DRIVER}://{url[len(generic) :]}"
    return url


def url_without_password(url: str) -> str:
    """`url` with its password, if any, replaced by `***`: what messages and logs may show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def ledger_url_problem(url: str) -> str | None:
    """Why `url` cannot hold the ledger (naming it without its password), or None if it can."""
    scheme, separator, _ = normalized_ledger_url(url).partition("://")
    if not separator:
        return f"not a database URL ({len(url)} characters); use {LEDGER_URL_FORMS}"
    if scheme not in ("sqlite", POSTGRES_DRIVER):
        return (
            f"the ledger runs on SQLite or PostgreSQL with psycopg 3, not {scheme!r} "
            f"({url_without_password(url)}); use {LEDGER_URL_FORMS}"
        )
    return None


class EmbeddedPostgresConfig(Model):
    """The PostgreSQL server `warden platform up` starts on 127.0.0.1 (databases `ledger` and
    `metastore`); the ledger uses it when `ledger.url` points at it."""

    port: int = Field(5433, ge=1, le=65535)
    data_dir: Path = Path(".runtime/postgres")


class S3Config(Model):
    endpoint_url: str | None = "http://127.0.0.1:8333"
    bucket: str = "streamwarden"
    region: str = "us-east-1"
    access_key_id: SecretRef | None = "env:AWS_ACCESS_KEY_ID"
    secret_access_key: SecretRef | None = "env:AWS_SECRET_ACCESS_KEY"
    savepoint_prefix: str = "savepoints"


class ModelStoreConfig(Model):
    """The model store (`ops.models`): each model's versions in the object store, under `prefix`."""

    prefix: str = "models"


class ViewStoreConfig(Model):
    """Where the views jobs publish (`pipeline.view`, `ops.views`) live: a PostgreSQL database,
    `postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE`; null: the embedded server's `views`
    database. `password` names the URL's password by reference instead (the team stack's
    `file:/run/secrets/views_db_password`), so that no value sits in the file."""

    url: str | None = None
    password: SecretRef | None = None

    @field_validator("password")
    @classmethod
    def _password_of_the_url(cls, password: str | None, info: ValidationInfo) -> str | None:
        # Checked on this field, so that an error quotes the reference, never the URL (which may
        # hold a password).
        url = info.data.get("url")
        if password is not None and (
            url is None or urlsplit(url).username is None or urlsplit(url).password is not None
        ):
            raise ValueError(
                "the password of views.url's user: set it with a url that names a user and no password"
            )
        return password


class ArchiveConfig(Model):
    """The archive of landing input in the object store (`ops.archive`), by arrival hour."""

    prefix: str = "archive"
    seal_after_minutes: float = Field(
        10.0, ge=0, description="How long after an arrival hour ends it is archived (late writers)."
    )
    retention_days: float = Field(30.0, gt=0, description="Older arrival hours are deleted.")


class BackfillConfig(Model):
    """How a backfill (`ops.backfill`) feeds the archive to a job's query."""

    max_batch_bytes: int | None = Field(
        None,
        gt=0,
        description="The archived bytes one micro-batch of a backfill reads: consecutive arrival hours "
        "while they fit, an hour over it in slices of its files; null: a quarter of the memory the "
        "job's tasks run in (its driver's in local mode, an executor's on a cluster). The backfill's "
        "tasks run in a heap of four times it, no less than 512 MiB and no more than the job's memory.",
    )


class SlackConfig(Model):
    # An `env:` reference whose variable is unset, or null, means console + ledger only.
    webhook_url: SecretRef | None = "env:STREAMWARDEN_SLACK_WEBHOOK_URL"
    dedup_window_seconds: int = Field(600, ge=0)
    max_attempts: int = Field(50, ge=1)


class AirflowConfig(Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    # Where the embedded Airflow keeps its metadata: a SQLite file in its home (enough for a
    # handful of jobs), or the embedded PostgreSQL server's `airflow` database, which a fleet needs:
    # with a hundred jobs, SQLite's one writer at a time locked the dag-processor out until it died.
    metadata_database: Literal["sqlite", "postgres"] = "sqlite"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class EmbeddedClusterConfig(Model):
    """The Spark standalone cluster `warden platform up` starts when `spark.master` is `embedded`.

    Worker `i` (from 0) listens on `worker_port_base + i` and its web UI on `worker_ui_port_base + i`.
    """

    workers: int = Field(2, ge=1)
    cores_per_worker: int = Field(1, ge=1)
    memory_per_worker: str = Field("2g", pattern=r"^[0-9]+[mg]$")
    executor_memory: str = Field("1g", pattern=r"^[0-9]+[mg]$")
    master_port: int = Field(7077, ge=1024, le=65535)
    master_ui_port: int = Field(8090, ge=1024, le=65535)
    worker_port_base: int = Field(7078, ge=1024, le=65535)
    worker_ui_port_base: int = Field(8091, ge=1024, le=65535)


class SparkDefaults(Model):
    # `local[N]`, `embedded` (the standalone cluster below, on loopback), or a `spark://` URL.
    master: str = "local[2]"
    cluster: EmbeddedClusterConfig = Field(default_factory=EmbeddedClusterConfig)
    ui_enabled: bool = False
    # The address every driver binds its ports to (RPC, block manager, UI) and advertises. Spark's
    # default is the machine's external address; loopback keeps an embedded platform off the
    # network. A driver with executors on other hosts needs an address they reach (null: Spark's).
    bind_address: str | None = "127.0.0.1"
    extra_conf: dict[str, str] = Field(default_factory=dict)

    @property
    def uses_embedded_cluster(self) -> bool:
        return self.master == "embedded"

    @property
    def master_url(self) -> str:
        """The URL drivers connect to: `master`, with `embedded` resolved to the cluster's master."""
        return f"spark://127.0.0.1:{self.cluster.master_port}" if self.uses_embedded_cluster else self.master

    def network_conf(self) -> dict[str, str]:
        """The driver confs that bind its RPC and block-manager ports to `bind_address`."""
        if self.bind_address is None:
            return {}
        return {"spark.driver.bindAddress": self.bind_address, "spark.driver.host": self.bind_address}

    def network_env(self) -> dict[str, str]:
        """The environment the driver's JVM needs for the same: its web UI binds to
        `SPARK_LOCAL_IP` (or every interface), whatever `spark.driver.bindAddress` says."""
        return {} if self.bind_address is None else {"SPARK_LOCAL_IP": self.bind_address}


class MonitoringConfig(Model):
    # Where batch tasks (savepoints, compactions, backfills) push their outcomes and figures
    # (`ops.pushgateway`), e.g. http://pushgateway:9091 in the team stack; null pushes nothing.
    pushgateway_url: str | None = None
    push_timeout_seconds: float = Field(5.0, gt=0)
    # The Prometheus file_sd file of the drivers meant to run (`ops.prometheus_targets`), which
    # `conf/prometheus/prometheus.yml` reads (`targets/*.json`) and `warden_platform` keeps current;
    # null keeps none (Prometheus finds the drivers another way).
    scrape_targets_file: Path | None = Path("conf/prometheus/targets/drivers.json")
    # The host Prometheus reaches the drivers at; null: the drivers' bind address (127.0.0.1 in
    # the embedded platform). The team stack names the scheduler container its drivers run in.
    scrape_host: str | None = None


class WarehouseConfig(Model):
    """The warehouse tables compaction and backfill publish into (`ops.warehouse`): one Spark
    catalog table per job, `<database>.<job>`, in a Hive metastore every Spark process shares."""

    root: Path = Field(Path(".runtime/warehouse"), description="Where the versioned partitions live.")
    database: str = Field("warehouse", pattern=r"^[a-z][a-z0-9_]*$")
    metastore_jdbc_url: str | None = Field(
        None,
        description="The metastore database, jdbc:postgresql://HOST:PORT/DB; null: the embedded "
        "PostgreSQL server's `metastore` database.",
    )
    metastore_user: str = "streamwarden"
    metastore_password: SecretRef | None = None
    jdbc_driver_jar: Path | None = Field(
        None,
        description="PostgreSQL's JDBC driver jar; null: the one `make install` brings (PyPI "
        "wbjdbc), else Debian's libpostgresql-jdbc-java (ops.warehouse.metastore).",
    )
    version_retention_hours: float = Field(
        7 * 24.0, gt=0, description="How long a replaced partition version is kept for rollback."
    )


class SupervisionConfig(Model):
    """How the platform's jobs are supervised. Below `fleet_from_jobs` jobs, each has a continuous
    supervision DAG whose watch trigger looks at it every second. From that many on, one
    continuous DAG, `warden_fleet`, supervises them all from one task (`ops.control.fleet`), and
    each job's supervision DAG is kept for a pass run by hand."""

    fleet_from_jobs: int = Field(20, ge=1)
    pass_every_seconds: float = Field(
        60.0, gt=0, description="Under the fleet watch, how often a steady job gets a pass all the same."
    )
    fleet_task_minutes: float = Field(
        60.0, gt=0, description="How long one `warden_fleet` task supervises; the next run's takes over."
    )

    def watches_a_fleet(self, jobs: int) -> bool:
        """Whether a platform of `jobs` valid jobs is supervised by `warden_fleet`."""
        return jobs >= self.fleet_from_jobs


class PlatformConfig(Model):
    """The platform-wide settings of `conf/platform.yaml`."""

    storage: StorageConfig = Field(default_factory=StorageConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    # null: no embedded PostgreSQL server (the ledger is SQLite or a PostgreSQL run elsewhere).
    postgres: EmbeddedPostgresConfig | None = Field(default_factory=EmbeddedPostgresConfig)
    s3: S3Config = Field(default_factory=S3Config)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    models: ModelStoreConfig = Field(default_factory=ModelStoreConfig)
    views: ViewStoreConfig = Field(default_factory=ViewStoreConfig)
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)
    spark: SparkDefaults = Field(default_factory=SparkDefaults)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    warehouse: WarehouseConfig = Field(default_factory=WarehouseConfig)
    supervision: SupervisionConfig = Field(default_factory=SupervisionConfig)
    # The jobs whose supervision DAGs `warden platform up` unpauses (and so launches); the others'
    # DAGs are registered paused, to be unpaused from the UI. 2 cores run one or two drivers well.
    autostart_jobs: tuple[str, ...] = ("router",)
    # Filled by the loader, never read from YAML.
    conf_dir: Path = Field(default=DEFAULT_CONF_DIR, exclude=True)

    @property
    def repo_root(self) -> Path:
        return self.conf_dir.parent

    def resolve(self, path: Path) -> Path:
        """An absolute path: relative paths are taken from the repo root."""
        return path if path.is_absolute() else (self.repo_root / path).resolve()

    @property
    def runtime_root(self) -> Path:
        return self.resolve(self.storage.runtime_root)

    @property
    def landing_root(self) -> Path:
        return self.resolve(self.storage.landing_root)

    @property
    def lake_root(self) -> Path:
        return self.resolve(self.storage.lake_root)

    @property
    def checkpoint_root(self) -> Path:
        return self.resolve(self.storage.checkpoint_root)

    @property
    def warehouse_root(self) -> Path:
        return self.resolve(self.warehouse.root)

    @property
    def resolved_ledger_url(self) -> str:
        """The ledger URL with a relative SQLite path made absolute."""
        url = normalized_ledger_url(self.ledger.url)
        if url.startswith(SQLITE_PREFIX) and not url.startswith(SQLITE_PREFIX + "/"):
            return SQLITE_PREFIX + str(self.resolve(Path(url[len(SQLITE_PREFIX) :])))
        return url

    @property
    def scrape_targets_file(self) -> Path | None:
        """Where the drivers' Prometheus targets are kept, or None when they are not."""
        path = self.monitoring.scrape_targets_file
        return None if path is None else self.resolve(path)

    @property
    def postgres_data_dir(self) -> Path | None:
        """The embedded PostgreSQL server's data directory, or None when there is none."""
        return None if self.postgres is None else self.resolve(self.postgres.data_dir)

    @property
    def view_database_url(self) -> str | None:
        """The views' database (`views.url`, else the embedded server's `views` database), or None
        when there is neither."""
        if self.views.url is not None:
            return self.views.url
        if self.postgres is None:
            return None
        return f"postgresql://{POSTGRES_ROLE}@{POSTGRES_HOST}:{self.postgres.port}/{VIEWS_DATABASE}"

    def job_runtime_dir(self, job: str) -> Path:
        """Where a job's driver logs and heartbeat live."""
        return self.runtime_root / "jobs" / job


def conf_dir() -> Path:
    """The conf directory: `$STREAMWARDEN_CONF_DIR` or the repo's `conf/`."""
    return Path(os.environ.get(CONF_DIR_ENV) or DEFAULT_CONF_DIR).resolve()


def load_platform(directory: Path | None = None) -> PlatformConfig:
    """Load and validate `platform.yaml` from the conf directory; `$STREAMWARDEN_LEDGER_URL`,
    when set, replaces its `ledger.url`."""
    directory = (directory or conf_dir()).resolve()
    path = directory / "platform.yaml"
    document, _ = read_yaml(path)
    try:
        platform = PlatformConfig.model_validate({**document, "conf_dir": directory})
    except ValidationError as exc:
        raise ConfigError(path, describe_error(exc)) from exc
    ledger_url = os.environ.get(LEDGER_URL_ENV)
    if ledger_url:
        problem = ledger_url_problem(ledger_url)
        if problem is not None:
            raise ConfigError(f"${LEDGER_URL_ENV}", problem)
        return platform.model_copy(update={"ledger": LedgerConfig(url=ledger_url)})
    problem = ledger_url_problem(platform.ledger.url)
    if problem is not None:
        raise ConfigError(path, f"field 'ledger.url': {problem}")
    if platform.airflow.metadata_database == "postgres" and platform.postgres is None:
        raise ConfigError(
            path, "field 'airflow.metadata_database': postgres needs the embedded server; 'postgres' is null"
        )
    return platform
