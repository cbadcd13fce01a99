"""The board's New job and Edit form, below the page: the job file its values make
(`ops.console.job_form`), what the check refuses and names by field (`ops.console.drafts`), and
what a creation writes (`ops.console.authoring`). The refusals that need no Spark come first;
the analyzer's own run over a draft, its verdict found again by the creation, after them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.console.authoring import create_job
from ops.console.drafts import DRAFTS_DIR, check_draft
from ops.console.job_form import DraftRequest, current_values, draft_text, new_job_values
from ops.exceptions import DraftRejectedError
from ops.scaffold import METRICS_PORTS
from ops.spec.analysis import read_verdict, verdict_path
from ops.spec.job import find_job, job_file, load_jobs
from ops.spec.platform import PlatformConfig
from tests.support.drivers import edit_job

UNRESOLVED = (
    "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `event_typ`"
)


def router_values(name: str, route_filter: str, **route: Any) -> DraftRequest:
    """The New job form's router values with a name, a sink and one route."""
    values = new_job_values("router")
    routes = [{"name": "big", "filter": route_filter, "columns": ["event_id", "amount"], **route}]
    return values.model_copy(
        update={"name": name, "pipeline": {**values.pipeline, "routes": routes, "sink": {"path": name}}}
    )


def rejected(platform: PlatformConfig, text: str, job: str | None = None) -> dict[str, str]:
    with pytest.raises(DraftRejectedError) as refusal:
        check_draft(platform, text, job)
    return refusal.value.problems


def test_a_new_jobs_file_gets_a_free_metrics_port_and_the_new_job_trigger(
    platform_conf: PlatformConfig,
) -> None:
    text = draft_text(platform_conf, router_values("big_purchases", "amount > 3"))

    document = yaml.safe_load(text)
    assert document["name"] == "big_purchases" and document["pipeline"]["kind"] == "router"
    assert document["pipeline"]["routes"] == [
        {"name": "big", "filter": "amount > 3", "columns": ["event_id", "amount"]}
    ]
    taken = {spec.operations.metrics_port for spec in load_jobs(platform_conf.conf_dir).specs.values()}
    operations = document["operations"]
    assert operations["metrics_port"] in METRICS_PORTS and operations["metrics_port"] not in taken
    assert operations["trigger"] == {"interval_seconds": 5, "max_files_per_trigger": 50}
    assert not job_file("big_purchases", platform_conf.conf_dir).exists()


def test_an_edit_keeps_the_files_operations_and_what_the_form_does_not_show(
    platform_conf: PlatformConfig,
) -> None:
    def with_unknown_to_the_form(spec: dict[str, Any]) -> None:
        spec["pipeline"]["extra_for_the_test"] = {"kept": True}

    edit_job(platform_conf, "router", with_unknown_to_the_form)
    before = yaml.safe_load(job_file("router", platform_conf.conf_dir).read_text())
    routes = [{**before["pipeline"]["routes"][0], "filter": "amount > 100"}]
    values = DraftRequest(name="router", pipeline={"kind": "router", "routes": routes})

    after = yaml.safe_load(draft_text(platform_conf, values, "router"))

    assert after["operations"] == before["operations"]
    assert after["pipeline"]["routes"] == routes
    assert after["pipeline"]["source"] == before["pipeline"]["source"]
    assert after["pipeline"]["extra_for_the_test"] == {"kept": True}


def test_the_edit_form_starts_from_the_file_as_written(platform_conf: PlatformConfig) -> None:
    router = find_job("router", platform_conf.conf_dir)
    values = current_values(platform_conf, router)
    written = yaml.safe_load(job_file("router", platform_conf.conf_dir).read_text())
    assert values.pipeline == written["pipeline"]
    assert (values.name, values.stateful) == ("router", False)


def test_problems_are_named_by_the_fields_of_the_file_before_spark_is_asked(
    platform_conf: PlatformConfig,
) -> None:
    values = router_values("Big", "")
    source = values.pipeline["source"]
    assert isinstance(source, dict) and isinstance(source["fields"], list)
    fields = [{**source["fields"][0], "type": "strng"}, *source["fields"][1:]]
    values = values.model_copy(
        update={"pipeline": {**values.pipeline, "source": {**source, "fields": fields}}}
    )

    problems = rejected(platform_conf, draft_text(platform_conf, values))

    assert problems["name"] == "'Big' is not a job name: lower case letters, digits and _, a letter first"
    assert problems["pipeline.routes.0.filter"] == "String should have at least 1 character"
    assert problems["pipeline.source.fields.0.type"].startswith("Input should be 'string', 'long'")
    # Model-wide rules name the section they hold over.
    unknown = rejected(
        platform_conf, draft_text(platform_conf, router_values("big", "true", columns=["event_id", "nope"]))
    )
    assert unknown == {"pipeline": "route 'big' projects unknown columns ['nope']"}
    sessions = new_job_values("sql").model_copy(update={"pipeline": {"kind": "sessionizer"}, "name": "s2"})
    assert rejected(platform_conf, draft_text(platform_conf, sessions)) == {
        "pipeline.kind": "the form writes router or sql jobs, not 'sessionizer'"
    }
    assert rejected(platform_conf, "name: [unclosed")["draft"].startswith("not valid YAML")
    assert not (platform_conf.runtime_root / DRAFTS_DIR).exists(), "nothing reached the analyzer"


