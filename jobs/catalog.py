"""The job catalog: each pipeline kind's transform, shared by the streaming and the batch runner.

A job kind is a pure transform from its parsed sources to the rows of its sink:

    transform(inputs, pipeline) -> DataFrame

`inputs` maps each name of `pipeline.inputs` to that source parsed by `jobs.runtime.parse_events`
(typed fields, `dead_letter_reason`, `raw`). The same function runs over a stream in
`jobs.runner` and over files in `jobs.batch`; watermarks and state only matter in the stream,
which is why both give the same rows when no event is later than the allowed lateness.

Every job writes one query with one Parquet file sink (`pipeline.sink`), partitioned by the kind's
`partition_columns`. A job with several outputs (sessions and late events, say) tells them apart
by a partition column, as the router does with `route`. One checkpoint and one sink log per job is
what savepoints and rewinds anchor on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from jobs.device_health.transform import PARTITION_COLUMNS as DEVICE_HEALTH_PARTITIONS
from jobs.device_health.transform import device_health, invalid_rules
from jobs.router.transform import PARTITION_COLUMNS as ROUTER_PARTITIONS
from jobs.router.transform import invalid_route_filters, route_events
from jobs.runtime import parse_events, with_event_partitions
from ops.config import JobSpec, PlatformConfig
from ops.exceptions import ConfigError
from ops.pipelines import DeviceHealthPipeline, RouterPipeline

Transform = Callable[[Mapping[str, DataFrame], Any], DataFrame]
# Problems the analyzer finds in a pipeline's expressions, by dotted field of the job file.
Check = Callable[[Mapping[str, DataFrame], Any], dict[str, str]]


@dataclass(frozen=True)
class JobKind:
    """What one pipeline kind contributes to the runners."""

    transform: Transform
    partition_columns: tuple[str, ...]
    check: Check | None = None


def _route(inputs: Mapping[str, DataFrame], pipeline: RouterPipeline) -> DataFrame:
    events = with_event_partitions(inputs["events"], pipeline.source)
    return route_events(events, pipeline.routes)


def _check_routes(inputs: Mapping[str, DataFrame], pipeline: RouterPipeline) -> dict[str, str]:
    problems = invalid_route_filters(inputs["events"], pipeline.routes)
    index = {route.name: i for i, route in enumerate(pipeline.routes)}
    return {
        f"pipeline.routes.{index[name]}.filter": (
            f"route {name!r} filter {pipeline.routes[index[name]].filter!r} is not a valid boolean "
            f"expression: {why}"
        )
        for name, why in problems.items()
    }


def _device_health(inputs: Mapping[str, DataFrame], pipeline: DeviceHealthPipeline) -> DataFrame:
    return device_health(inputs["telemetry"], pipeline)


def _check_device_rules(inputs: Mapping[str, DataFrame], pipeline: DeviceHealthPipeline) -> dict[str, str]:
    problems = invalid_rules(inputs["telemetry"], pipeline.data_points)
    index = {rule.name: i for i, rule in enumerate(pipeline.data_points)}
    return {
        f"pipeline.data_points.{index[name]}.red_when": (
            f"data point {name!r} red_when {pipeline.data_points[index[name]].red_when!r} is not a valid "
            f"boolean expression: {why}"
        )
        for name, why in problems.items()
    }


KINDS: dict[str, JobKind] = {
    "router": JobKind(transform=_route, partition_columns=ROUTER_PARTITIONS, check=_check_routes),
    "device_health": JobKind(
        transform=_device_health, partition_columns=DEVICE_HEALTH_PARTITIONS, check=_check_device_rules
    ),
}


def kind_of(spec: JobSpec) -> JobKind:
    """The catalog entry of a job's pipeline kind."""
    return KINDS[spec.pipeline.kind]


def sink_rows(platform: PlatformConfig, spec: JobSpec, raw: Mapping[str, DataFrame]) -> DataFrame:
    """The rows the job writes to its sink, from each input's raw lines (stream or batch alike).

    Raises `ConfigError` naming the job file's field when the analyzer rejects an expression of
    the pipeline, before anything is read.
    """
    kind = kind_of(spec)
    inputs = {
        name: raw[name].transform(parse_events, source) for name, source in spec.pipeline.inputs.items()
    }
    problems = kind.check(inputs, spec.pipeline) if kind.check else {}
    if problems:
        field, why = next(iter(problems.items()))
        raise ConfigError(platform.conf_dir / "jobs" / f"{spec.name}.yaml", f"field '{field}': {why}")
    return kind.transform(inputs, spec.pipeline)
