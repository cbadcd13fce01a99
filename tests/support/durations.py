"""`--durations-file PATH`: every test's setup, call and teardown times, slowest first, in one file.

pytest's own `--durations N` prints to the log only; CI keeps this file whole (`.ci/run` prints
it) so where the suite's time goes can be read after any run. Under xdist the controller gets each
worker's reports and writes the file; the workers write nothing. Each phase is appended as it is
reported, so a run stopped from outside (CI's time limit) still leaves what it measured; the
session's end rewrites the file sorted, under summary lines. Each phase also names its worker and
when it ended (seconds into the session), and a summary line gives each worker's last end: a run
whose workers end far apart has a tail where the machine waits on one test.

Wall time on a loaded machine says little of what a test costs, so each phase also carries the CPU
seconds its worker's process tree used meanwhile (`tree_cpu_seconds`): the worker itself, its
live descendants (the session's JVM, drivers, warehouse processes) and the ones it reaped. A
process that outlives its parent is adopted by init and escapes the count: so does the JVM of
every Python process that starts Spark and exits (a driver, a backfill, a compaction), since
PySpark never waits for it. For tests that start such processes the figure is a lower bound, and
a phase in which one ends takes its earlier CPU with it (floored at 0).
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CPU_PROPERTY = "tree_cpu_seconds"
# Seconds, CPU seconds, phase, outcome, worker, when it ended (seconds into the session), test id.
Phase = tuple[float, float, str, str, str, float, str]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class DurationsRecorder:
    """Collects a `Phase` from each report and writes them at the session's
    end. The outcome tells a failure from a pass when a run stopped from outside printed no summary."""

    path: Path
    started: float = field(default_factory=time.time)
    phases: list[Phase] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cpu = dict(report.user_properties).get(CPU_PROPERTY, 0.0)
        # Under xdist the report names its worker's gateway (`gw0`, ...); a serial run is one `-`.
        node = getattr(report, "node", None)
        worker = node.gateway.id if node is not None else "-"
        phase = (
            report.duration,
            cpu,
            report.when,
            report.outcome,
            worker,
            report.stop - self.started,
            report.nodeid,
        )
        self.phases.append(phase)
        with self.path.open("a") as file:
            file.write(phase_line(phase) + "\n")

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        wall = time.time() - self.started
        tests = len({nodeid for *_, nodeid in self.phases})
        cpu = sum(phase[1] for phase in self.phases)
        lines = [
            f"# {tests} tests, {len(self.phases)} phases, {wall:.1f} s wall, {cpu:.0f} CPU-s, "
            f"exit status {exitstatus}",
            f"# each worker's last phase ended at: {worker_ends(self.phases)}",
        ]
        lines += [phase_line(phase) for phase in sorted(self.phases, reverse=True)]
        self.path.write_text("\n".join(lines) + "\n")


def phase_line(phase: Phase) -> str:
    seconds, cpu, when, outcome, worker, ended, nodeid = phase
    return f"{seconds:.2f}s {cpu:7.1f}cpu {when:<8} {outcome:<7} {worker:<4} {ended:6.0f}s {nodeid}"


def worker_ends(phases: list[Phase]) -> str:
    """When (seconds into the session) each worker finished its last phase: a long tail is workers
    idle while one runs on."""
    ends: dict[str, float] = {}
    for *_, worker, ended, _nodeid in phases:
        ends[worker] = max(ends.get(worker, 0.0), ended)
    return ", ".join(f"{worker} {ended:.0f} s" for worker, ended in sorted(ends.items()))


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process, its reaped children and its live descendants."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # After the command's closing parenthesis: state, ppid, ... utime (14th), stime, cutime, cstime.
        fields = stat.rsplit(")", 1)[1].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(value) for value in fields[11:15])
    me = os.getpid()
    for pid, tick_count in ticks.items():
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, me):
            ancestor = parents.get(ancestor)
        if ancestor == me and pid != me:
            total += tick_count / CLOCK_TICKS
    return total


CPU_MARKS = pytest.StashKey[dict[str, float]]()


class PhaseCpu:
    """Where the tests run (each xdist worker, or the one process): notes the tree's CPU as each
    phase starts and reports what the phase used in its report's `user_properties`."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        item.stash[CPU_MARKS] = {"setup": tree_cpu_seconds()}
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        item.stash.setdefault(CPU_MARKS, {})["call"] = tree_cpu_seconds()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        item.stash.setdefault(CPU_MARKS, {})["teardown"] = tree_cpu_seconds()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        started = item.stash.get(CPU_MARKS, {}).get(call.when)
        if started is not None:
            report.user_properties.append((CPU_PROPERTY, max(0.0, round(tree_cpu_seconds() - started, 1))))
        return report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        default=None,
        help="write every test phase's duration, slowest first, to PATH (make test: .ci-out/)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--durations-file")
    if path is None:
        return
    config.pluginmanager.register(PhaseCpu(), "streamwarden-phase-cpu")
    # xdist workers report to the controller, which alone writes the file.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationsRecorder(Path(path)), "streamwarden-durations-file")
