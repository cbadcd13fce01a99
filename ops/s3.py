"""The boto3 S3 client every part of the platform uses, for the embedded SeaweedFS or Amazon S3 alike."""

from __future__ import annotations

from typing import NamedTuple

import boto3
from botocore.client import BaseClient
from botocore.config import Config as BotoConfig

from ops.secrets import Secret, lookup_secret
from ops.spec.platform import PlatformConfig, S3Config

# Credentials of the embedded SeaweedFS when the keys named in `s3` are not configured. They guard
# nothing (the server only listens on loopback); real credentials come from `s3.access_key_id`
# and `s3.secret_access_key` (the environment, a file or an Airflow connection).
EMBEDDED_ACCESS_KEY_ID = "streamwarden"
EMBEDDED_SECRET_ACCESS_KEY = "streamwarden-embedded-secret"


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
