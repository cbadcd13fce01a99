"""The job catalog: each pipeline kind's transform, shared by the streaming and the batch runner.

A job kind is a pure transform from its parsed sources to the rows of its sink:

    transform(inputs, pipeline) -> DataFrame

`inputs` maps each name of `pipeline.inputs` to that source parsed by `jobs.runtime.parse_events`
(typed fields, `dead_letter_reason`, `raw`). The same function runs over a stream in
`jobs.runner` and over files in `jobs.batch`; watermarks and state only matter in the stream,
which is why both give the same rows when no event is later than the allowed lateness.

A kind may also read side inputs (`JobKind.side_inputs`): DataFrames that are not landing
streams, such as the enricher's lookup table and mapping. They are added to `inputs` under their
own names before the transform runs.

Every job writes one query with one Parquet file sink (`pipeline.sink`), partitioned by its
pipeline's `partition_columns` (`ops.spec.pipelines`). A job with several outputs (sessions and
late events, say) tells them apart by a partition column, as the router does with `route`. One
checkpoint and one sink log per job is what savepoints and rewinds anchor on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.attack_chains.transform import (
    RULE_EXPRESSION_FIELDS,
    attack_chains,
    invalid_rule_expressions,
    rule_expressions,
)
from jobs.campaign_uniques.transform import campaign_uniques
from jobs.device_health.transform import device_health, invalid_rules
from jobs.enricher.side_inputs import mapping_frame, read_mapping, reference_frame
from jobs.enricher.transform import enrich
from jobs.impressions_plays.transform import impressions_plays
from jobs.parsing import invalid_time_formats, parse_events, with_event_partitions
from jobs.router.transform import invalid_route_filters, route_events
from jobs.script_udfs import register_script_udfs
from jobs.sessionizer.transform import sessionize
from jobs.user_code import UserCodeError, store_models, user_rows
from ops.driver.listener import parse_observation
from ops.exceptions import ConfigError
from ops.spec.job import JobSpec, job_file
from ops.spec.paths import JobPaths
from ops.spec.pipelines import (
    AttackChainsPipeline,
    CampaignUniquesPipeline,
    DeviceHealthPipeline,
    EnricherPipeline,
    FileSource,
    ImpressionsPlaysPipeline,
    RouterPipeline,
    ScriptUdfs,
    TeamPipeline,
)
from ops.spec.platform import PlatformConfig

Transform = Callable[[Mapping[str, DataFrame], Any], DataFrame]
# Problems the analyzer finds in a pipeline's expressions, by dotted field of the job file.
Check = Callable[[Mapping[str, DataFrame], Any], dict[str, str]]
# (session, platform, spec) -> side inputs by name; raises `ConfigError` when one cannot be read.
SideInputs = Callable[[SparkSession, PlatformConfig, JobSpec], dict[str, DataFrame]]


@dataclass(frozen=True)
class JobKind:
    """What one pipeline kind contributes to the runners."""

    transform: Transform
    check: Check | None = None
    side_inputs: SideInputs | None = None


def _route(inputs: Mapping[str, DataFrame], pipeline: RouterPipeline) -> DataFrame:
    events = with_event_partitions(inputs["events"], pipeline.source)
    return route_events(events, pipeline.routes)


def _expression_problems(
    problems: Mapping[str, str], expressions: Sequence[tuple[str, str]], field: str, what: str
) -> dict[str, str]:
    """Analyzer problems (name -> why) keyed by the job file's dotted field of each expression.

    `expressions` lists (name, expression) in file order; `field` ("pipeline.routes.{}.filter")
    takes the position and `what` ("route {!r} filter") the name.
    """
    index = {name: i for i, (name, _) in enumerate(expressions)}
    return {
        field.format(index[name]): (
            f"{what.format(name)} {expressions[index[name]][1]!r} is not a valid boolean expression: {why}"
        )
        for name, why in problems.items()
    }


def _check_routes(inputs: Mapping[str, DataFrame], pipeline: RouterPipeline) -> dict[str, str]:
    return _expression_problems(
        invalid_route_filters(inputs["events"], pipeline.routes),
        [(route.name, route.filter) for route in pipeline.routes],
        "pipeline.routes.{}.filter",
        "route {!r} filter",
    )


def _join_impressions_plays(inputs: Mapping[str, DataFrame], pipeline: ImpressionsPlaysPipeline) -> DataFrame:
    return impressions_plays(inputs["impressions"], inputs["plays"], pipeline)


def _campaign_uniques(inputs: Mapping[str, DataFrame], pipeline: CampaignUniquesPipeline) -> DataFrame:
    return campaign_uniques(inputs["engagements"], pipeline)


def _attack_chains(inputs: Mapping[str, DataFrame], pipeline: AttackChainsPipeline) -> DataFrame:
    return attack_chains(inputs["events"], pipeline)


def _check_attack_rules(inputs: Mapping[str, DataFrame], pipeline: AttackChainsPipeline) -> dict[str, str]:
    problems: dict[str, str] = {}
    # A rule lacks most of these fields; it has no problem in them, so its "" is never quoted.
    for field in RULE_EXPRESSION_FIELDS:
        problems |= _expression_problems(
            invalid_rule_expressions(inputs["events"], pipeline, field),
            [(rule.name, rule_expressions(rule).get(field, "")) for rule in pipeline.rules],
            f"pipeline.rules.{{}}.{field}",
            f"rule {{!r}} {field}",
        )
    return problems


def _device_health(inputs: Mapping[str, DataFrame], pipeline: DeviceHealthPipeline) -> DataFrame:
    return device_health(inputs["telemetry"], pipeline)


def _check_device_rules(inputs: Mapping[str, DataFrame], pipeline: DeviceHealthPipeline) -> dict[str, str]:
    return _expression_problems(
        invalid_rules(inputs["telemetry"], pipeline.data_points),
        [(rule.name, rule.red_when or "") for rule in pipeline.data_points],
        "pipeline.data_points.{}.red_when",
        "data point {!r} red_when",
    )


def _enrich(inputs: Mapping[str, DataFrame], pipeline: EnricherPipeline) -> DataFrame:
    events = with_event_partitions(inputs["events"], pipeline.source)
    return enrich(events, inputs["reference"], inputs["mapping"], pipeline)


def _enricher_side_inputs(
    spark: SparkSession, platform: PlatformConfig, spec: JobSpec
) -> dict[str, DataFrame]:
    pipeline = spec.pipeline
    assert isinstance(pipeline, EnricherPipeline)
    mapping_path = platform.conf_dir / pipeline.mapping
    state_dir = JobPaths.of(platform, spec).runtime
    # Checked once when the query is planned: with no valid mapping, now or before, nothing starts.
    _, canonical, problem = read_mapping(mapping_path, state_dir)
    if canonical is None:
        raise ConfigError(mapping_path, problem or "no mapping")
    return {
        "reference": reference_frame(spark, platform.lake_root / pipeline.reference.path, pipeline.reference),
        "mapping": mapping_frame(spark, mapping_path, state_dir),
    }


KINDS: dict[str, JobKind] = {
    "router": JobKind(transform=_route, check=_check_routes),
    "impressions_plays": JobKind(transform=_join_impressions_plays),
    "sessionizer": JobKind(transform=sessionize),
    "enricher": JobKind(transform=_enrich, side_inputs=_enricher_side_inputs),
    "campaign_uniques": JobKind(transform=_campaign_uniques),
    "attack_chains": JobKind(transform=_attack_chains, check=_check_attack_rules),
    "device_health": JobKind(transform=_device_health, check=_check_device_rules),
}


def kind_of(platform: PlatformConfig, spec: JobSpec) -> JobKind:
    """The catalog entry of a job's pipeline kind; for a team's own job, its function or its
    query (`jobs.user_code`), whose errors name the job file's field. The analyzer checks a
    team's logic by running it over empty streams (`jobs.analysis.stream_problems`)."""
    if not isinstance(spec.pipeline, TeamPipeline):
        return KINDS[spec.pipeline.kind]

    def transform(inputs: Mapping[str, DataFrame], pipeline: TeamPipeline) -> DataFrame:
        try:
            return user_rows(inputs, pipeline, spec.name, store_models(platform))
        except UserCodeError as error:
            raise ConfigError(job_file(spec.name), f"field '{error.field}': {error}") from error

    return JobKind(transform=transform)


