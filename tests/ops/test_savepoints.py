"""Savepoints against a real SeaweedFS and real Spark checkpoints (a running router, a RocksDB query),
taken directly, by the `warden savepoint` command and periodically by the supervisor."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError, EndpointConnectionError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.session import ROCKSDB_PROVIDER
from ops.exceptions import SavepointError
from ops.ledger.records import SavepointRecord
from ops.ledger.store import Ledger
from ops.savepoints.store import apply_retention, read_manifest, take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import REPO_ROOT, Driver, caught_up, edit_job, fast_trigger
from tests.support.s3 import S3Server, SlowLink, point_at_s3
from tests.support.slack import SlackReceiver


@pytest.fixture
def platform(platform_conf: PlatformConfig, s3_server: S3Server) -> PlatformConfig:
    """The throwaway platform pointed at the session's S3 server, under a prefix of its own."""
    s3 = s3_server.platform.s3.model_copy(update={"savepoint_prefix": f"sp-{uuid.uuid4().hex[:8]}"})
    return platform_conf.model_copy(update={"s3": s3})


def local_file(platform: PlatformConfig, job: str, relative: str) -> Path:
    """Where a manifest path lives in the job's checkpoint or sink."""
    area, rest = relative.split("/", 1)
    if area == "checkpoint":
        return platform.checkpoint_root / job / rest
    return platform.lake_root / find_job(job, platform.conf_dir).pipeline.sink.path / rest


def stored_sha256(s3: BaseClient, platform: PlatformConfig, job: str, sha256: str) -> str:
    key = f"{platform.s3.savepoint_prefix}/{job}/objects/{sha256}"
    return hashlib.sha256(s3.get_object(Bucket=platform.s3.bucket, Key=key)["Body"].read()).hexdigest()


def batches_in(manifest: dict[str, Any], log: str) -> list[int]:
    return sorted(
        int(f["path"].rsplit("/", 1)[1])
        for f in manifest["files"]
        if f["path"].startswith(f"checkpoint/{log}/")
    )


def manifest_exists(s3: BaseClient, platform: PlatformConfig, savepoint: SavepointRecord) -> bool:
    try:
        s3.head_object(Bucket=platform.s3.bucket, Key=savepoint.manifest_key)
    except ClientError:
        return False
    return True


def test_online_savepoint_of_the_running_router_is_complete_and_then_incremental(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server, start_driver: Callable[..., Driver]
) -> None:
    edit_job(platform, "router", fast_trigger)
    spec = find_job("router", platform.conf_dir)
    landing = platform.landing_root / spec.pipeline.source.path
    for seed in range(10):
        write_batch(landing, 50, 0.05, seed)
    driver = start_driver("run-sp")
    driver.wait_heartbeat(lambda hb: hb.batch_id is not None and hb.batch_id >= 4)

    first = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    assert driver.process.poll() is None, "taking a savepoint must not stop the job"

    manifest = read_manifest(platform, first)
    n = first.batch_id
    assert manifest["batch_id"] == n >= 4
    assert batches_in(manifest, "offsets") == list(range(n + 1))
    assert batches_in(manifest, "commits") == list(range(n + 1))
    assert manifest["files"][-1]["path"] == "checkpoint/metadata"
    assert any(f["path"].startswith("checkpoint/sources/0/") for f in manifest["files"])
    sink_entries = [f["path"] for f in manifest["files"] if f["path"].startswith("sink/_spark_metadata/")]
    assert sink_entries and all(int(p.rsplit("/", 1)[1].split(".")[0]) <= n for p in sink_entries)
    assert manifest["spark_version"] == "4.3.0" and manifest["config_version"] == spec.config_version
    assert manifest["source_offsets"] and "watermark_ms" in manifest
    for entry in manifest["files"]:
        content = local_file(platform, "router", entry["path"]).read_bytes()
        assert (len(content), hashlib.sha256(content).hexdigest()) == (entry["size"], entry["sha256"])
        assert stored_sha256(s3_server.client, platform, "router", entry["sha256"]) == entry["sha256"]
    assert ledger.savepoints("router") == [first]
    assert first.status == "complete" and first.uploaded_bytes == first.total_bytes > 0

    write_batch(landing, 50, 0.0, 99)
    driver.wait_heartbeat(lambda hb: hb.batch_id is not None and hb.batch_id > n)
    second = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    assert driver.process.poll() is None
    assert second.batch_id > n
    assert 0 < second.uploaded_bytes * 3 < second.total_bytes, second
    assert [sp.id for sp in ledger.savepoints("router")] == [second.id, first.id]


