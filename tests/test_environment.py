"""The installed set is the locked one: pyspark-client must not have overwritten pyspark
(docs/architecture.md §7)."""

from __future__ import annotations

import base64
import hashlib
from importlib.metadata import PackageNotFoundError, distribution, version

import pyspark
import pytest


def test_pyspark_is_the_locked_4_3_0() -> None:
    assert pyspark.__version__ == "4.3.0"
    assert version("pyspark") == "4.3.0"
    with pytest.raises(PackageNotFoundError):
        version("pyspark-client")


def test_no_pyspark_file_was_overwritten() -> None:
    # pyspark-client installs into the same package directory; pip check does not notice. The
    # wheel's RECORD holds each file's sha256, so any replaced file shows up here.
    changed = []
    for file in distribution("pyspark").files or []:
        if file.hash is None or not file.name.endswith(".py"):
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(file.locate().read_bytes()).digest()).rstrip(b"=")
        if digest.decode() != file.hash.value:
            changed.append(str(file))
    assert changed == []


@pytest.mark.xdist_group("environment")
def test_a_test_of_an_xdist_group_carries_its_group_in_its_id(request: pytest.FixtureRequest) -> None:
    """Under `--dist loadgroup` (`make test`), xdist's scheduler sends a group to one worker by the
    `@group` ending of its tests' ids, which tests/conftest.py sets; elsewhere ids are plain."""
    grouped = hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup")
    name = "test_a_test_of_an_xdist_group_carries_its_group_in_its_id"
    assert request.node.nodeid.endswith(name + ("@environment" if grouped else ""))
