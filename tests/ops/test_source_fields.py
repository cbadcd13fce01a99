"""Source fields in job files: nested paths and timestamp formats, validated at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ops.exceptions import ConfigError
from ops.spec.job import load_job
from ops.spec.pipelines import FileSource, ReferenceTable, SourceField
from ops.spec.platform import DEFAULT_CONF_DIR


def source(*fields: dict[str, Any]) -> FileSource:
    event_time = {"name": "event_time", "type": "timestamp", "required": True}
    return FileSource.model_validate({"path": "events", "fields": [event_time, *fields]})


def test_path_and_format_default_to_the_name_and_iso8601() -> None:
    field = SourceField(name="event_id", type="string")
    assert (field.json_path, field.time_format) == (("event_id",), "iso8601")
    nested = SourceField(name="device_id", type="string", path="device.hardware.id")
    assert nested.json_path == ("device", "hardware", "id")


@pytest.mark.parametrize(
    "time_format",
    [
        "iso8601",
        "epoch_seconds",
        "epoch_millis",
        "epoch_micros",
        "yyyy-MM-dd HH:mm:ss",
        "dd/MM/yyyy'T'HH:mm XXX",
    ],
)
def test_timestamp_fields_take_a_format(time_format: str) -> None:
    assert SourceField(name="ts", type="timestamp", format=time_format).time_format == time_format


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        (
            {"name": "amount", "type": "double", "format": "epoch_millis"},
            "field 'amount': format 'epoch_millis' applies to timestamp fields only, not double",
        ),
        (
            {"name": "ts", "type": "timestamp", "format": "epoch_milis"},
            "format 'epoch_milis' is not one of iso8601, epoch_seconds, epoch_millis, epoch_micros nor a "
            "datetime pattern: pattern letters ['c', 'e', 'i', 'l', 'o', 'p'] cannot parse",
        ),
        # Week-based years and day-of-week names only format in Spark 3+; they cannot parse.
        ({"name": "ts", "type": "timestamp", "format": "YYYY-MM-dd"}, "pattern letters ['Y'] cannot parse"),
        (
            {"name": "ts", "type": "timestamp", "format": "EEE, dd MMM yyyy"},
            "pattern letters ['E'] cannot parse",
        ),
        ({"name": "ts", "type": "timestamp", "format": "yyyy-MM-dd'T"}, "a quote (') is not closed"),
        ({"name": "ts", "type": "timestamp", "format": "--"}, "it has no pattern letters"),
        ({"name": "device_id", "type": "string", "path": "device..id"}, "path 'device..id' has an empty key"),
        ({"name": "device_id", "type": "string", "path": ""}, "at least 1 character"),
    ],
)
def test_invalid_path_or_format_is_refused_with_the_field_and_value(
    field: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        source(field)
    assert problem in str(raised.value)


def test_the_event_time_field_may_be_an_epoch_read_from_another_key() -> None:
    events = FileSource.model_validate(
        {
            "path": "events",
            "event_time_field": "event_time",
            "fields": [{"name": "event_time", "type": "timestamp", "path": "ts", "format": "epoch_millis"}],
        }
    )
    assert events.fields[0].json_path == ("ts",)


def test_reference_table_columns_take_no_path_or_format() -> None:
    with pytest.raises(ValidationError, match="a reference table's columns take no path or format"):
        ReferenceTable.model_validate(
            {
                "path": "reference/devices",
                "key": "device_id",
                "fields": [
                    {"name": "device_id", "type": "string", "path": "device.id"},
                    {"name": "model", "type": "string"},
                ],
            }
        )


def test_a_job_file_with_a_bad_format_names_the_file_and_field(tmp_path: Path) -> None:
    document = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    document["pipeline"]["source"]["fields"][1]["format"] = "epoch_nanos"
    path = tmp_path / "jobs" / "router.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    with pytest.raises(ConfigError) as raised:
        load_job(path)
    message = str(raised.value)
    assert str(path) in message
    assert "pipeline.router.source.fields.1" in message and "'epoch_nanos'" in message
