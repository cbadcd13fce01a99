"""The embedded Spark standalone cluster: one master and its workers on 127.0.0.1.

The pyspark wheel has no start scripts that fit (they daemonize and write pid files of their
own), but its `bin/spark-class` runs the master and worker classes in the foreground, so each
runs as a `ManagedProcess` (pid file, log under `<runtime_root>/logs/`, stopped with its process
group). Every port of the cluster is on loopback: `--host 127.0.0.1` binds the RPC ports and
`SPARK_LOCAL_IP` the web UIs (which otherwise listen on every interface); executors inherit it
from their worker. Drivers run in client mode against `spark://127.0.0.1:<master_port>` (the
standalone master refuses cluster mode for Python apps); `jobs.runtime.build_session` gives each
its cores (`spark.cores.max`) and executor settings.

`SparkCluster.health()` reads the master's `/json/` endpoint on its web UI: workers alive, cores
in use, applications running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops import progress
from ops.embedded.services import ManagedProcess
from ops.exceptions import ServiceError
from ops.spec.platform import EmbeddedClusterConfig, PlatformConfig

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


# Spark tries the next 16 ports when one is taken; the configured ports are the cluster's address
# (drivers, the compose file, firewalls), so a taken one is an error. The master's REST submission
# server (a fixed port, 6066) serves only cluster deploy mode, which Python apps cannot use.
DAEMON_JAVA_OPTS = "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false"


def master_argv(spark_class: str, *, host: str, port: int, webui_port: int) -> list[str]:
    """The master's command line, bound to `host`; the team stack's `spark-master` service runs
    the same one (tests/deploy checks docker-compose.yml against it)."""
    return [spark_class, MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(webui_port)]


def worker_argv(
    spark_class: str,
    master_url: str,
    *,
    host: str,
    port: int,
    webui_port: int,
    cores: int,
    memory: str,
    work_dir: Path | str,
) -> list[str]:
    """A worker's command line, offering `cores` and `memory` to `master_url` from `host`, its
    executors' scratch space in `work_dir`; the team stack's `spark-worker-N` services run it too."""
    return [
        spark_class,
        WORKER_CLASS,
        master_url,
        "--host",
        host,
        "--port",
        str(port),
        "--webui-port",
        str(webui_port),
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        str(work_dir),
    ]


def spark_home() -> Path:
    """The pyspark package directory: it holds `bin/spark-class` and the jars (found without
    importing pyspark, which the control plane never loads)."""
    found = importlib.util.find_spec("pyspark")
    assert found is not None and found.origin is not None, "pyspark is a dependency of the platform"
    return Path(found.origin).parent


@dataclass(frozen=True)
class ClusterHealth:
    """What the master reports: its status, workers alive and their cores, apps running."""

    status: str
    workers_alive: int
    cores: int
    cores_used: int
    apps: tuple[str, ...]


@dataclass(frozen=True)
class SparkCluster:
    """The embedded standalone cluster of a platform (`spark.master: embedded`)."""

    platform: PlatformConfig
    config: EmbeddedClusterConfig

    @classmethod
    def for_platform(cls, platform: PlatformConfig) -> SparkCluster | None:
        """The embedded cluster the platform runs its drivers on, or None (local mode, an external master)."""
        if not platform.spark.uses_embedded_cluster:
            return None
        return cls(platform, platform.spark.cluster)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.config.master_port}"

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.config.master_ui_port}"

    def processes(self) -> list[ManagedProcess]:
        """The master, then each worker, as managed processes (nothing started)."""
        runtime = self.platform.runtime_root
        master = ManagedProcess.under(
            runtime,
            "spark-master",
            master_argv(
                self._spark_class(),
                host=LOOPBACK,
                port=self.config.master_port,
                webui_port=self.config.master_ui_port,
            ),
            self._env(),
        )
        workers = [
            ManagedProcess.under(
                runtime,
                f"spark-worker-{index + 1}",
                worker_argv(
                    self._spark_class(),
                    self.master_url,
                    host=LOOPBACK,
                    port=self.config.worker_port_base + index,
                    webui_port=self.config.worker_ui_port_base + index,
                    cores=self.config.cores_per_worker,
                    memory=self.config.memory_per_worker,
                    work_dir=runtime / "spark" / f"worker-{index + 1}",
                ),
                self._env(),
            )
            for index in range(self.config.workers)
        ]
        return [master, *workers]

    def start(self, timeout: float = 120.0) -> None:
        """Start the master and the workers (those not running) and wait until every worker registered."""
        for process in self.processes():
            process.start()
        self.wait_until_ready(timeout)

    def stop(self, timeout: float = 30.0) -> list[tuple[str, str]]:
        """Stop the workers, then the master; (name, how it ended) for each."""
        return [(process.name, process.stop(timeout)) for process in reversed(self.processes())]

    def health(self) -> ClusterHealth | None:
        """The master's view of the cluster, or None when its web UI does not answer."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2.0) as response:
                document: dict[str, Any] = json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        alive = [worker for worker in document.get("workers", []) if worker.get("state") == "ALIVE"]
        return ClusterHealth(
            status=str(document.get("status", "UNKNOWN")),
            workers_alive=len(alive),
            cores=sum(int(worker.get("cores", 0)) for worker in alive),
            cores_used=sum(int(worker.get("coresused", 0)) for worker in alive),
            apps=tuple(str(app.get("name")) for app in document.get("activeapps", [])),
        )

    def wait_until_ready(self, timeout: float) -> None:
        """Return once the master is ALIVE with every worker registered; ServiceError with log tails."""
        deadline = time.monotonic() + timeout
        processes = self.processes()
        with progress.track(f"waiting for the Spark cluster at {self.master_url}") as task:
            while True:
                health = self.health()
                if (
                    health is not None
                    and health.status == "ALIVE"
                    and health.workers_alive >= self.config.workers
                ):
                    return
                task.status(f"{health.workers_alive if health else 0}/{self.config.workers} workers")
                stopped = [process for process in processes if not process.is_running()]
                if stopped or time.monotonic() >= deadline:
                    culprit = stopped[0] if stopped else processes[0]
                    why = f"{culprit.name} exited" if stopped else f"not ready within {timeout:g}s"
                    raise ServiceError(
                        f"the Spark cluster at {self.master_url}: {why}; last lines of "
                        f"{culprit.log_path}:\n{culprit.log_tail()}"
                    )
                time.sleep(0.5)

    def _spark_class(self) -> str:
        return str(spark_home() / "bin" / "spark-class")

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            # The web UIs bind to SPARK_LOCAL_IP, or to every interface without it.
            "SPARK_LOCAL_IP": LOOPBACK,
            # Executors start Python workers with this interpreter: the venv's, with pandas.
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_LOG_DIR": str(self.platform.runtime_root / "logs"),
            "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
        }
