"""Declarative field mappings: the enricher's reshaping of each event document (Jolt-like).

A mapping file (YAML, referenced by the job's `pipeline.mapping`) is a list of operations applied
in order to one JSON object, the event document:

    operations:
      - default: {field: device.os, value: unknown}
      - rename: {from: device.os, to: platform}
      - shift: {event_id: id, profile.country: country, reference.genre: title.genre}

Paths are dot-separated object keys (`a.b.c`, each key `[A-Za-z0-9_-]+`); there are no array
indexes or wildcards. A path is *present* when every key along it exists in an object; a value of
`null` counts as present.

* `rename {from, to}`: move the value at `from` to `to` (replacing what `to` held) and remove it
  from `from`; objects emptied by the move stay as `{}`. Absent `from`: nothing happens.
* `default {field, value}`: set `field` to `value` (any YAML/JSON value) when it is absent or
  `null`; otherwise nothing happens.
* `shift {source: target, ...}`: build a NEW document holding only the listed paths: each present
  source's value is put at its target, in the order listed; absent sources are skipped and every
  path not listed is dropped. This is Jolt's `shift`: the projection step of a chain.

Writing a value (`rename.to`, `default.field`, `shift` targets) creates the missing objects along
the path. When a key along it holds something other than an object (`a.b` with `"a": 1`), the
event cannot be mapped: `apply_mapping` raises `MappingConflict` and the enricher sends the event to
the dead letters with the reason. Keys keep their insertion order; a new key goes last.

`parse_mapping` validates a file's text (unknown keys, bad paths, a rename into its own subtree,
two shift sources with one target or targets nested in each other are errors), so a broken file is
refused as a whole and the job keeps its last valid mapping (see `jobs/enricher/side_inputs.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import Field, RootModel, ValidationError, model_validator

from ops.spec.model import Model

PATH_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
DottedPath = str


class MappingConflict(ValueError):
    """An event the mapping cannot be applied to (a key along a written path is not an object)."""


def _nested(path: DottedPath, other: DottedPath) -> bool:
    return path == other or path.startswith(other + ".") or other.startswith(path + ".")


class RenameArgs(Model):
    from_: DottedPath = Field(alias="from", pattern=PATH_PATTERN)
    to: DottedPath = Field(pattern=PATH_PATTERN)

    @model_validator(mode="after")
    def _not_into_itself(self) -> RenameArgs:
        if _nested(self.from_, self.to):
            raise ValueError(f"cannot rename {self.from_!r} to {self.to!r}: one is inside the other")
        return self


class DefaultArgs(Model):
    field: DottedPath = Field(pattern=PATH_PATTERN)
    value: Any


class ShiftArgs(RootModel[dict[str, str]]):
    @model_validator(mode="after")
    def _targets_are_distinct(self) -> ShiftArgs:
        if not self.root:
            raise ValueError("shift needs at least one 'source: target' pair")
        for path in (*self.root, *self.root.values()):
            if not re.match(PATH_PATTERN, path):
                raise ValueError(f"{path!r} is not a dotted path")
        targets = list(self.root.values())
        for i, target in enumerate(targets):
            for other in targets[i + 1 :]:
                if _nested(target, other):
                    raise ValueError(f"shift targets {target!r} and {other!r} overlap")
        return self


class Operation(Model):
    """One step of a mapping: exactly one of `rename`, `default`, `shift`."""

    rename: RenameArgs | None = None
    default: DefaultArgs | None = None
    shift: ShiftArgs | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Operation:
        given = [name for name in ("rename", "default", "shift") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"an operation has exactly one of rename, default, shift; got {given}")
        return self


class MappingSpec(Model):
    """A mapping file: its operations, applied in order."""

    operations: tuple[Operation, ...] = Field(min_length=1)

    def canonical_json(self) -> str:
        """The mapping as compact JSON, the form the stream carries and `apply_mapping` takes."""
        operations = self.model_dump(by_alias=True, mode="json", exclude_none=True)["operations"]
        return json.dumps(operations, separators=(",", ":"))


def parse_mapping(text: str) -> MappingSpec:
    """A validated mapping from a file's text; raises `ValueError` saying what is wrong."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError("top level must be a mapping with 'operations'")
    try:
        return MappingSpec.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"field '{location}': {first['msg']}") from exc


def mapping_version(canonical: str) -> str:
    """A short digest naming a mapping's content."""
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


_MISSING = object()


def _get(document: Mapping[str, Any], path: DottedPath) -> Any:
    node: Any = document
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _set(document: dict[str, Any], path: DottedPath, value: Any) -> None:
    *parents, last = path.split(".")
    node = document
    walked: list[str] = []
    for key in parents:
        walked.append(key)
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise MappingConflict(f"cannot set '{path}': '{'.'.join(walked)}' is not an object")
        node = child
    node[last] = value


def _remove(document: dict[str, Any], path: DottedPath) -> None:
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node[key]
    del node[last]


def apply_mapping(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """`document` reshaped by `operations` (the canonical JSON form, parsed); the input is modified.

    Raises `MappingConflict` when a value cannot be written (see the module docstring).
    """
    for operation in operations:
        if "rename" in operation:
            args = operation["rename"]
            value = _get(document, args["from"])
            if value is not _MISSING:
                _remove(document, args["from"])
                _set(document, args["to"], value)
        elif "default" in operation:
            args = operation["default"]
            if _get(document, args["field"]) in (_MISSING, None):
                _set(document, args["field"], json.loads(json.dumps(args["value"])))
        else:
            shifted: dict[str, Any] = {}
            for source, target in operation["shift"].items():
                value = _get(document, source)
                if value is not _MISSING:
                    _set(shifted, target, value)
            document = shifted
    return document
