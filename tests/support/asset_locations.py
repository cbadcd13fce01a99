"""The shipped example of a published view (`conf/examples/asset_locations.yaml`,
`jobs.asset_locations`), installed into a test platform whose views go to a test database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ops import views
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform
from tests.support.drivers import fast_trigger
from tests.support.platform import STUCK_GRACE_FLOORS
from tests.support.ports import free_test_port

JOB = "asset_locations"


def install_asset_job(platform: PlatformConfig, views_url: str, edit: Any = None) -> PlatformConfig:
    """The example's job file (a test's trigger, graces and port; `edit` applied to it) in the
    platform's conf dir, and the platform with `views.url` set to `views_url`, reloaded."""
    spec = yaml.safe_load((DEFAULT_CONF_DIR / "examples" / f"{JOB}.yaml").read_text())
    spec["operations"]["metrics_port"] = free_test_port()
    fast_trigger(spec)
    spec["operations"]["health"].update(STUCK_GRACE_FLOORS)
    if edit is not None:
        edit(spec)
    (platform.conf_dir / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    settings_file = platform.conf_dir / "platform.yaml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["views"] = {"url": views_url}
    settings_file.write_text(yaml.safe_dump(settings))
    return load_platform(platform.conf_dir)


def published_view(platform: PlatformConfig, job: str = JOB) -> dict[str, list[str]]:
    """The view as a reader of the database sees it: key -> sorted locations."""
    with views.connected(views.database_url(platform)) as connection:
        return {row.key: row.value for row in views.read_view(connection, job)}


def buggy_code(directory: Path) -> Path:
    """A wrong version of the job's code in `directory`: it drops every removal."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "buggy_assets.py").write_text(
        "from jobs.asset_locations import transform\n\n\n"
        "def build(inputs, context):\n"
        "    kept = dict(inputs, changes=inputs['changes'].where(\"action = 'add'\"))\n"
        "    return transform.build(kept, context)\n"
    )
    return directory
