"""`--durations-file PATH`: every test's setup, call and teardown times, slowest first, in one file.

pytest's own `--durations N` prints to the log only; CI keeps this file whole (`.ci/run` prints
it) so where the suite's time goes can be read after any run. Under xdist the controller gets each
worker's reports and writes the file; the workers write nothing. Each phase is appended as it is
reported, so a run stopped from outside (CI's time limit) still leaves what it measured; the
session's end rewrites the file sorted, under a summary line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class DurationsRecorder:
    """Collects (seconds, phase, outcome, test id) from each report and writes them at the session's
    end. The outcome tells a failure from a pass when a run stopped from outside printed no summary."""

    path: Path
    started: float = field(default_factory=time.monotonic)
    phases: list[tuple[float, str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phase = (report.duration, report.when, report.outcome, report.nodeid)
        self.phases.append(phase)
        with self.path.open("a") as file:
            file.write(phase_line(phase) + "\n")

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        wall = time.monotonic() - self.started
        tests = len({nodeid for *_, nodeid in self.phases})
        lines = [f"# {tests} tests, {len(self.phases)} phases, {wall:.1f} s wall, exit status {exitstatus}"]
        lines += [phase_line(phase) for phase in sorted(self.phases, reverse=True)]
        self.path.write_text("\n".join(lines) + "\n")


def phase_line(phase: tuple[float, str, str, str]) -> str:
    seconds, when, outcome, nodeid = phase
    return f"{seconds:.2f}s {when:<8} {outcome:<7} {nodeid}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        default=None,
        help="write every test phase's duration, slowest first, to PATH (make test: .ci-out/)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--durations-file")
    # xdist workers report to the controller, which alone writes the file.
    if path is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationsRecorder(Path(path)), "streamwarden-durations-file")