def test_a_taken_name_another_jobs_port_and_an_edit_that_moves_the_sink_are_refused(
    platform_conf: PlatformConfig,
) -> None:
    taken = draft_text(platform_conf, router_values("router", "true"))
    assert rejected(platform_conf, taken) == {
        "name": f"a job named 'router' exists already ({job_file('router', platform_conf.conf_dir)})"
    }
    document = yaml.safe_load(draft_text(platform_conf, router_values("big", "true")))
    port = find_job("router", platform_conf.conf_dir).operations.metrics_port
    document["operations"]["metrics_port"] = port
    problems = rejected(platform_conf, yaml.safe_dump(document))
    assert problems == {"operations.metrics_port": f"port {port} is the metrics port of job 'router'"}

    router = current_values(platform_conf, find_job("router", platform_conf.conf_dir))
    unchanged = draft_text(platform_conf, router, "router")
    assert rejected(platform_conf, unchanged, "router") == {
        "draft": "nothing changed: this is the job's installed version"
    }
    moved = router.model_copy(update={"pipeline": {**router.pipeline, "sink": {"path": "elsewhere"}}})
    problems = rejected(platform_conf, draft_text(platform_conf, moved, "router"), "router")
    assert (
        list(problems) == ["pipeline.sink.path"]
        and "a new sink is a new job" in problems["pipeline.sink.path"]
    )
    renamed = router.model_copy(update={"name": "router2"})
    assert rejected(platform_conf, draft_text(platform_conf, renamed, "router"), "router") == {
        "name": "an edit keeps the job's name 'router', not 'router2'"
    }


@pytest.mark.spark
def test_spark_refuses_a_filter_by_field_and_a_checked_draft_is_written_once_with_its_verdict(
    platform_conf: PlatformConfig,
) -> None:
    path = job_file("big_purchases", platform_conf.conf_dir)
    wrong = draft_text(platform_conf, router_values("big_purchases", "event_typ = 'purchase'"))

    problems = rejected(platform_conf, wrong)

    assert list(problems) == ["pipeline.routes.0.filter"]
    assert UNRESOLVED in problems["pipeline.routes.0.filter"]
    assert not path.exists() and not platform_conf.job_runtime_dir("big_purchases").exists()

    right = draft_text(
        platform_conf, router_values("big_purchases", "event_type = 'purchase' AND amount > 3")
    )
    checked = check_draft(platform_conf, right)
    assert not path.exists(), "a check writes nothing"
    spec = create_job(platform_conf, right)

    assert path.read_text() == right
    assert spec.config_version == find_job("big_purchases", platform_conf.conf_dir).config_version
    # The board's verdict, found again rather than computed again, counts for the written file.
    verdict = read_verdict(platform_conf, spec)
    assert verdict is not None and verdict.analysed_at == checked.verdict.analysed_at
    assert not verdict.rejected
    with pytest.raises(DraftRejectedError) as again:
        create_job(platform_conf, right)
    assert again.value.problems == {"name": f"a job named 'big_purchases' exists already ({path})"}
    assert verdict_path(platform_conf, "big_purchases").read_text() == checked.verdict.model_dump_json(
        indent=2
    )


@pytest.mark.spark
def test_spark_names_what_a_sql_jobs_query_gets_wrong(platform_conf: PlatformConfig, tmp_path: Path) -> None:
    values = new_job_values("sql")
    wrong = values.model_copy(
        update={
            "name": "purchase_counts",
            "pipeline": {
                **values.pipeline,
                "query": "SELECT event_id, amout, event_date FROM events",
                "sink": {"path": "purchase_counts"},
            },
        }
    )
    problems = rejected(platform_conf, draft_text(platform_conf, wrong))
    assert list(problems) == ["pipeline.query"]
    assert "`amout`" in problems["pipeline.query"]
