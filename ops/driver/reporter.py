"""The driver's liveness reporter: a daemon thread that rewrites its liveness record
(`ops.driver.liveness`) every `REPORT_SECONDS`. What counts as a move:

- a phase change, and every query event the listener sees (a batch committed, an idle trigger);
- in `starting` and `planning`, CPU burnt by the driver's process tree (its JVM included): a JVM
  that loads classes on a busy machine is slow, one that waits on nothing is not;
- in `running`, another task Spark's status tracker counts as completed, or a change in the set of
  active stages. CPU does not count here: a batch whose tasks all stop completing is hung whatever
  its threads spin on.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import structlog
from py4j.protocol import Py4JError
from pyspark import SparkContext

from ops.atomic import write_atomically
from ops.driver.liveness import Liveness, Phase

REPORT_SECONDS = 2.0
# CPU seconds the process tree must burn since its last move for another while starting.
CPU_MOVE_SECONDS = 0.2

log = structlog.get_logger("streamwarden.liveness")


def tree_cpu_seconds(process: psutil.Process) -> float:
    """User and system CPU of `process` and its live descendants (its JVM, the Python workers)."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class LivenessReporter:
    """Rewrites the driver's liveness file every `REPORT_SECONDS` from a daemon thread."""

    def __init__(self, path: Path, run_id: str, interval: float = REPORT_SECONDS) -> None:
        self.path = path
        self.run_id = run_id
        self.interval = interval
        self._process = psutil.Process()
        self._lock = threading.Lock()
        now = time.time()
        self._phase: Phase = "starting"
        self._phase_since = now
        self._moved_at = now
        self._cpu_at_move = tree_cpu_seconds(self._process)
        # Completed tasks: the run's total, and each active stage's count at the last report.
        self._tasks_completed = 0
        self._active: dict[int, int] = {}
        self._context: SparkContext | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="streamwarden-liveness", daemon=True)

    def __enter__(self) -> LivenessReporter:
        """Write the first record and report every `interval` until the block ends."""
        self.report()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        self._thread.join()

    def enter(self, phase: Phase, context: SparkContext | None = None) -> None:
        """The driver moved to `phase`; from `planning` on, `context` is the session's, whose status
        tracker the reports read. Reported at once while the reporter runs."""
        with self._lock:
            if context is not None:
                self._context = context
            if phase != self._phase:
                self._phase, self._phase_since = phase, time.time()
                self._moved_at = self._phase_since
        if self._thread.is_alive():
            self.report()

    def moved(self) -> None:
        """Something finished (a query event): a move."""
        with self._lock:
            self._moved_at = time.time()

    def report(self) -> Liveness:
        """Look for moves since the last report and rewrite the file."""
        cpu = tree_cpu_seconds(self._process)
        active = self._active_stages()
        with self._lock:
            now = time.time()
            newly = sum(max(0, count - self._active.get(stage, 0)) for stage, count in active.items())
            if self._phase == "running":
                if newly or active.keys() != self._active.keys():
                    self._moved_at = now
            elif cpu - self._cpu_at_move >= CPU_MOVE_SECONDS:
                self._moved_at, self._cpu_at_move = now, cpu
            self._active = active
            self._tasks_completed += newly
            record = Liveness(
                run_id=self.run_id,
                pid=os.getpid(),
                phase=self._phase,
                phase_since=self._phase_since,
                moved_at=self._moved_at,
                at=now,
                tasks_completed=self._tasks_completed,
                active_stages=len(active),
                cpu_seconds=round(cpu, 2),
            )
            write_atomically(self.path, record.to_json())
        return record

    def _active_stages(self) -> dict[int, int]:
        """The stages active now, each with its completed tasks (the last report's when the
        tracker cannot be read)."""
        context = self._context
        if context is None:
            return {}
        try:
            tracker = context.statusTracker()
            active = {}
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    active[stage] = info.numCompletedTasks
        except (Py4JError, AttributeError) as error:
            # The JVM is going away (a crash; a stopped SparkContext has no JVM side left, which
            # PySpark reports as an AttributeError): the heartbeat says what happened.
            log.debug("status tracker not read", error=str(error))
            return dict(self._active)
        return active

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.report()
            except OSError as error:
                log.warning("liveness not written", error=str(error))
