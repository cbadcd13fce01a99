"""Shared fixtures and the test tiers.

Real components only: each support module starts what its fixtures need. A test is marked with
the expensive things it starts, derived from the fixtures it uses (see `FIXTURE_MARKERS`), so the
fast tier (`make test-fast`) needs no bookkeeping in the tests themselves; a test that starts one
of them without such a fixture carries the marker by hand.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.airflow",
    "tests.support.clock",
    "tests.support.drivers",
    "tests.support.fake_backend",
    "tests.support.platform",
    "tests.support.slack",
    "tests.support.s3",
    "tests.support.spark",
]

# Fixture -> the marker of what it starts. The markers are registered in pyproject.toml.
FIXTURE_MARKERS = {
    "spark": "spark",
    "start_driver": "spark",
    "s3_server": "s3",
    "airflow_db": "airflow",
}

# Tests that start the whole embedded platform run one at a time (under `--dist loadgroup` a
# group stays on one worker): each is Airflow's four components plus SeaweedFS and the generator,
# several GB and most of a core while they start.
EMBEDDED_PLATFORM_GROUP = "embedded_platform"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures start; group the `slow` ones for xdist.

    `tryfirst`, because xdist reads the `xdist_group` markers in its own hook of this name.
    """
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in fixtures and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group(EMBEDDED_PLATFORM_GROUP))
