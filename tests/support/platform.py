"""A throwaway platform: its own conf dir, storage roots and SQLite ledger under tmp_path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, PlatformConfig, load_platform
from tests.support.ports import free_test_port


def write_conf(conf_dir: Path, runtime: Path, *, jobs: dict[str, dict] | None = None) -> None:
    """A platform.yaml rooted at `runtime` plus the repo's job files (or the given ones)."""
    (conf_dir / "jobs").mkdir(parents=True, exist_ok=True)
    platform = {
        "storage": {
            "runtime_root": str(runtime),
            "landing_root": str(runtime / "landing"),
            "lake_root": str(runtime / "lake"),
            "checkpoint_root": str(runtime / "checkpoints"),
        },
        "ledger_url": f"sqlite:///{runtime / 'ledger.db'}",
        "spark": {"master": "local[2]", "ui_enabled": False},
    }
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(platform))
    # Files job specs refer to (e.g. the enricher's mapping) live beside conf/jobs.
    for extra in ("mappings",):
        if (DEFAULT_CONF_DIR / extra).is_dir():
            shutil.copytree(DEFAULT_CONF_DIR / extra, conf_dir / extra, dirs_exist_ok=True)
    if jobs is None:
        for job_file in (DEFAULT_CONF_DIR / "jobs").glob("*.yaml"):
            spec = yaml.safe_load(job_file.read_text())
            spec["operations"]["metrics_port"] = free_test_port()
            (conf_dir / "jobs" / job_file.name).write_text(yaml.safe_dump(spec, sort_keys=False))
    else:
        for name, spec in jobs.items():
            (conf_dir / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


@pytest.fixture
def platform_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PlatformConfig:
    """A platform config in tmp_path, made the current one through STREAMWARDEN_CONF_DIR."""
    conf_dir = tmp_path / "conf"
    write_conf(conf_dir, tmp_path / "runtime")
    monkeypatch.setenv(CONF_DIR_ENV, str(conf_dir))
    return load_platform(conf_dir)


@pytest.fixture
def ledger(platform_conf: PlatformConfig) -> Ledger:
    """The throwaway platform's ledger, migrated to the newest schema."""
    return Ledger.open(platform_conf.resolved_ledger_url)


def copy_job(conf_dir: Path, name: str, new_name: str) -> Path:
    """A copy of a job file under a new name (for tests that need two jobs)."""
    source = conf_dir / "jobs" / f"{name}.yaml"
    spec = yaml.safe_load(source.read_text())
    spec["name"] = new_name
    spec["operations"]["metrics_port"] = free_test_port()
    target = conf_dir / "jobs" / f"{new_name}.yaml"
    target.write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copymode(source, target)
    return target


def job_paths(platform: PlatformConfig, job: str) -> JobPaths:
    """The paths of `job` (its file loaded from the platform's conf dir)."""
    return JobPaths.of(platform, find_job(job, platform.conf_dir))
