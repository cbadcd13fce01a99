"""Progress of long operations: quiet unless a display is showing, plain lines off a terminal."""

from __future__ import annotations

import io
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from ops import progress


class TerminalBuffer(io.StringIO):
    """A stream that says it is a terminal, as stderr does in an operator's shell."""

    def isatty(self) -> bool:
        return True


def lines(stream: io.StringIO) -> list[str]:
    """The lines written, with the elapsed seconds each ends with taken off."""
    return [re.sub(r" \(\d+s\)$", "", line) for line in stream.getvalue().splitlines()]


def test_without_a_display_tasks_show_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.track("upload", total=10, unit=progress.BYTES) as task:
        task.advance(10)
        task.status("halfway")
    assert capsys.readouterr() == ("", "")


def test_off_a_terminal_tasks_are_plain_lines() -> None:
    stream = io.StringIO()
    with progress.showing(stream):
        with progress.track("savepoint of router", total=3_000_000, unit=progress.BYTES) as upload:
            upload.status("batch 7")
            # Transfer callbacks advance from worker threads.
            with ThreadPoolExecutor(max_workers=3) as pool:
                list(pool.map(lambda _: upload.advance(1_000_000), range(3)))
        with progress.track("waiting for Airflow") as wait:
            wait.status("scheduler, triggerer")
            wait.status("scheduler, triggerer")
            wait.status("triggerer")
    assert lines(stream) == [
        "savepoint of router: 0 bytes of 3.0 MB",
        "savepoint of router: batch 7, 0 bytes of 3.0 MB",
        "savepoint of router: done, 3.0 MB of 3.0 MB",
        "waiting for Airflow",
        "waiting for Airflow: scheduler, triggerer",
        "waiting for Airflow: triggerer",
        "waiting for Airflow: done",
    ]


def test_a_task_ended_by_an_exception_is_shown_failed_and_the_exception_propagates() -> None:
    stream = io.StringIO()
    with (
        progress.showing(stream),
        pytest.raises(ValueError, match="disk full"),
        progress.track("fetching savepoint", total=4, unit="files") as task,
    ):
        task.advance()
        raise ValueError("disk full")
    assert lines(stream)[-1] == "fetching savepoint: failed, 1 of 4 files"


def test_the_display_ends_with_the_showing_context() -> None:
    stream = io.StringIO()
    with progress.showing(stream):
        pass
    with progress.track("after") as task:
        task.status("nobody is watching")
    assert stream.getvalue() == ""


def test_on_a_terminal_tasks_are_rich_bars_whose_last_frame_stays() -> None:
    terminal = TerminalBuffer()
    with progress.showing(terminal):
        with progress.track("savepoint of router", total=2_000_000, unit=progress.BYTES) as upload:
            upload.advance(2_000_000)
        with (
            pytest.raises(RuntimeError),
            progress.track("replay [batch 3]", total=5, unit="batches") as replay,
        ):
            replay.advance(2)
            raise RuntimeError("driver died")
    frames = terminal.getvalue()
    # Markup-like text in a description is shown as it is.
    assert "replay [batch 3]" in frames
    final = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", frames).splitlines()
    assert any(line.startswith("✓ savepoint of router") and "2.0 MB of 2.0 MB" in line for line in final)
    assert any(line.startswith("✗ replay [batch 3]") and line.rstrip().endswith("failed") for line in final)
