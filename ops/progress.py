"""Progress of long operations, shown only to someone who asked for it.

Library code reports through `track()`, which opens a named task for the length of a `with`:

    with progress.track(f"savepoint of {job}", total=size, unit=progress.BYTES) as task:
        task.status(f"batch {batch_id}")   # a status line beside the bar
        task.advance(uploaded)             # from any thread: transfer callbacks call it too

A task without a total is a spinner with its status line (waiting for a service to answer).
Nothing is shown unless a display is active: the CLI opens one with `showing(sys.stderr)`, rich
progress bars on a terminal and plain lines elsewhere (CI logs, pipes). Airflow tasks and tests
open none, so the same library calls stay quiet there. The active display belongs to the calling
context (a ContextVar), which worker threads do not inherit: open the task in the caller and hand
it to the workers.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from rich.console import Console, RenderableType
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Task as RichTask
from rich.text import Text

# The unit whose amounts are shown as sizes (kB, MB) rather than counts.
BYTES = "bytes"
# Plain-line output repeats a task that keeps moving at most this often, so a CI log shows it is
# alive without a line per uploaded chunk.
LINE_EVERY_SECONDS = 15.0


class Display(Protocol):
    """Where tracked tasks are shown; `track()` drives it, library code never does."""

    def open(self, description: str, total: float | None, unit: str) -> int:
        """Show a new task; its id."""
        ...

    def advance(self, task_id: int, amount: float) -> None:
        """Add `amount` to the task's completed amount (negative when a transfer is retried)."""
        ...

    def status(self, task_id: int, text: str) -> None:
        """Replace the task's status line."""
        ...

    def close(self, task_id: int, failed: bool) -> None:
        """The task ended: done, or `failed` by an exception."""
        ...


_active_display: ContextVar[Display | None] = ContextVar("progress_display", default=None)


class Task:
    """One tracked operation. Its methods do nothing when no display is active."""

    def __init__(self, display: Display | None, task_id: int) -> None:
        self._display = display
        self._id = task_id

    def advance(self, amount: float = 1) -> None:
        """Count `amount` more done (bytes for a `BYTES` task); safe to call from any thread."""
        if self._display is not None:
            self._display.advance(self._id, amount)

    def status(self, text: str) -> None:
        """Show `text` beside the task (what it is doing or waiting for now)."""
        if self._display is not None:
            self._display.status(self._id, text)


@contextmanager
def track(description: str, *, total: float | None = None, unit: str = "") -> Iterator[Task]:
    """A task on the active display for the length of the `with`; a no-op task without one.

    With a `total` (in `unit`; `BYTES` shows sizes) the task is a bar, without one a spinner.
    A task ended by an exception is shown as failed, and the exception propagates.
    """
    display = _active_display.get()
    if display is None:
        yield Task(None, 0)
        return
    task_id = display.open(description, total, unit)
    try:
        yield Task(display, task_id)
    except BaseException:
        display.close(task_id, failed=True)
        raise
    display.close(task_id, failed=False)


@contextmanager
def showing(stream: TextIO) -> Iterator[None]:
    """Show the tasks tracked in this context on `stream`: rich bars on a terminal, lines elsewhere."""
    display: Display = RichDisplay(stream) if stream.isatty() else LineDisplay(stream)
    token = _active_display.set(display)
    try:
        yield
    finally:
        _active_display.reset(token)


def _amount(completed: float, total: float | None, unit: str) -> str:
    """Done of total in the task's unit ("4.2 MB of 38.5 MB", "3 of 7 steps"); empty for a spinner."""
    if total is None:
        return ""
    if unit == BYTES:
        return f"{decimal(int(completed))} of {decimal(int(total))}"
    return f"{completed:g} of {total:g} {unit}".rstrip()


class _AmountColumn(ProgressColumn):
    def render(self, task: RichTask) -> Text:
        # A spinner's total is set only to end it (see `RichDisplay.close`): it has no amount.
        total = None if task.fields["spinner"] else task.total
        return Text(_amount(task.completed, total, task.fields["unit"]))


