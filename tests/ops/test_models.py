"""The model store against a real S3 server (SeaweedFS on loopback): versions added, never
replaced, read back checked, and the errors a user meets named plainly."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.cli import main as warden
from ops.exceptions import ModelStoreError
from ops.models import fetch_model, model_versions, push_model
from ops.s3 import s3_client
from ops.spec.platform import PlatformConfig
from tests.support.s3 import S3Server


def test_each_push_is_the_next_version_and_every_version_reads_back(
    platform_with_s3: PlatformConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    first.write_bytes(b"model one")
    second.write_bytes(b"model two, longer")

    assert model_versions(platform_with_s3, "risk") == []
    assert warden(["model", "push", "risk", str(first)]) == 0
    assert warden(["model", "push", "risk", str(second)]) == 0
    assert warden(["model", "list", "risk"]) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"risk version 1: 9 bytes at {platform_with_s3.models.prefix}/risk/1.onnx",
        f"risk version 2: 17 bytes at {platform_with_s3.models.prefix}/risk/2.onnx",
    ]
    assert out[2:] == out[:2]
    assert fetch_model(platform_with_s3, "risk", 1) == b"model one"
    assert fetch_model(platform_with_s3, "risk", 2) == b"model two, longer"


def test_a_missing_version_a_bad_name_an_empty_file_and_a_lost_race_are_refused(
    platform_with_s3: PlatformConfig, tmp_path: Path
) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"weights")
    push_model(platform_with_s3, "risk", model)

    with pytest.raises(ModelStoreError, match=r"has no version 3 .*\(stored versions: 1\)"):
        fetch_model(platform_with_s3, "risk", 3)
    with pytest.raises(ModelStoreError, match="'Risk-Model' is not a lower-case identifier"):
        push_model(platform_with_s3, "Risk-Model", model)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelStoreError, match="is empty"):
        push_model(platform_with_s3, "risk", empty)

    # Another push takes version 2 between this one's listing and its upload (injected just
    # before the upload goes out): S3's conditional write refuses this upload, and version 2
    # keeps the other push's bytes.
    client, other = s3_client(platform_with_s3), s3_client(platform_with_s3)
    racing_key = f"{platform_with_s3.models.prefix}/risk/2.onnx"

    def the_other_push_first(**_: object) -> None:
        other.put_object(Bucket=platform_with_s3.s3.bucket, Key=racing_key, Body=b"the other push")

    client.meta.events.register("before-call.s3.PutObject", the_other_push_first)
    with pytest.raises(ModelStoreError, match="version 2 of model 'risk' was pushed by someone else"):
        push_model(platform_with_s3, "risk", model, s3=client)
    assert fetch_model(platform_with_s3, "risk", 2) == b"the other push"


def test_an_s3_outage_is_an_error_naming_the_endpoint(
    platform_with_s3: PlatformConfig, s3_server: S3Server
) -> None:
    with s3_server.outage(), pytest.raises(ModelStoreError, match="unreachable while listing the versions"):
        fetch_model(platform_with_s3, "risk", 1, s3=s3_client(platform_with_s3, timeout=1, attempts=1))
