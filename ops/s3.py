"""The boto3 S3 client every part of the platform uses, for the embedded SeaweedFS or Amazon S3 alike."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import boto3
from boto3.exceptions import RetriesExceededError, S3UploadFailedError
from botocore.client import BaseClient
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from ops.exceptions import SecretNotFoundError
from ops.secrets import Secret, lookup_secret
from ops.spec.platform import PlatformConfig, S3Config

# Credentials of the embedded SeaweedFS when the keys named in `s3` are not configured. They guard
# nothing (the server only listens on loopback); real credentials come from `s3.access_key_id`
# and `s3.secret_access_key` (the environment, a file or an Airflow connection).
EMBEDDED_ACCESS_KEY_ID = "streamwarden"
EMBEDDED_SECRET_ACCESS_KEY = "streamwarden-embedded-secret"
HASH_CHUNK_BYTES = 1024 * 1024


class S3Credentials(NamedTuple):
    access_key_id: Secret
    secret_access_key: Secret


def s3_credentials(s3: S3Config) -> S3Credentials | None:
    """The S3 keys that `s3.access_key_id` and `s3.secret_access_key` refer to (ops.secrets).

    With a custom endpoint (the embedded SeaweedFS) keys not configured (null, or an unset
    variable) fall back to the embedded keys; for Amazon S3 (`endpoint_url: null`) they mean
    boto3's own credential chain (instance profile, `~/.aws`), returned as None. A `file:` or
    `airflow:` reference that gives nothing raises SecretNotFoundError.
    """
    access_key_id = lookup_secret(s3.access_key_id)
    secret_access_key = lookup_secret(s3.secret_access_key)
    if access_key_id and secret_access_key:
        return S3Credentials(access_key_id, secret_access_key)
    if s3.endpoint_url is None:
        return None
    return S3Credentials(
        access_key_id or Secret(EMBEDDED_ACCESS_KEY_ID),
        secret_access_key or Secret(EMBEDDED_SECRET_ACCESS_KEY),
    )


def s3_client(platform: PlatformConfig, *, timeout: float = 10.0, attempts: int = 3) -> BaseClient:
    """A boto3 S3 client for the platform's object store (embedded SeaweedFS or Amazon S3)."""
    s3 = platform.s3
    credentials = s3_credentials(s3)
    config = BotoConfig(
        region_name=s3.region,
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"max_attempts": attempts, "mode": "standard"},
        # A loopback endpoint has no DNS names for virtual-hosted buckets.
        s3={"addressing_style": "path" if s3.endpoint_url else "auto"},
    )
    return boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=credentials.access_key_id.reveal() if credentials else None,
        aws_secret_access_key=credentials.secret_access_key.reveal() if credentials else None,
        config=config,
    )


def platform_client(
    platform: PlatformConfig, client: BaseClient | None, error: type[Exception]
) -> BaseClient:
    """`client` if given, else `s3_client(platform)`; `error` naming the secret reference when the
    S3 keys the platform config refers to cannot be read, so a savepoint fails (and pages) as it
    does when S3 is down."""
    if client is not None:
        return client
    try:
        return s3_client(platform)
    except SecretNotFoundError as missing:
        raise error(f"no S3 credentials for {endpoint_name(platform)}: {missing}") from missing


def endpoint_name(platform: PlatformConfig) -> str:
    """The object store as a message names it: its endpoint URL, or Amazon S3."""
    return platform.s3.endpoint_url or "Amazon S3"


@contextmanager
def s3_errors(platform: PlatformConfig, doing: str, error: type[Exception]) -> Iterator[None]:
    """Turn boto3's errors into `error`, naming the endpoint and what was being done."""
    try:
        yield
    # The transfer manager reports a download that kept losing its connection as
    # RetriesExceededError and an upload S3 answered with an error as S3UploadFailedError.
    except (BotoCoreError, RetriesExceededError) as exc:
        raise error(f"S3 at {endpoint_name(platform)} unreachable while {doing}: {exc}") from exc
    except (ClientError, S3UploadFailedError) as exc:
        raise error(f"S3 at {endpoint_name(platform)} refused {doing}: {exc}") from exc


def list_objects(client: BaseClient, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    """Every object under `prefix`, page by page."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256) of a file, read a chunk at a time so a large file never sits in memory."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
