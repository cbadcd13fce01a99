"""A real S3 server for tests: SeaweedFS on free loopback ports, started once per session.

`s3_server` yields an `S3Server` handle with the endpoint, the bucket and a boto3 client. Tests of
S3 outages use `with s3_server.outage(): ...`, which stops the server and always starts it again;
a test that stops the server by hand must start it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest
import yaml
from botocore.client import BaseClient

from ops.config import PlatformConfig, load_platform
from ops.services import SeaweedPorts, SeaweedS3, free_seaweed_ports, s3_client

TEST_BUCKET = "warden-test"


def s3_platform(runtime_root: Path, ports: SeaweedPorts, bucket: str = TEST_BUCKET) -> PlatformConfig:
    """A platform config whose only purpose is an embedded S3 server rooted at `runtime_root`."""
    return PlatformConfig.model_validate(
        {
            "storage": {"runtime_root": str(runtime_root)},
            "s3": {"endpoint_url": f"http://127.0.0.1:{ports.s3}", "bucket": bucket},
        }
    )


@dataclass
class S3Server:
    """A running SeaweedFS S3 server for tests."""

    platform: PlatformConfig
    service: SeaweedS3 = field(init=False)

    def __post_init__(self) -> None:
        service = SeaweedS3.for_platform(self.platform)
        assert service is not None, "the test S3 endpoint is on loopback"
        self.service = service

    @property
    def endpoint_url(self) -> str:
        return self.service.endpoint_url

    @property
    def bucket(self) -> str:
        return self.platform.s3.bucket

    @cached_property
    def client(self) -> BaseClient:
        return s3_client(self.platform)

    def start(self) -> None:
        """Start the server unless it runs and wait until it answers (data survives a restart)."""
        self.service.start()

    def stop(self) -> None:
        self.service.stop()

    @contextmanager
    def outage(self) -> Iterator[S3Server]:
        """S3 is down inside the block and back up after it, whatever the block raises."""
        self.stop()
        try:
            yield self
        finally:
            self.start()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server on free loopback ports for the whole session, stopped at its end."""
    server = S3Server(s3_platform(tmp_path_factory.mktemp("s3"), free_seaweed_ports()))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def platform_with_s3(platform_conf: PlatformConfig, s3_server: S3Server) -> PlatformConfig:
    """The throwaway platform pointed at the session's S3 server, under a savepoint prefix of its own.

    Written into its platform.yaml, so drivers, the CLI and DAGs started from it use the same S3.
    """
    settings = yaml.safe_load((platform_conf.conf_dir / "platform.yaml").read_text())
    settings["s3"] = {
        "endpoint_url": s3_server.endpoint_url,
        "bucket": s3_server.bucket,
        "savepoint_prefix": f"sp-{uuid.uuid4().hex[:8]}",
    }
    (platform_conf.conf_dir / "platform.yaml").write_text(yaml.safe_dump(settings))
    return load_platform(platform_conf.conf_dir)
