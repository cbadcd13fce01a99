"""What the board's New job and Edit forms do once Airflow has let the user do it: the tasks of
`warden_new_job` and `warden_edit_job` call these with the job file the form drafted.

Both check the draft again (`ops.console.drafts`: a job file reaches these DAGs through Airflow's
REST API or trigger form too, not only from the board; the analyzer's verdict on a draft the
board checked is found, not computed again) before anything is written:

* `create_job` writes `conf/jobs/<name>.yaml` in one step, never over an existing file (two
  creations racing for a name: one wins, the other is refused), then the verdict beside the job's
  other files, so the file counts as analysed. The DAG factory gives it its supervision DAG at the
  next parse, paused until someone starts it.
* `edit_job` deploys the draft as `warden upgrade JOB --spec FILE --reason R` does
  (`ops.recovery.upgrade`): a savepoint, a dry run of the new version on a copy of it, then the
  deploy, rolled back if the new version does not get ready.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ops.atomic import create_atomically, write_atomically
from ops.console.drafts import check_draft
from ops.exceptions import DraftRejectedError
from ops.spec.analysis import verdict_path
from ops.spec.job import JobSpec, find_job, job_file
from ops.spec.paths import JobPaths

if TYPE_CHECKING:
    from ops.recovery.loop import ControlLoop
    from ops.recovery.upgrade import UpgradeResult
    from ops.spec.platform import PlatformConfig


def create_job(platform: PlatformConfig, text: str) -> JobSpec:
    """Write `text` as a new job's file once it checks out; its spec. `DraftRejectedError` when
    it does not, or when the name was taken since the board checked it."""
    checked = check_draft(platform, text)
    name = checked.spec.name
    path = job_file(name, platform.conf_dir)
    try:
        create_atomically(path, text)
    except FileExistsError as taken:
        raise DraftRejectedError(name, {"name": f"a job named {name!r} exists already ({path})"}) from taken
    write_atomically(verdict_path(platform, name), checked.verdict.model_dump_json(indent=2))
    return checked.spec


def edit_job(
    supervisor: ControlLoop,
    job: str,
    text: str,
    *,
    reason: str,
    progress: Callable[[str], None] | None = None,
) -> UpgradeResult:
    """Deploy `text` as `job`'s new version through `warden upgrade` once it checks out; how the
    upgrade ended (`upgraded` or `rolled back`). `DraftRejectedError` when the draft does not
    check out, `UpgradeError` when the upgrade refuses it (the running version untouched)."""
    # Imported here: recovery loads boto3 and pyarrow, which neither the board nor a DAG parse needs.
    from ops.recovery.upgrade import upgrade

    platform = supervisor.platform
    checked = check_draft(platform, text, job)
    candidate = JobPaths.of(platform, find_job(job, platform.conf_dir)).upgrade / (
        f"form-{checked.spec.config_version}.yaml"
    )
    write_atomically(candidate, text)
    try:
        result = upgrade(supervisor, job, candidate, reason=reason, progress=progress)
    finally:
        # The ledger holds the candidate's text from the moment the upgrade is recorded.
        candidate.unlink(missing_ok=True)
    if result.outcome == "upgraded":
        write_atomically(verdict_path(platform, job), checked.verdict.model_dump_json(indent=2))
    return result
