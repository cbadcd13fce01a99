"""The boto3 S3 client every part of the platform uses, for the embedded SeaweedFS or Amazon S3 alike."""

from __future__ import annotations

import os
from typing import NamedTuple

import boto3
from botocore.client import BaseClient
from botocore.config import Config as BotoConfig

from ops.spec.platform import PlatformConfig, S3Config

# Credentials of the embedded SeaweedFS when the variables named in `s3` are unset. They guard
# nothing (the server only listens on loopback); real credentials come from the environment.
EMBEDDED_ACCESS_KEY_ID = "streamwarden"
EMBEDDED_SECRET_ACCESS_KEY = "streamwarden-embedded-secret"


class S3Credentials(NamedTuple):
    access_key_id: str
    secret_access_key: str


def s3_credentials(s3: S3Config) -> S3Credentials | None:
    """The S3 keys from the variables named in `s3`.

    With a custom endpoint (the embedded SeaweedFS) unset variables fall back to the embedded
    keys; for Amazon S3 (`endpoint_url: null`) unset variables mean boto3's own credential chain
    (instance profile, `~/.aws`), returned as None.
    """
    access_key_id = os.environ.get(s3.access_key_id_env)
    secret_access_key = os.environ.get(s3.secret_access_key_env)
    if access_key_id and secret_access_key:
        return S3Credentials(access_key_id, secret_access_key)
    if s3.endpoint_url is None:
        return None
    return S3Credentials(
        access_key_id or EMBEDDED_ACCESS_KEY_ID, secret_access_key or EMBEDDED_SECRET_ACCESS_KEY
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
        aws_access_key_id=credentials.access_key_id if credentials else None,
        aws_secret_access_key=credentials.secret_access_key if credentials else None,
        config=config,
    )
