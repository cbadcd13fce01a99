"""The streaming drivers as Prometheus scrape targets (a `file_sd` file).

`conf/prometheus/prometheus.yml` scrapes the targets listed in `conf/prometheus/targets/*.json`,
and Prometheus rereads that file whenever it changes, so the list follows the fleet without a
restart. A target is a job whose desired state is `running` in the ledger: the "job down" alert
fires for a driver that should run and does not answer, never for a job suspended on purpose.
`warden_platform` rewrites the file (`monitoring.scrape_targets_file` in platform.yaml) every
minute when that list changed. Each target carries the job as `job_name`, the label the drivers
put on their own series (scraped with `honor_labels`), so `up` names the job too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ops.atomic import write_if_changed
from ops.driver.telemetry import JOB_LABEL
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec, load_jobs
from ops.spec.platform import PlatformConfig
from ops.states import Desired

# The scrape job name of the drivers in every Prometheus config of the repo; the alert rules'
# unit tests use it too.
DRIVER_SCRAPE_JOB = "streamwarden_drivers"


def driver_targets(specs: Iterable[JobSpec], host: str) -> list[dict[str, Any]]:
    """The file_sd target groups of these jobs' metrics endpoints on `host`, by job name."""
    return [
        {"targets": [f"{host}:{spec.operations.metrics_port}"], "labels": {JOB_LABEL: spec.name}}
        for spec in sorted(specs, key=lambda spec: spec.name)
    ]


def supervised_specs(platform: PlatformConfig, ledger: Ledger) -> list[JobSpec]:
    """The valid job specs whose desired state is `running`."""
    running = {job.name for job in ledger.jobs() if job.desired_state == Desired.RUNNING}
    return [spec for name, spec in load_jobs(platform.conf_dir).specs.items() if name in running]


def current_targets(platform: PlatformConfig, ledger: Ledger) -> list[dict[str, Any]]:
    """The target groups of the jobs meant to run, on `monitoring.scrape_host` (by default the
    drivers' bind address)."""
    host = platform.monitoring.scrape_host or platform.spark.bind_address or "127.0.0.1"
    return driver_targets(supervised_specs(platform, ledger), host)


def write_targets(path: Path, targets: list[dict[str, Any]]) -> bool:
    """Put `targets` in `path` (atomically: Prometheus never reads half a file), only when it holds
    other targets; whether it was rewritten."""
    return write_if_changed(path, json.dumps(targets, indent=1) + "\n")


def write_driver_targets(platform: PlatformConfig, ledger: Ledger, path: Path) -> list[dict[str, Any]]:
    """Write the targets of the jobs meant to run to `path` and return them."""
    targets = current_targets(platform, ledger)
    write_targets(path, targets)
    return targets


def refresh_scrape_targets(platform: PlatformConfig, ledger: Ledger) -> str:
    """Bring `monitoring.scrape_targets_file` up to date with the jobs meant to run (every minute
    from `warden_platform`, so a suspended or resumed job leaves or joins the scrape within a
    minute, and Prometheus' refresh interval); one line saying what it did."""
    path = platform.scrape_targets_file
    if path is None:
        return "monitoring.scrape_targets_file is null: no scrape targets kept"
    targets = current_targets(platform, ledger)
    rewritten = write_targets(path, targets)
    return f"{path}: {len(targets)} driver targets ({'rewritten' if rewritten else 'unchanged'})"
