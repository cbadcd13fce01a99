"""A Spark standalone master and worker from pyspark's own classes, started with the command lines
of ops/embedded/services.py (the team stack's spark-master and spark-worker services run the same
ones, checked by tests/deploy/test_compose.py): the worker registers its cores and everything
listens on loopback."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyspark
import pytest

from ops.embedded.services import ManagedProcess, spark_master_argv, spark_worker_argv
from tests.support.ports import free_test_port
from tests.support.sockets import listening_sockets, process_trees

# Two JVMs cold-starting on a busy machine.
REGISTRATION_TIMEOUT = 180.0


def master_state(ui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except (urllib.error.URLError, OSError):
        return None


@pytest.mark.spark
def test_master_and_worker_register_and_stay_on_loopback(tmp_path: Path) -> None:
    spark_class = str(Path(sys.executable).parent / "spark-class")
    env = {
        **os.environ,
        # spark-class asks the system Python for SPARK_HOME unless told; that one has no pyspark.
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    port, ui_port, worker_ui_port = free_test_port(), free_test_port(), free_test_port()
    master = ManagedProcess.under(
        tmp_path,
        "spark-master",
        spark_master_argv(spark_class, host="127.0.0.1", port=port, webui_port=ui_port),
        env,
    )
    worker = ManagedProcess.under(
        tmp_path,
        "spark-worker",
        spark_worker_argv(
            spark_class,
            f"spark://127.0.0.1:{port}",
            host="127.0.0.1",
            webui_port=worker_ui_port,
            cores=1,
            memory="512m",
            work_dir=tmp_path / "work",
        ),
        env,
    )
    master.start()
    worker.start()
    try:
        deadline = time.monotonic() + REGISTRATION_TIMEOUT
        state = master_state(ui_port)
        while not (state and state["aliveworkers"] == 1):
            assert master.is_running(), master.log_tail()
            assert worker.is_running(), worker.log_tail()
            assert time.monotonic() < deadline, f"no worker registered:\n{worker.log_tail()}"
            time.sleep(1.0)
            state = master_state(ui_port)
        assert state["url"] == f"spark://127.0.0.1:{port}"
        assert (state["cores"], state["memory"]) == (1, 512)
        # The executors' scratch space is where the command says, not inside the installed wheel.
        assert (tmp_path / "work").is_dir()
        pids = [pid for pid in (master.pid(), worker.pid()) if pid is not None]
        sockets = listening_sockets(process_trees(pids))
        assert {s.port for s in sockets} >= {port, ui_port, worker_ui_port}
        assert [s.line() for s in sockets if not s.loopback] == []
    finally:
        assert worker.stop(timeout=30) != "not running"
        assert master.stop(timeout=30) != "not running"
