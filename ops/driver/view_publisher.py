"""The driver's view publisher: a job's committed sink batches applied to its view, in order.

A job with `pipeline.view` has its sink read as the view's changelog (`ops.views`). The sink's log
(`_spark_metadata/<N>`) says what batch N committed; the publisher reads those files (pyarrow,
the valid rows only), checks that no key appears twice, and applies the batch in one transaction
marked with N, so a batch applies once however often a driver dies around it.

`reconcile()` runs when the driver starts, before it replays anything: a rewind or restate has
cut the sink's log back to a savepoint's batch, so the batches the view holds beyond the log's
newest are reverted first (`ops.views.revert_after`), and then every committed batch it lacks is
applied. It raises when the database cannot be reached: a driver that replayed before the revert
would write new batches under the ids the view still holds. `poll()` runs between batches while the
query runs; a database that stops answering there only delays the view (a warning, a retry after
`RETRY_SECONDS`): the batches wait in the sink's log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import structlog

from ops import views
from ops.driver.checkpoint import batch_files, log_entries
from ops.exceptions import ViewStoreError
from ops.spec.pipelines import DEAD_LETTER_REASON, ViewOutput

# How long a publisher whose database stopped answering waits before it tries again.
RETRY_SECONDS = 5.0

log = structlog.get_logger("streamwarden.view")


class ViewPublisher:
    """Publishes one job's committed sink batches to its view."""

    def __init__(self, job: str, view: ViewOutput, sink_log: Path, url: str) -> None:
        self.job = job
        self.view = view
        self.sink_log = sink_log
        self.url = url
        self._connection: psycopg.Connection[Any] | None = None
        self._retry_at = 0.0

    def reconcile(self) -> int:
        """Revert what the view holds beyond the sink log's newest batch, then apply the committed
        batches it lacks; how many it applied. Raises `ViewStoreError` when the database is down."""
        connection = self._connected()
        last = max(log_entries(self.sink_log), default=-1)
        if views.applied_batch(connection, self.job) > last:
            keys = views.revert_after(connection, self.job, last)
            log.info("view reverted to the sink's newest batch", job=self.job, batch=last, keys=keys)
        return self._publish(connection)

    def poll(self) -> int:
        """Apply the committed batches the view lacks; how many. A database that does not answer
        is logged and tried again after `RETRY_SECONDS`; a batch that breaks the changelog's
        contract (a key twice) raises `ViewStoreError`."""
        if time.monotonic() < self._retry_at:
            return 0
        try:
            return self._publish(self._connected())
        except psycopg.OperationalError as error:
            self._wait_for_database(error)
        except ViewStoreError as error:
            if self._connection is not None:
                raise
            self._wait_for_database(error)
        return 0

    def _wait_for_database(self, error: Exception) -> None:
        self.close()
        self._retry_at = time.monotonic() + RETRY_SECONDS
        log.warning("view not published, retrying", job=self.job, error=str(error).splitlines()[0])

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connected(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = views.connect(self.url)
        return self._connection

    def _publish(self, connection: psycopg.Connection[Any]) -> int:
        applied = views.applied_batch(connection, self.job)
        pending = sorted(batch for batch in log_entries(self.sink_log) if batch > applied)
        for batch in pending:
            changes = self._changes(batch)
            views.apply_batch(connection, self.job, batch, changes)
            log.info("view batch published", job=self.job, batch=batch, keys=len(changes))
        return len(pending)

    def _changes(self, batch: int) -> dict[str, Any]:
        """Each key's new value in the batch (None: deleted), from the valid rows of its files."""
        changes: dict[str, Any] = {}
        for path in sorted(batch_files(self.sink_log, batch)):
            if not path.exists():
                continue
            table = pq.read_table(path, columns=[self.view.key, self.view.value, DEAD_LETTER_REASON])
            for row in table.to_pylist():
                if row[DEAD_LETTER_REASON] is not None:
                    continue
                key = str(row[self.view.key])
                if key in changes:
                    raise ViewStoreError(
                        f"batch {batch} of job {self.job!r} holds key {key!r} twice: a view's changelog "
                        f"has at most one row of a key per batch (pipeline.view.key {self.view.key!r})"
                    )
                changes[key] = row[self.view.value]
        return changes
