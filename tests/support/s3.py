"""A real S3 server for tests: SeaweedFS on free loopback ports, started once per session (so once
per xdist worker, each with its own ports and data directory).

`s3_server` yields an `S3Server` handle with the endpoint, the bucket and a boto3 client. Tests of
S3 outages use `with s3_server.outage(): ...`, which stops the server and always starts it again;
a test that stops the server by hand must start it again. `SlowLink` puts a slow loopback TCP hop
in front of it, for tests that must catch an upload halfway.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest
import yaml
from botocore.client import BaseClient

from ops.embedded.services import SeaweedPorts, SeaweedS3, free_seaweed_ports
from ops.s3 import s3_client
from ops.spec.platform import PlatformConfig, load_platform

CHUNK = 4096

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


class SlowLink:
    """A TCP proxy on a free loopback port that forwards to `target_port`, pausing `delay` seconds
    before each chunk it sends upstream (so an upload of many files takes seconds)."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, self.delay), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, 0.0), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, delay: float) -> None:
        try:
            while chunk := source.recv(CHUNK):
                time.sleep(delay)
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            source.close()
            target.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server on free loopback ports for the whole session (worker), stopped at its end."""
    server = S3Server(s3_platform(tmp_path_factory.mktemp("s3"), free_seaweed_ports()))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def point_at_s3(platform: PlatformConfig, endpoint_url: str, bucket: str, prefix: str) -> PlatformConfig:
    """Write the S3 settings into the platform's platform.yaml (drivers, the CLI and DAGs read it),
    its savepoints under `prefix` and its model store under `prefix`-models."""
    path = platform.conf_dir / "platform.yaml"
    settings = yaml.safe_load(path.read_text())
    settings["s3"] = {"endpoint_url": endpoint_url, "bucket": bucket, "savepoint_prefix": prefix}
    settings["models"] = {"prefix": f"{prefix}-models"}
    path.write_text(yaml.safe_dump(settings))
    return load_platform(platform.conf_dir)


@pytest.fixture
def platform_with_s3(platform_conf: PlatformConfig, s3_server: S3Server) -> PlatformConfig:
    """The throwaway platform pointed at the session's S3 server, under prefixes of its own."""
    return point_at_s3(platform_conf, s3_server.endpoint_url, s3_server.bucket, f"sp-{uuid.uuid4().hex[:8]}")
