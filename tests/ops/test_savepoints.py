"""Savepoints against a real SeaweedFS and real Spark checkpoints (a running router, a RocksDB query)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
import zipfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError, EndpointConnectionError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.runtime import ROCKSDB_PROVIDER
from ops.config import PlatformConfig, find_job
from ops.exceptions import SavepointError
from ops.generator import write_batch
from ops.ledger import Ledger, SavepointRecord
from ops.savepoints import apply_retention, read_manifest, take_savepoint
from tests.support.drivers import Driver, edit_job, fast_trigger
from tests.support.s3 import S3Server


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

    first = take_savepoint(platform, ledger, "router")
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
    second = take_savepoint(platform, ledger, "router")
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
        take_savepoint(platform, ledger, "router", s3=failing)  # type: ignore[arg-type]
    keys = s3_server.client.list_objects_v2(Bucket=platform.s3.bucket, Prefix=platform.s3.savepoint_prefix)
    assert failing.puts == 4
    assert not [item["Key"] for item in keys.get("Contents", []) if item["Key"].endswith("manifest.json")]
    assert ledger.savepoints("router") == []

    retried = take_savepoint(platform, ledger, "router")
    assert retried.batch_id == 5 and 0 < retried.uploaded_bytes < retried.total_bytes
    assert ledger.savepoints("router") == [retried]


def test_s3_outage_raises_savepoint_error_naming_the_endpoint(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    write_checkpoint_batch(platform, "router", 0)
    with s3_server.outage(), pytest.raises(SavepointError) as raised:
        take_savepoint(platform, ledger, "router")
    assert f"S3 at {s3_server.endpoint_url} unreachable" in str(raised.value)
    assert ledger.savepoints("router") == []


def test_retention_keeps_the_newest_and_deletes_older_manifests_and_unreferenced_objects(
    platform: PlatformConfig, ledger: Ledger, s3_server: S3Server
) -> None:
    s3 = s3_server.client
    savepoints = []
    for batch_id in range(3):
        write_checkpoint_batch(platform, "router", batch_id)
        savepoints.append(take_savepoint(platform, ledger, "router"))
    # Spark purged batch 0 before the newest savepoint, so only the older ones reference it.
    for log in ("offsets", "commits"):
        (platform.checkpoint_root / "router" / log / "0").unlink()
    write_checkpoint_batch(platform, "router", 3)
    newest = take_savepoint(platform, ledger, "router")
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
    """The session with RocksDB state and checkpoint format v2 (DESIGN.md §5), reset afterwards."""
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
        savepoint = take_savepoint(platform, ledger, "router")
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
