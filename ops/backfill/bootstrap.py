"""A live job's state from history: the savepoint a finished bootstrap backfill ends with.

`warden backfill JOB --bootstrap --to T` runs the installed job over the archive up to T; its
checkpoint then holds the state the job would have after reading that input live, the watermark
in its commit log. Three things make it a checkpoint the live job can continue from:

- the file-source logs name the backfill's copies of the landing files: they are rewritten to the
  same names in the live landing directories, so the live job counts every file up to T as read
  and reads only what arrived after it (the archive is the landing input, byte for byte);
- the live sink has no log of the backfill's batches: a sink log of empty entries up to the last
  batch is written, so the live sink continues at the next batch (its log compacts every tenth
  entry and needs the earlier ones); the backfill's rows are published from staging, not here;
- the result is taken as an ordinary savepoint of the job (`ops.savepoints`), so the job starts
  from it as from any other: `warden rewind JOB --savepoint ID` (the job stopped), then `warden
  start JOB`. Its manifest names the backfill (`bootstrap_of`): its sink log lists none of the
  live sink's files, so the rewind refuses it over a sink that has output
  (`ops.recovery.refusals`, `sink_has_output`), which restoring it would orphan.
"""

from __future__ import annotations

import json
import shutil

from botocore.client import BaseClient

from ops.driver.backfill import BackfillRun
from ops.driver.checkpoint import local_path, log_entries, write_log_entry
from ops.exceptions import BackfillError
from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig, StorageConfig

# Spark's default `spark.sql.streaming.fileSink.log.compactInterval`.
SINK_LOG_COMPACT_INTERVAL = 10


def bootstrap_savepoint(
    platform: PlatformConfig, ledger: Ledger, run: BackfillRun, *, s3: BaseClient | None = None
) -> SavepointRecord:
    """Turn a finished bootstrap backfill into a savepoint of the live job, catalogued in the ledger."""
    plan = run.read_plan()
    spec = find_job(plan.job, platform.conf_dir)
    if plan.candidate or spec.config_version != plan.config_version:
        raise BackfillError(
            f"backfill {plan.run_id} ran config {plan.config_version}"
            f"{' (a candidate)' if plan.candidate else ''}; the installed job is config "
            f"{spec.config_version}: a bootstrap savepoint is of the installed job only"
        )
    if not run.is_complete():
        raise BackfillError(f"backfill {plan.run_id} has not finished; run it again to resume it")
    backfill = JobPaths.of(run.platform(platform), spec)
    root = run.root / "bootstrap"
    shutil.rmtree(root, ignore_errors=True)
    staged = platform.model_copy(
        update={
            "storage": StorageConfig(
                runtime_root=root / "runtime",
                landing_root=platform.landing_root,
                lake_root=root / "lake",
                checkpoint_root=root / "checkpoints",
            )
        }
    )
    target = JobPaths.of(staged, spec)
    shutil.copytree(backfill.checkpoint, target.checkpoint, ignore=shutil.ignore_patterns(".*.crc"))
    backfill_landing = run.storage().landing_root
    for source_log in sorted(p for p in target.sources.iterdir() if p.is_dir()):
        for paths in log_entries(source_log).values():
            for entry in paths:
                lines = entry.read_text().splitlines()
                records = [json.loads(line) for line in lines[1:] if line.strip()]
                for record in records:
                    read = local_path(record["path"])
                    record["path"] = (platform.landing_root / read.relative_to(backfill_landing)).as_uri()
                text = "\n".join([lines[0], *(json.dumps(record) for record in records)])
                write_log_entry(entry, text.encode())
    last_batch = max(log_entries(target.commits), default=-1)
    if last_batch < 0:
        raise BackfillError(f"backfill {plan.run_id} committed no batch: nothing to bootstrap from")
    for batch in range(last_batch + 1):
        name = f"{batch}.compact" if (batch + 1) % SINK_LOG_COMPACT_INTERVAL == 0 else str(batch)
        write_log_entry(target.sink_log / name, b"v1")
    return take_savepoint(staged, ledger, spec, s3=s3, bootstrap_of=plan.run_id)
