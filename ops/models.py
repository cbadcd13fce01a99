"""The model store: a job's models, versioned like its code, in the platform's object store.

A model is a file (an ONNX graph, say) under a name; each `push` of a name adds the next version,
an integer from 1, and never replaces one. A job file pins the version it scores with
(`pipeline.models`, `ops.spec.pipelines.ModelRef`), so deploying a new version is a change of the
job file through `warden upgrade`, with its dry run and its rollback, like any code change.

Layout in the bucket, under `<models.prefix>/<name>/`: `<version>.<suffix>`, the file's bytes as
pushed, with its sha256 in the object's metadata (checked on every fetch).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from ops.exceptions import ModelStoreError
from ops.s3 import list_objects, platform_client, s3_errors
from ops.spec.pipelines import MODEL_NAME_PATTERN
from ops.spec.platform import PlatformConfig

DIGEST_METADATA = "sha256"


@dataclass(frozen=True)
class ModelVersion:
    """One stored version of a model."""

    name: str
    version: int
    key: str
    size: int


def _prefix(platform: PlatformConfig, name: str) -> str:
    if not re.match(MODEL_NAME_PATTERN, name):
        raise ModelStoreError(
            f"model name {name!r} is not a lower-case identifier (letters, digits, underscores)"
        )
    return f"{platform.models.prefix.strip('/')}/{name}/"


def model_versions(
    platform: PlatformConfig, name: str, *, s3: BaseClient | None = None
) -> list[ModelVersion]:
    """The stored versions of `name`, oldest first (none: an empty list)."""
    client = platform_client(platform, s3, ModelStoreError)
    prefix = _prefix(platform, name)
    versions = []
    with s3_errors(platform, f"listing the versions of model {name!r}", ModelStoreError):
        for item in list_objects(client, platform.s3.bucket, prefix):
            stem = item["Key"][len(prefix) :].split(".", 1)[0]
            if stem.isdigit():
                versions.append(ModelVersion(name, int(stem), item["Key"], int(item["Size"])))
    return sorted(versions, key=lambda stored: stored.version)


def push_model(
    platform: PlatformConfig, name: str, file: Path, *, s3: BaseClient | None = None
) -> ModelVersion:
    """Store `file` as the next version of `name` and return it.

    Two pushes racing for the same version cannot both win: the upload is conditional on the key
    not existing (S3's `If-None-Match: *`), and the loser is told to push again.
    """
    client = platform_client(platform, s3, ModelStoreError)
    content = file.read_bytes()
    if not content:
        raise ModelStoreError(f"model file {file} is empty")
    stored = model_versions(platform, name, s3=client)
    version = stored[-1].version + 1 if stored else 1
    key = f"{_prefix(platform, name)}{version}{''.join(file.suffixes) or '.model'}"
    try:
        with s3_errors(platform, f"storing {file} as version {version} of model {name!r}", ModelStoreError):
            client.put_object(
                Bucket=platform.s3.bucket,
                Key=key,
                Body=content,
                IfNoneMatch="*",
                Metadata={DIGEST_METADATA: hashlib.sha256(content).hexdigest()},
            )
    except ModelStoreError as refused:
        cause = refused.__cause__
        if isinstance(cause, ClientError) and cause.response["Error"]["Code"] == "PreconditionFailed":
            raise ModelStoreError(
                f"version {version} of model {name!r} was pushed by someone else meanwhile: push again"
            ) from cause
        raise
    return ModelVersion(name, version, key, len(content))


def fetch_model(platform: PlatformConfig, name: str, version: int, *, s3: BaseClient | None = None) -> bytes:
    """The bytes of version `version` of `name`, checked against the digest stored with them."""
    client = platform_client(platform, s3, ModelStoreError)
    stored = {found.version: found for found in model_versions(platform, name, s3=client)}
    if version not in stored:
        have = ", ".join(str(v) for v in sorted(stored)) or "none"
        raise ModelStoreError(
            f"model {name!r} has no version {version} in s3://{platform.s3.bucket}/"
            f"{_prefix(platform, name)} (stored versions: {have})"
        )
    key = stored[version].key
    with s3_errors(platform, f"reading version {version} of model {name!r}", ModelStoreError):
        answer = client.get_object(Bucket=platform.s3.bucket, Key=key)
        content: bytes = answer["Body"].read()
    expected = answer.get("Metadata", {}).get(DIGEST_METADATA)
    if expected is not None and hashlib.sha256(content).hexdigest() != expected:
        raise ModelStoreError(f"s3://{platform.s3.bucket}/{key} does not match the digest stored with it")
    return content
