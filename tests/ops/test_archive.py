"""The archive of landing input on a real S3 server: sealed by arrival hour, checked, expired."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from ops import archive
from ops.archive import Partition
from ops.cli import main
from ops.exceptions import ArchiveError
from ops.s3 import s3_client
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.s3 import S3Server

NOW = datetime(2026, 11, 24, 10, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def platform(platform_with_s3: PlatformConfig) -> PlatformConfig:
    """The throwaway platform with an archive prefix of its own on the shared S3 server."""
    path = platform_with_s3.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["archive"] = {
        "prefix": f"archive-{uuid.uuid4().hex[:8]}",
        "seal_after_minutes": 10,
        "retention_days": 2,
    }
    path.write_text(yaml.safe_dump(settings))
    return load_platform(platform_with_s3.conf_dir)


def land(platform: PlatformConfig, name: str, arrived: datetime, body: str = "") -> Path:
    """A landing file of the `events` source that arrived at `arrived`."""
    path = platform.landing_root / "events" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body or f'{{"event_id": "{name}"}}\n' * 3)
    os.utime(path, (arrived.timestamp(), arrived.timestamp()))
    return path


def objects(s3_server: S3Server, platform: PlatformConfig) -> dict[str, bytes]:
    client, bucket = s3_server.client, platform.s3.bucket
    listing = client.list_objects_v2(Bucket=bucket, Prefix=platform.archive.prefix + "/").get("Contents", [])
    return {
        item["Key"].removeprefix(platform.archive.prefix + "/"): client.get_object(
            Bucket=bucket, Key=item["Key"]
        )["Body"].read()
        for item in listing
    }


def test_closed_hours_are_archived_byte_for_byte_with_a_manifest_and_only_once(
    platform: PlatformConfig, s3_server: S3Server
) -> None:
    three_ago, two_ago = NOW.replace(minute=0) - 3 * HOUR, NOW.replace(minute=0) - 2 * HOUR
    a = land(platform, "a.json", three_ago + timedelta(minutes=59))
    b = land(platform, "b.json", two_ago + timedelta(minutes=1), "x" * 5000)
    land(platform, "c.json", NOW - timedelta(minutes=6))  # the previous hour: still within its 10 min grace
    land(platform, "d.json", NOW)  # the open hour

    report = archive.archive_landing(platform, ["events", "events"], NOW)
    assert [str(partition) for partition in report.sealed] == [
        "events 2026-11-24 07:00",
        "events 2026-11-24 08:00",
    ]
    assert (report.files, report.bytes) == (2, a.stat().st_size + 5000)
    stored = objects(s3_server, platform)
    assert stored["events/arrival_date=2026-11-24/arrival_hour=07/a.json"] == a.read_bytes()
    assert stored["events/arrival_date=2026-11-24/arrival_hour=08/b.json"] == b.read_bytes()
    assert len(stored) == 4  # two files, two manifests
    [entry] = archive.read_manifest(platform, Partition("events", two_ago)) or []
    assert (entry.name, entry.size) == ("b.json", 5000)
    assert archive.partitions(platform, "events") == [
        Partition("events", three_ago),
        Partition("events", two_ago),
    ]

    again = archive.archive_landing(platform, ["events"], NOW)
    assert (again.sealed, again.files) == ((), 0)
    # Ten minutes past the hour, the previous hour is sealed too; the open one still is not.
    later = archive.archive_landing(platform, ["events"], NOW + timedelta(minutes=6))
    assert [str(partition) for partition in later.sealed] == ["events 2026-11-24 09:00"]


def test_a_file_landing_late_in_a_sealed_hour_is_added_to_its_manifest(platform: PlatformConfig) -> None:
    hour = NOW.replace(minute=0) - 2 * HOUR
    land(platform, "a.json", hour)
    archive.archive_landing(platform, ["events"], NOW)
    land(platform, "late.json", hour + timedelta(minutes=30))
    report = archive.archive_landing(platform, ["events"], NOW)
    assert (report.files, [str(p) for p in report.sealed]) == (1, ["events 2026-11-24 08:00"])
    manifest = archive.read_manifest(platform, Partition("events", hour)) or []
    assert [entry.name for entry in manifest] == ["a.json", "late.json"]


def test_verify_finds_an_object_that_no_longer_matches_its_manifest(
    platform: PlatformConfig, s3_server: S3Server, tmp_path: Path
) -> None:
    hour = NOW.replace(minute=0) - 2 * HOUR
    land(platform, "a.json", hour)
    land(platform, "b.json", hour)
    archive.archive_landing(platform, ["events"], NOW)
    partition = Partition("events", hour)
    assert archive.verify(platform, partition, tmp_path / "clean") == []

    key = f"{platform.archive.prefix}/{partition.prefix}/b.json"
    s3_server.client.put_object(Bucket=platform.s3.bucket, Key=key, Body=b"tampered\n")
    [problem] = archive.verify(platform, partition, tmp_path / "tampered")
    assert problem.startswith("b.json: 9 bytes")
    unsealed = Partition("events", hour - 5 * HOUR)
    assert archive.verify(platform, unsealed, tmp_path / "none") == [
        f"{unsealed} is not sealed: no _manifest.json"
    ]
    with pytest.raises(ArchiveError, match="events 2026-11-24 03:00 is not in the archive"):
        archive.fetch(platform, unsealed, tmp_path / "none")


def test_partitions_past_retention_are_expired(platform: PlatformConfig, s3_server: S3Server) -> None:
    old, recent = NOW.replace(minute=0) - timedelta(days=3), NOW.replace(minute=0) - 3 * HOUR
    land(platform, "old.json", old)
    land(platform, "recent.json", recent)
    report = archive.archive_landing(platform, ["events"], NOW)
    assert [str(p) for p in report.expired] == ["events 2026-11-21 10:00"]
    assert archive.partitions(platform, "events") == [Partition("events", recent)]
    assert [key.split("/")[-1] for key in objects(s3_server, platform)] == ["_manifest.json", "recent.json"]


def test_an_s3_outage_seals_nothing_and_the_next_pass_catches_up(
    platform: PlatformConfig, s3_server: S3Server
) -> None:
    hour = NOW.replace(minute=0) - 2 * HOUR
    land(platform, "a.json", hour)
    with s3_server.outage(), pytest.raises(ArchiveError, match=f"S3 at {s3_server.endpoint_url} unreachable"):
        archive.archive_landing(platform, ["events"], NOW, s3_client(platform, timeout=1.0, attempts=1))
    assert archive.read_manifest(platform, Partition("events", hour)) is None
    assert [str(p) for p in archive.archive_landing(platform, ["events"], NOW).sealed] == [
        "events 2026-11-24 08:00"
    ]


def test_warden_archive_seals_lists_and_verifies(
    platform: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    land(platform, "a.json", hour)
    assert main(["archive"]) == 0
    assert capsys.readouterr().out == f"sealed events {hour:%Y-%m-%d %H}:00\n"
    assert main(["archive"]) == 0
    assert capsys.readouterr().out == "nothing to archive: every closed hour is sealed\n"
    assert main(["archive", "--list", "events"]) == 0
    assert capsys.readouterr().out == f"events {hour:%Y-%m-%d %H}:00  1 files  0.0 MB\n"
    assert main(["archive", "--verify", "events", "--hour", f"{hour:%Y-%m-%dT%H:%M}"]) == 0
    assert "every file matches" in capsys.readouterr().out


def test_a_source_the_store_fails_for_is_reported_and_retried(
    platform: PlatformConfig, s3_server: S3Server
) -> None:
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    land(platform, "a.json", hour)
    with s3_server.outage():
        lines = archive.archive_all(platform, datetime.now(UTC))
    # Only the source with a sealed hour needed the store.
    [line] = lines
    assert line.startswith(f"events: not archived: S3 at {s3_server.endpoint_url} unreachable")
    assert archive.archive_all(platform, datetime.now(UTC)) == [f"sealed events {hour:%Y-%m-%d %H}:00"]
