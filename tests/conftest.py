"""Shared fixtures and the test tiers.

Real components only: each support module starts what its fixtures need. A test is marked with
the expensive things it starts, derived from the fixtures it uses (see `FIXTURE_MARKERS`), so the
fast tier (`make test-fast`) needs no bookkeeping in the tests themselves; a test that starts one
of them without such a fixture carries the marker by hand.
"""

from __future__ import annotations

import os

import pytest
from _pytest.nodeid import NodeId

from tests.support.jvm import BASE_OPTIONS

# Every JVM the tests start runs C1 only with the serial collector (tests/support/jvm.py); `make
# test` also maps a class-data archive (`python -m tests.support.jvm`). The platform's own JVMs
# keep the defaults; `java` names the options on stderr ("Picked up JDK_JAVA_OPTIONS").
if not os.environ.get("JDK_JAVA_OPTIONS"):
    os.environ["JDK_JAVA_OPTIONS"] = BASE_OPTIONS

pytest_plugins = [
    "tests.support.airflow",
    "tests.support.clock",
    "tests.support.durations",
    # Before the modules that import them: pytest rewrites asserts only in plugins it imports first.
    "tests.support.platform",
    "tests.support.cluster",
    "tests.support.drivers",
    "tests.support.fake_backend",
    "tests.support.postgres",
    "tests.support.slack",
    "tests.support.s3",
    "tests.support.secrets",
    "tests.support.spark",
    "tests.support.warehouse",
    "tests.support.backfill",
]

# Fixture -> the marker of what it starts. The markers are registered in pyproject.toml.
FIXTURE_MARKERS = {
    "spark": "spark",
    "start_driver": "spark",
    "cluster": "spark",
    "running_cluster": "spark",
    "s3_server": "s3",
    "keyed_s3": "s3",
    "airflow_db": "airflow",
}

# Under xdist, the order tests are handed out in: the ones that start the most first, so a long
# test does not start last while the other workers run out of work.
XDIST_ORDER = ("slow", "airflow", "s3", "spark")

# Fixture -> the xdist group its tests share (under `--dist loadgroup` a group stays on one worker,
# so its tests run one at a time): the whole embedded platform (Airflow's four components plus
# SeaweedFS and the generator, several GB and most of a core while they start), and `waiting`.
# The other slow tests spread out. `waiting` holds the tests whose minutes go to waiting out
# triggers, graces and autoscaling windows on a mostly idle driver, set by hand
# (`pytest.mark.xdist_group("waiting")`), and the standalone Spark cluster's (a master, two
# workers, their executors, one cluster per module), whose autoscaling steps wait the same way.
# Side by side on two workers they left a core idle for minutes; one after another on one worker,
# they leave the CPU to the other workers' tests.
WAITING_GROUP = "waiting"
FIXTURE_GROUPS = {
    "embedded_platform": "embedded_platform",
    "cluster": WAITING_GROUP,
    "running_cluster": WAITING_GROUP,
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures start; group the heaviest and order them for xdist."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in fixtures and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        group = next((FIXTURE_GROUPS[name] for name in sorted(fixtures & FIXTURE_GROUPS.keys())), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # Only xdist workers collect for distribution; a serial run keeps the files' order.
    if hasattr(config, "workerinput"):
        if config.getvalue("loadgroup"):
            for item in items:
                _name_its_group(item)
        items.sort(key=_xdist_rank)


def _name_its_group(item: pytest.Item) -> None:
    """Give a test of an xdist group the id `<id>@<group>`, by which `--dist loadgroup` sends
    the whole group to one worker.

    xdist 3.8 sets that id in its own hook by writing `item._nodeid`, which pytest 9 no longer
    reads (a node's id is its `_id`): its groups were silently spread over the workers. The id is
    set here the way pytest 9 keeps it, once per test (`tests/test_environment.py` checks it).
    """
    groups = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
    if groups and "@" not in item.nodeid:
        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")  # noqa: SLF001 - see above


def _xdist_rank(item: pytest.Item) -> tuple[int, bool]:
    """The position of the item's most expensive marker in `XDIST_ORDER` (the rest come last),
    and within it the grouped tests first: a group runs its tests one after another on one worker,
    so started late it would be the run's tail while the other workers wait."""
    rank = next(
        (rank for rank, marker in enumerate(XDIST_ORDER) if item.get_closest_marker(marker) is not None),
        len(XDIST_ORDER),
    )
    return rank, item.get_closest_marker("xdist_group") is None
