"""The base of every config model, and the YAML reading and error wording every loader shares."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ops.exceptions import ConfigError

# The error type of a field that takes a secret reference (ops.spec.platform.SecretRef).
SECRET_REFERENCE_ERROR = "secret_reference"


class Model(BaseModel):
    """Base for every config model: immutable, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# libyaml's parser, which PyYAML's wheels ship: the pure-Python one took 9 s of the 10 s a DAG file
# of 500 jobs took to parse, all of it in this function.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> tuple[dict[str, object], bytes]:
    """The YAML mapping in `path` and its raw bytes; ConfigError naming the file otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(path, f"cannot read file: {exc.strerror}") from exc
    try:
        document = yaml.load(raw, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(path, f"not valid YAML: {exc}") from exc
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(path, f"top level must be a mapping, got {type(document).__name__}")
    return document, raw


def describe_error(error: ValidationError) -> str:
    """The first problem of a validation error as "field 'a.b': problem", with a count of the rest."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top level)"
    problem = first["msg"]
    if first["type"] == "extra_forbidden":
        problem = "unknown key"
    elif "input" in first and first["type"] not in ("missing", SECRET_REFERENCE_ERROR):
        # A bad secret reference is not quoted: it may be the secret, pasted in by mistake.
        problem = f"{problem} (got {first['input']!r})"
    more = len(error.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"field '{location}': {problem}{suffix}"