PARSED_STAGE = "parsed"
OUTPUT_STAGE = "output"


def stage_names(spec: JobSpec) -> list[str]:
    """The stages a preview tap can watch: `parsed` (or `parsed.<input>` for several inputs), `output`."""
    inputs = list(spec.pipeline.inputs)
    parsed = [PARSED_STAGE] if len(inputs) == 1 else [f"{PARSED_STAGE}.{name}" for name in inputs]
    return [*parsed, OUTPUT_STAGE]


def parsed_inputs(spec: JobSpec, raw: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """Each input's raw lines (one string column `value`) parsed by `jobs.parsing.parse_events`,
    observed under `parse_observation(input)` for the driver's duplicate-key and blank-line metrics."""
    return {
        name: raw[name].transform(parse_events, source, parse_observation(name))
        for name, source in spec.pipeline.inputs.items()
    }


def expression_problems(
    platform: PlatformConfig, spec: JobSpec, inputs: Mapping[str, DataFrame]
) -> dict[str, str]:
    """What Spark rejects in the pipeline's expressions (route filters, rule filters, `red_when`)
    over the parsed `inputs` and in its sources' datetime patterns, by dotted field of the job
    file; only the analyzer runs.

    The one check both a driver (before its query starts) and `jobs.analysis` (for `warden
    validate` and the DAG factory, over empty frames of the declared schema) run.
    """
    kind = kind_of(platform, spec)
    spark = next(iter(inputs.values())).sparkSession
    problems = _time_format_problems(spark, spec)
    return problems | (kind.check(inputs, spec.pipeline) if kind.check else {})


def pipeline_stages(
    platform: PlatformConfig, spec: JobSpec, raw: Mapping[str, DataFrame]
) -> dict[str, DataFrame]:
    """Every stage of the job's transform by name (see `stage_names`); `output` is the sink's rows.
    The pipeline's script UDFs are registered first (`jobs.script_udfs`).

    Raises `ConfigError` naming the job file's field when a UDF file does not load or the
    analyzer rejects an expression of the pipeline, before anything is read.
    """
    kind = kind_of(platform, spec)
    inputs = parsed_inputs(spec, raw)
    if isinstance(spec.pipeline, ScriptUdfs):
        spark = next(iter(raw.values())).sparkSession
        try:
            register_script_udfs(spark, spec.pipeline, JobPaths.of(platform, spec).udf_versions)
        except UserCodeError as error:
            raise ConfigError(
                job_file(spec.name, platform.conf_dir), f"field '{error.field}': {error}"
            ) from error
    problems = expression_problems(platform, spec, inputs)
    if problems:
        field, why = next(iter(problems.items()))
        raise ConfigError(job_file(spec.name, platform.conf_dir), f"field '{field}': {why}")
    if len(inputs) == 1:
        stages = {PARSED_STAGE: next(iter(inputs.values()))}
    else:
        stages = {f"{PARSED_STAGE}.{name}": parsed for name, parsed in inputs.items()}
    if kind.side_inputs is not None:
        inputs.update(kind.side_inputs(next(iter(raw.values())).sparkSession, platform, spec))
    stages[OUTPUT_STAGE] = kind.transform(inputs, spec.pipeline)
    return stages


def _time_format_problems(spark: SparkSession, spec: JobSpec) -> dict[str, str]:
    """Datetime patterns of the job's sources that Spark refuses, by dotted field of the job file."""
    problems: dict[str, str] = {}
    for location, source in _source_locations(spec.pipeline).items():
        for index, why in invalid_time_formats(spark, source).items():
            pattern = source.fields[index].format
            problems[f"{location}.fields.{index}.format"] = (
                f"datetime pattern {pattern!r} is refused by Spark: {why}"
            )
    return problems


def _source_locations(pipeline: Any) -> dict[str, FileSource]:
    """Each `FileSource` of a pipeline by its dotted field in the job file (`pipeline.sources.web`)."""
    locations: dict[str, FileSource] = {}
    for attribute in type(pipeline).model_fields:
        value = getattr(pipeline, attribute)
        if isinstance(value, FileSource):
            locations[f"pipeline.{attribute}"] = value
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(item, FileSource):
                    locations[f"pipeline.{attribute}.{key}"] = item
    return locations


def sink_rows(platform: PlatformConfig, spec: JobSpec, raw: Mapping[str, DataFrame]) -> DataFrame:
    """The rows the job writes to its sink, from each input's raw lines (stream or batch alike).

    Raises `ConfigError` naming the job file's field when the analyzer rejects an expression of
    the pipeline, before anything is read.
    """
    return pipeline_stages(platform, spec, raw)[OUTPUT_STAGE]