def write_checkpoint_batch(platform: PlatformConfig, job: str, batch_id: int) -> None:
    """A minimal checkpoint entry for one batch, shaped like Spark's (for tests without Spark)."""
    checkpoint = platform.checkpoint_root / job
    for log in ("offsets", "commits"):
        (checkpoint / log).mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text('{"id":"4f0c7bd6-2ad0-4a3d-9f1c-000000000000"}\n')
    offsets = {"batchWatermarkMs": 1000 * batch_id, "batchTimestampMs": 0, "conf": {}}
    (checkpoint / "offsets" / str(batch_id)).write_text(
        f"v1\n{json.dumps(offsets)}\n{json.dumps({'logOffset': batch_id})}"
    )
    (checkpoint / "commits" / str(batch_id)).write_text(f'v1\n{{"nextBatchWatermarkMs":{batch_id}}}')


class FailingS3:
    """The real client, whose `put_object` fails as if the network dropped after `puts_allowed`."""

    def __init__(self, client: BaseClient, puts_allowed: int) -> None:
        self.client = client
        self.puts_allowed = puts_allowed
        self.puts = 0

    def put_object(self, **kwargs: Any) -> Any:
        if self.puts >= self.puts_allowed:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
        self.puts += 1
        return self.client.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_copy_interrupted_midway_catalogues_nothing_and_the_retry_reuses_objects(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    for batch_id in range(6):
        write_checkpoint_batch(platform, "router", batch_id)
    failing = FailingS3(s3_server.client, puts_allowed=4)
    with pytest.raises(SavepointError, match="unreachable"):
        take_savepoint(platform, ledger, find_job("router", platform.conf_dir), s3=failing)  # type: ignore[arg-type]
    keys = s3_server.client.list_objects_v2(Bucket=platform.s3.bucket, Prefix=platform.s3.savepoint_prefix)
    assert failing.puts == 4
    assert not [item["Key"] for item in keys.get("Contents", []) if item["Key"].endswith("manifest.json")]
    assert ledger.savepoints("router") == []

    retried = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    assert retried.batch_id == 5 and 0 < retried.uploaded_bytes < retried.total_bytes
    assert ledger.savepoints("router") == [retried]


def test_s3_outage_raises_savepoint_error_naming_the_endpoint(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    write_checkpoint_batch(platform, "router", 0)
    with s3_server.outage(), pytest.raises(SavepointError) as raised:
        take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    assert f"S3 at {s3_server.endpoint_url} unreachable" in str(raised.value)
    assert ledger.savepoints("router") == []


def stored_keys(s3_server: S3Server, prefix: str) -> list[str]:
    listing = s3_server.client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def test_savepoint_command_killed_mid_copy_lists_nothing_and_the_next_attempt_succeeds(
    platform_with_s3: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    platform = platform_with_s3
    for batch_id in range(40):
        write_checkpoint_batch(platform, "router", batch_id)
    prefix = platform.s3.savepoint_prefix
    link = SlowLink(s3_server.service.ports.s3, delay=0.05)
    try:
        point_at_s3(platform, link.endpoint_url, s3_server.bucket, prefix)
        output = platform.runtime_root / "savepoint-command.log"
        with output.open("wb") as log_file:
            command = subprocess.Popen(
                [sys.executable, "-m", "ops.cli", "savepoint", "router", "--reason", "kill test"],
                cwd=REPO_ROOT,
                env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not any("/objects/" in key for key in stored_keys(s3_server, prefix)):
            assert command.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "the copy never started"
            time.sleep(0.05)
        os.killpg(command.pid, signal.SIGKILL)
        command.wait()
    finally:
        link.close()

    keys = stored_keys(s3_server, prefix)
    assert any("/objects/" in key for key in keys)
    assert not [key for key in keys if key.endswith("/manifest.json")], "a killed copy must list nothing"
    assert ledger.savepoints("router") == []

    point_at_s3(platform, s3_server.endpoint_url, s3_server.bucket, prefix)
    retried = subprocess.run(
        [sys.executable, "-m", "ops.cli", "savepoint", "router", "--reason", "after the kill"],
        cwd=REPO_ROOT,
        env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert retried.returncode == 0, retried.stderr
    (savepoint,) = ledger.savepoints("router")
    assert savepoint.batch_id == 39 and savepoint.uploaded_bytes < savepoint.total_bytes
    assert f"savepoint {savepoint.id} at batch 39" in retried.stdout
    decision = ledger.decisions("router", action="savepoint")[0]
    assert (
        decision.reason == "after the kill" and decision.outcome and decision.outcome.startswith("savepoint ")
    )


def periodic_savepoints(spec: dict[str, Any]) -> None:
    fast_trigger(spec)
    spec["operations"]["savepoints"] = {"interval_minutes": 0.02, "keep_count": 2, "max_age_hours": 1}


@pytest.mark.spark
def test_supervisor_takes_periodic_savepoints_and_an_s3_outage_pages_while_the_job_runs(
    platform_with_s3: PlatformConfig, ledger: Ledger, s3_server: S3Server, slack_webhook: SlackReceiver
) -> None:
    platform = platform_with_s3
    edit_job(platform, "router", periodic_savepoints)
    interval = 0.02 * 60
    for seed in range(4):
        write_batch(platform.landing_root / "events", 40, 0.05, seed)
    supervisor = Supervisor.for_platform(platform)
    try:
        supervisor.reconcile("router")
        deadline = time.monotonic() + 120
        while not caught_up(platform, "router", files=4):
            assert time.monotonic() < deadline, "the router never caught up"
            time.sleep(0.5)
        run = ledger.current_run("router")
        assert run is not None

        time.sleep(interval)
        taken = supervisor.reconcile("router")
        assert [a for a in taken.actions if a.startswith("savepoint: savepoint ")], taken.line()
        assert len(ledger.savepoints("router")) == 1

        with s3_server.outage():
            time.sleep(interval)
            failed = supervisor.reconcile("router")
            assert [a for a in failed.actions if "unreachable" in a], failed.line()
            assert supervisor.backend.is_alive(run), "a failed savepoint must not touch the job"
        pages = [m["text"] for m in slack_webhook.messages if "savepoint failed" in m["text"]]
        assert len(pages) == 1 and "unreachable" in pages[0]
        assert ledger.current_run("router").run_id == run.run_id

        for _ in range(2):
            time.sleep(interval)
            supervisor.reconcile("router")
        resolved = [m["text"] for m in slack_webhook.messages if "resolved" in m["text"].lower()]
        assert len(resolved) == 1 and "savepoint" in resolved[0]
        assert len(ledger.savepoints("router")) == 2, "retention keeps keep_count savepoints"
        assert ledger.current_run("router").run_id == run.run_id
    finally:
        stop_all_jobs(platform)


def test_retention_failing_after_a_good_savepoint_reports_it_taken(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 goes down between the copy and retention: the real `take_savepoint` is wrapped to start a
    real outage as it returns."""
    edit_job(platform, "router", lambda spec: spec["operations"]["savepoints"].update(keep_count=1))
    supervisor = Supervisor.for_platform(platform)
    write_checkpoint_batch(platform, "router", 0)
    first = supervisor.savepoint("router", "first").savepoint
    write_checkpoint_batch(platform, "router", 1)
    outage = ExitStack()

    def copy_then_lose_s3(*args: Any, **kwargs: Any) -> SavepointRecord:
        record = take_savepoint(*args, **kwargs)
        outage.enter_context(s3_server.outage())
        return record

    monkeypatch.setattr("ops.savepoints.store.take_savepoint", copy_then_lose_s3)
    with outage:
        outcome = supervisor.savepoint("router", "second")
    assert outcome.savepoint.batch_id == 1 and outcome.pruned == []
    assert f"retention failed, retried later: S3 at {s3_server.endpoint_url} unreachable" in outcome.line()
    assert ledger.decisions("router", action="savepoint")[0].outcome == outcome.line()
    assert [sp.id for sp in ledger.savepoints("router")] == [outcome.savepoint.id, first.id]

    assert supervisor.prune_all_savepoints() == [f"router: deleted savepoints {first.id}"]
    assert [sp.id for sp in ledger.savepoints("router")] == [outcome.savepoint.id]


def test_retention_keeps_the_newest_and_deletes_older_manifests_and_unreferenced_objects(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    s3 = s3_server.client
    savepoints = []
    for batch_id in range(3):
        write_checkpoint_batch(platform, "router", batch_id)
        savepoints.append(take_savepoint(platform, ledger, find_job("router", platform.conf_dir)))
    # Spark purged batch 0 before the newest savepoint, so only the older ones reference it.
    for log in ("offsets", "commits"):
        (platform.checkpoint_root / "router" / log / "0").unlink()
    write_checkpoint_batch(platform, "router", 3)
    newest = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    assert batches_in(read_manifest(platform, newest), "offsets") == [1, 2, 3]
    purged = {
        f["sha256"] for f in read_manifest(platform, savepoints[0])["files"] if f["path"].endswith("/0")
    }

    deleted = apply_retention(platform, ledger, "router", 2, timedelta(days=1), orphan_grace=timedelta(0))
    assert deleted == [savepoints[1].id, savepoints[0].id]
    assert [sp.id for sp in ledger.savepoints("router")] == [newest.id, savepoints[2].id]
    assert not manifest_exists(s3, platform, savepoints[0]) and not manifest_exists(
        s3, platform, savepoints[1]
    )
    for entry in read_manifest(platform, newest)["files"]:
        assert stored_sha256(s3, platform, "router", entry["sha256"]) == entry["sha256"]
    # savepoints[2] still references batch 0; the age rule removes it, then its objects go too.
    deleted = apply_retention(platform, ledger, "router", 5, timedelta(0), orphan_grace=timedelta(0))
    assert deleted == [savepoints[2].id]
    assert [sp.id for sp in ledger.savepoints("router")] == [newest.id]
    listing = s3.list_objects_v2(
        Bucket=platform.s3.bucket, Prefix=f"{platform.s3.savepoint_prefix}/router/objects/"
    )
    stored = {item["Key"].rsplit("/", 1)[1] for item in listing.get("Contents", [])}
    assert purged and not purged & stored
    # Even at age zero the newest complete savepoint stays.
    assert apply_retention(platform, ledger, "router", 1, timedelta(0)) == []


@pytest.fixture
def rocksdb_v2(spark: SparkSession) -> Iterator[SparkSession]:
    """The session with RocksDB state and checkpoint format v2 (docs/architecture.md §5), reset afterwards."""
    settings = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield spark
    for key in settings:
        spark.conf.unset(key)


def save_a_running_count(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, landing: Path
) -> tuple[SavepointRecord, set[str]]:
    """Run a windowed count over three files and take a savepoint while it runs; (record, paths)."""
    landing.mkdir()
    sink = platform.lake_root / find_job("router", platform.conf_dir).pipeline.sink.path
    counts = (
        spark.readStream.schema("k string, t timestamp")
        .json(str(landing))
        .withWatermark("t", "1 minute")
        .groupBy(F.window("t", "1 minute"), "k")
        .count()
    )
    query = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(sink))
        .option("checkpointLocation", str(platform.checkpoint_root / "router"))
        .start()
    )
    try:
        for minute in range(3):
            lines = [json.dumps({"k": f"key{i % 4}", "t": f"2026-01-01T00:0{minute}:00Z"}) for i in range(20)]
            (landing / f"part-{minute}.json").write_text("\n".join(lines) + "\n")
            query.processAllAvailable()
        savepoint = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    finally:
        query.stop()
    manifest = read_manifest(platform, savepoint)
    for entry in manifest["files"]:
        content = local_file(platform, "router", entry["path"]).read_bytes()
        assert hashlib.sha256(content).hexdigest() == entry["sha256"]
    paths = {f["path"] for f in manifest["files"]}
    assert "checkpoint/state/0/_metadata/metadata" in paths
    return savepoint, paths


def test_savepoint_of_a_rocksdb_aggregation_holds_the_state_of_version_n_plus_one(
    rocksdb_v2: SparkSession, platform: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    savepoint, paths = save_a_running_count(rocksdb_v2, platform, ledger, tmp_path / "counts-in")
    n = savepoint.batch_id
    checkpoint = platform.checkpoint_root / "router"
    commit = json.loads((checkpoint / "commits" / str(n)).read_text().splitlines()[1])
    for partition, ids in enumerate(commit["stateUniqueIds"]["0"]):
        (store_id,) = ids
        zip_path = f"checkpoint/state/0/{partition}/{n + 1}_{store_id}.zip"
        assert zip_path in paths
        with zipfile.ZipFile(checkpoint / zip_path.split("/", 1)[1]) as archive:
            zip_metadata = json.loads(archive.read("metadata").decode().splitlines()[1])
        for sst in zip_metadata["sstFiles"]:
            assert f"checkpoint/state/0/{partition}/SSTs/{sst['dfsSstFileName']}" in paths
    state_versions = [int(m.group(1)) for p in paths if (m := re.search(r"/(\d+)_[0-9a-f-]+\.zip$", p))]
    assert state_versions and set(state_versions) == {n + 1}


def test_savepoint_of_an_hdfs_state_aggregation_holds_every_delta_up_to_n_plus_one(
    spark: SparkSession, platform: PlatformConfig, ledger: Ledger, tmp_path: Path
) -> None:
    savepoint, paths = save_a_running_count(spark, platform, ledger, tmp_path / "counts-in")
    n = savepoint.batch_id
    # The spark fixture runs two shuffle partitions, so the operator has two state stores.
    for partition in range(2):
        versions = sorted(
            int(m.group(1))
            for p in paths
            if (m := re.fullmatch(rf"checkpoint/state/0/{partition}/(\d+)\.delta", p))
        )
        # Fewer than 10 versions: no snapshot yet, so the whole delta chain rebuilds version N+1.
        assert versions == list(range(1, n + 2))
