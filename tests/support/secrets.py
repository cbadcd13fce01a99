"""Secrets for tests: random values, secret files mounted like Docker's, a SeaweedFS server that
knows only a pair of random keys (`keyed_s3`), and a scan for where values turn up: databases
(every table, every column), files (logs, the SQLite files themselves, byte for byte) and texts
(captured output, Slack message bodies)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
import yaml

from ops.embedded.services import SeaweedS3, free_seaweed_ports
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.slack import SlackReceiver

BUCKET = "warden-secrets"


def secret_value(kind: str) -> str:
    """A value no run could produce by chance, so finding it anywhere means it leaked."""
    return f"{kind}-{uuid.uuid4().hex}"


def secret_file(directory: Path, name: str, value: str) -> str:
    """A secret mounted the way Docker and Kubernetes do (a trailing newline); its reference."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(value + "\n")
    return f"file:{path}"


@dataclass
class KeyedS3:
    """A SeaweedFS server whose only identity is a pair of random keys, held in files."""

    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    references: dict[str, str]
    runtime_root: Path
    service: SeaweedS3 = field(repr=False)

    def client(self, access_key_id: str, secret_access_key: str) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name="us-east-1",
        )


@pytest.fixture(scope="session")
def keyed_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedS3]:
    root = tmp_path_factory.mktemp("keyed-s3")
    access_key_id, secret_access_key = secret_value("AKID"), secret_value("s3secret")
    references = {
        "access_key_id": secret_file(root / "mounted", "access_key_id", access_key_id),
        "secret_access_key": secret_file(root / "mounted", "secret_access_key", secret_access_key),
    }
    ports = free_seaweed_ports()
    s3 = {"endpoint_url": f"http://127.0.0.1:{ports.s3}", "bucket": BUCKET, **references}
    platform = PlatformConfig.model_validate({"storage": {"runtime_root": str(root / "server")}, "s3": s3})
    service = SeaweedS3.for_platform(platform)
    assert service is not None
    service.start()
    try:
        yield KeyedS3(
            s3["endpoint_url"], access_key_id, secret_access_key, references, root / "server", service
        )
    finally:
        service.stop()


def configure_platform(platform: PlatformConfig, section: str, **settings: Any) -> PlatformConfig:
    """Merge `settings` into one section of the platform's platform.yaml and load it again."""
    path = platform.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document[section] = {**document.get(section, {}), **settings}
    path.write_text(yaml.safe_dump(document))
    return load_platform(platform.conf_dir)


def platform_leaks(
    values: list[str],
    platform: PlatformConfig,
    output: str,
    receiver: SlackReceiver | None = None,
    extra_roots: tuple[Path, ...] = (),
) -> list[str]:
    """Every place a value turned up: the ledger (every table and column), every file of the
    platform's runtime (logs, the SQLite files byte for byte), the output, the Slack bodies."""
    texts: dict[str, str | bytes] = {"output": output}
    for number, request in enumerate(receiver.requests if receiver else []):
        texts[f"slack request {number}"] = request.body
    return [
        *database_leaks(platform.resolved_ledger_url, values),
        *file_leaks([platform.runtime_root, *extra_roots], values),
        *text_leaks(texts, values),
    ]


def captured(output: pytest.CaptureFixture[str]) -> str:
    """Everything the test process wrote to stdout and stderr so far (logs included)."""
    streams = output.readouterr()
    return streams.out + streams.err


def database_leaks(url: str, values: Iterable[str], *, skip_tables: Iterable[str] = ()) -> list[str]:
    """`table.column` for every cell of the database at `url` that holds one of `values`."""
    wanted = list(values)
    skipped = set(skip_tables)
    engine = sa.create_engine(url)
    try:
        tables = sa.MetaData()
        tables.reflect(engine)
        found = []
        with engine.connect() as connection:
            for table in tables.sorted_tables:
                if table.name in skipped:
                    continue
                for row in connection.execute(sa.select(table)):
                    for column, cell in row._mapping.items():
                        text = cell.decode(errors="replace") if isinstance(cell, bytes) else str(cell)
                        if any(value in text for value in wanted):
                            found.append(f"{table.name}.{column}")
        return found
    finally:
        engine.dispose()


def file_leaks(roots: Iterable[Path], values: Iterable[str]) -> list[str]:
    """Every file under `roots` whose bytes hold one of `values`."""
    wanted = [value.encode() for value in values]
    return [
        str(path)
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file() and any(value in path.read_bytes() for value in wanted)
    ]


def text_leaks(texts: Mapping[str, str | bytes], values: Iterable[str]) -> list[str]:
    """The names of the `texts` that hold one of `values`."""
    wanted = list(values)
    return [
        name
        for name, text in texts.items()
        if any(
            value in (text.decode(errors="replace") if isinstance(text, bytes) else text) for value in wanted
        )
    ]
