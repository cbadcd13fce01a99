"""A supervisor as a process of its own: reconcile passes of one job, back to back, for a while.

`python -m tests.support.supervisor_process JOB SECONDS` runs the real `Supervisor` of the platform
in `$STREAMWARDEN_CONF_DIR` (its ledger, its job lock) with stub drivers (`StubDriverBackend`), as
the job's supervision would on each host, only without pauses. A pass that fails on purpose (the
ledger unreachable, say) prints `error: ...` and the loop goes on, as the next scheduled pass
would; every pass that acted prints its summary. The last line counts the passes.
"""

from __future__ import annotations

import sys
import time

from ops.alerts import AlertCenter
from ops.control.supervisor import Supervisor
from ops.exceptions import WardenError
from ops.ledger.store import Ledger
from ops.spec.platform import load_platform
from tests.support.stub_driver import StubDriverBackend

# Between failed passes: the ledger is down, asking it again at once only fills the output.
RETRY_SECONDS = 0.5


def main(job: str, seconds: float) -> None:
    platform = load_platform()
    ledger = Ledger.open(platform.resolved_ledger_url)
    supervisor = Supervisor(
        platform, ledger, StubDriverBackend(platform), AlertCenter(ledger, platform.slack)
    )
    deadline = time.monotonic() + seconds
    passes = failed = 0
    while time.monotonic() < deadline:
        passes += 1
        try:
            summary = supervisor.reconcile(job)
        except WardenError as error:
            failed += 1
            print(f"error: {error}", flush=True)
            time.sleep(RETRY_SECONDS)
            continue
        if summary.actions:
            print(f"pass: {summary.line()}", flush=True)
    print(f"passes {passes} failed {failed}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
