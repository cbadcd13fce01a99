"""The deferrable trigger that watches one job between reconcile passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ops.clock import utcnow
from ops.control.supervisor import Supervisor
from ops.spec.platform import load_platform


class JobWatchTrigger(BaseTrigger):
    """Polls a job until it needs a reconcile pass (a dead driver, a request, a due restart...).

    It holds no worker slot while it waits. It fires with the reason as soon as the supervisor's
    read-only `attention()` finds one, or with `reason=None` after `timeout` seconds so that every
    job still gets a periodic pass.
    """

    def __init__(self, *, job: str, conf_dir: str, poll_interval: float = 1.0, timeout: float = 60.0) -> None:
        super().__init__()
        self.job = job
        self.conf_dir = conf_dir
        self.poll_interval = poll_interval
        self.timeout = timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job": self.job,
                "conf_dir": self.conf_dir,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
            },
        )

    @cached_property
    def supervisor(self) -> Supervisor:
        return Supervisor.for_platform(load_platform(Path(self.conf_dir)))

    def poll(self) -> str | None:
        """One look at the job: the reason it needs a pass, or None."""
        return self.supervisor.attention(self.job)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.timeout
        while True:
            # The look reads SQLite, a file and /proc: keep it off the triggerer's event loop.
            reason = await asyncio.to_thread(self.poll)
            if reason is not None or time.monotonic() >= deadline:
                yield TriggerEvent({"job": self.job, "reason": reason, "detected_at": utcnow().isoformat()})
                return
            await asyncio.sleep(self.poll_interval)
