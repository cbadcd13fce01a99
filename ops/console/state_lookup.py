"""A stateful job's committed state by key, for the job page, read in a `warden state` process.

Reading state takes Spark (`ops.recovery.state_reader`: a local session and Spark's statestore
reader), and the board is served by Airflow's api-server, which must not host a JVM. So a lookup
runs `python -m ops.cli state JOB --key=K --json` as a child process, in its own process group,
with a time limit (past it the group is killed, its JVM with it), and reads the JSON it prints.
Lookups run one at a time: each starts a JVM of a few hundred MB on the api-server's host.

Whether a job offers the lookup is known without Spark: `JobSpec.state_lookup_key` (a stateful
job whose state is the one value state the reader reads) and its commit log (no committed batch,
no state to look up yet).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ops.driver.checkpoint import log_entries
from ops.exceptions import (
    ConfigError,
    StateLookupBusyError,
    StateLookupError,
    StateLookupTimeoutError,
    StateReadError,
)
from ops.spec.job import JobSpec
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig

# A cold local Spark session takes 10-30 s on a busy 2-core machine; the read itself, seconds.
LOOKUP_TIMEOUT_SECONDS = 120.0
# How `warden` prefixes the error it exits 2 with (ops.cli.main).
CLI_ERROR_PREFIX = "warden: "
NO_STATE = "this job keeps no state"


@dataclass(frozen=True)
class StateLookupForm:
    """What the job page offers: a lookup by `key_column` as of `batch_id`, or only `note`
    (then no form) saying why not."""

    key_column: str | None
    batch_id: int | None
    note: str | None


def lookup_form(platform: PlatformConfig, spec: JobSpec | ConfigError) -> StateLookupForm:
    """Whether the job page shows a state lookup form, from the job file and its commit log."""
    if isinstance(spec, ConfigError):
        return StateLookupForm(None, None, "the job file does not validate")
    key_column = spec.state_lookup_key
    if not spec.operations.stateful:
        return StateLookupForm(None, None, NO_STATE)
    if key_column is None:
        return StateLookupForm(
            None,
            None,
            f"this job's state ({spec.pipeline.kind}) cannot be looked up by key: only a job that keeps "
            "one transformWithState value state can be",
        )
    batch_id = max(log_entries(JobPaths.of(platform, spec).commits), default=None)
    if batch_id is None:
        return StateLookupForm(None, None, f"{NO_STATE} yet: no batch has committed")
    return StateLookupForm(key_column, batch_id, None)


@dataclass(frozen=True)
class StateRows:
    """The rows of one key in a job's state, as of a committed batch; timestamps in ISO 8601."""

    job: str
    key: str
    state_var: str
    batch_id: int
    columns: list[str]
    rows: list[list[Any]]

    @property
    def missing_key(self) -> str:
        """What the page says when the key has no rows."""
        return f"no state for key {self.key!r} in job {self.job!r} as of batch {self.batch_id}"


class StateLookup:
    """Looks up keys in jobs' state through `warden state` processes, one at a time."""

    def __init__(self, platform: PlatformConfig, timeout_seconds: float = LOOKUP_TIMEOUT_SECONDS) -> None:
        self.platform = platform
        self.timeout_seconds = timeout_seconds
        self._running = threading.Lock()

    def look_up(self, spec: JobSpec, key: str) -> StateRows:
        """The rows of `key` in the job's state (none when it has no state for that key).

        Raises `StateReadError` when the job's state cannot be read (not offered, nothing
        committed), `StateLookupBusyError` while another lookup runs, `StateLookupTimeoutError`
        past the time limit and `StateLookupError` when the process failed otherwise.
        """
        form = lookup_form(self.platform, spec)
        if form.key_column is None:
            raise StateReadError(form.note or NO_STATE)
        if not self._running.acquire(blocking=False):
            raise StateLookupBusyError("another state lookup is running; try again when it has finished")
        try:
            return self._read(spec, key)
        finally:
            self._running.release()

    def _read(self, spec: JobSpec, key: str) -> StateRows:
        # `--key=K`: a key that starts with a dash stays the option's value.
        command = [sys.executable, "-m", "ops.cli", "state", spec.name, f"--key={key}", "--json"]
        env = {
            **os.environ,
            CONF_DIR_ENV: str(self.platform.conf_dir),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        # Its own session: on a timeout the whole group goes, the JVM that spark-submit started too.
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=self.timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise StateLookupTimeoutError(
                f"reading the state of job {spec.name!r} took longer than {self.timeout_seconds:g} s; "
                "it was stopped"
            ) from None
        said = [line for line in stderr.splitlines() if line.strip()]
        # Exit 1: the key has no state; the table (empty) is still printed.
        if process.returncode in (0, 1):
            table = json.loads(stdout.strip().splitlines()[-1])
            return StateRows(
                job=table["job"],
                key=key,
                state_var=table["state_var"],
                batch_id=table["batch_id"],
                columns=table["key_columns"] + table["value_columns"],
                rows=table["rows"],
            )
        refusals = [line.removeprefix(CLI_ERROR_PREFIX) for line in said if line.startswith(CLI_ERROR_PREFIX)]
        if refusals:
            raise StateReadError(refusals[-1])
        raise StateLookupError(
            f"reading the state of job {spec.name!r} failed (exit {process.returncode}): "
            f"{said[-1] if said else '(no output)'}"
        )
