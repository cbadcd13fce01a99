"""A streaming driver listens on loopback only: its Python process, its JVM and its Python workers."""

from __future__ import annotations

from collections.abc import Callable

from ops.spec.platform import PlatformConfig
from tests.support.drivers import Driver, caught_up, edit_job, fast_trigger, wait_for, write_sessions_input
from tests.support.sockets import listening_sockets, process_trees


def test_a_stateful_driver_listens_on_loopback_only(
    platform_conf: PlatformConfig, start_driver: Callable[..., Driver]
) -> None:
    # The sessionizer runs applyInPandasWithState, so Python workers (pyspark.daemon) run too.
    edit_job(platform_conf, "sessionizer", fast_trigger)
    write_sessions_input(platform_conf, 0)
    driver = start_driver("run-net", job="sessionizer")
    driver.wait_heartbeat(lambda hb: hb.batch_id is not None)
    wait_for(lambda: caught_up(platform_conf, "sessionizer", files=1), 240, "the sessionizer's batches")

    sockets = listening_sockets(process_trees([driver.process.pid]))
    report = "\n".join(s.line() for s in sockets)
    jvm = [s for s in sockets if "java" in s.command]
    # Not vacuous: the JVM's RPC and block-manager ports, the metrics endpoint, the Python workers.
    assert len(jvm) >= 2, report
    assert any(s.pid == driver.process.pid for s in sockets), report
    assert any("pyspark.daemon" in s.command for s in sockets), report
    assert [s.line() for s in sockets if not s.loopback] == [], report