class _StateColumn(SpinnerColumn):
    """A spinner while the task runs, then a tick, or a cross when it failed."""

    def __init__(self) -> None:
        super().__init__(finished_text=Text("✓", style="green"))

    def render(self, task: RichTask) -> RenderableType:
        return Text("✗", style="red") if task.fields["failed"] else super().render(task)


class RichDisplay:
    """Tasks as rich progress bars, live on a terminal while any task is open."""

    def __init__(self, stream: TextIO) -> None:
        self._console = Console(file=stream)
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._open_tasks = 0

    def open(self, description: str, total: float | None, unit: str) -> int:
        with self._lock:
            if self._progress is None:
                self._progress = Progress(
                    _StateColumn(),
                    # Descriptions and statuses quote paths and service names: never markup.
                    TextColumn("{task.description}", markup=False),
                    BarColumn(),
                    _AmountColumn(),
                    TimeElapsedColumn(),
                    TextColumn("{task.fields[status]}", markup=False),
                    console=self._console,
                )
                self._progress.start()
            self._open_tasks += 1
            return self._progress.add_task(
                description, total=total, unit=unit, spinner=total is None, status="", failed=False
            )

    def _live(self) -> Progress:
        assert self._progress is not None, "a task is open, so its progress display is live"
        return self._progress

    def advance(self, task_id: int, amount: float) -> None:
        self._live().advance(TaskID(task_id), amount)

    def status(self, task_id: int, text: str) -> None:
        self._live().update(TaskID(task_id), status=text)

    def close(self, task_id: int, failed: bool) -> None:
        with self._lock:
            progress = self._live()
            task = next(task for task in progress.tasks if task.id == task_id)
            if failed:
                progress.update(TaskID(task_id), status="failed", failed=True)
            else:
                # A finished spinner shows a full bar; a bar ends full even if a retry rewound it.
                total = task.total if task.total is not None else 1.0
                progress.update(TaskID(task_id), total=total, completed=total, status="done")
            progress.stop_task(TaskID(task_id))
            self._open_tasks -= 1
            if self._open_tasks == 0:
                # The last frame stays on screen; the next task starts a new display below it.
                progress.stop()
                self._progress = None


@dataclass
class _LineTask:
    description: str
    total: float | None
    unit: str
    started: float = field(default_factory=time.monotonic)
    completed: float = 0.0
    status: str = ""
    printed_at: float = 0.0


class LineDisplay:
    """Tasks as plain lines: when a task opens, when its status changes, every
    `LINE_EVERY_SECONDS` while it moves, and when it ends."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._tasks: dict[int, _LineTask] = {}
        self._ids = itertools.count()

    def _print(self, task: _LineTask, outcome: str = "") -> None:
        now = time.monotonic()
        details = [
            text for text in (outcome or task.status, _amount(task.completed, task.total, task.unit)) if text
        ]
        summary = f": {', '.join(details)}" if details else ""
        self._stream.write(f"{task.description}{summary} ({now - task.started:.0f}s)\n")
        self._stream.flush()
        task.printed_at = now

    def open(self, description: str, total: float | None, unit: str) -> int:
        with self._lock:
            task_id = next(self._ids)
            self._tasks[task_id] = _LineTask(description, total, unit)
            self._print(self._tasks[task_id])
            return task_id

    def advance(self, task_id: int, amount: float) -> None:
        with self._lock:
            task = self._tasks[task_id]
            task.completed += amount
            if time.monotonic() - task.printed_at >= LINE_EVERY_SECONDS:
                self._print(task)

    def status(self, task_id: int, text: str) -> None:
        with self._lock:
            task = self._tasks[task_id]
            if text != task.status or time.monotonic() - task.printed_at >= LINE_EVERY_SECONDS:
                task.status = text
                self._print(task)

    def close(self, task_id: int, failed: bool) -> None:
        with self._lock:
            self._print(self._tasks.pop(task_id), "failed" if failed else "done")
