"""Config loading: typed models, unknown keys rejected, errors that name file and field."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ops.exceptions import ConfigError
from ops.spec.code import code_digest
from ops.spec.job import anchor_paths, find_job, load_job, load_jobs
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform

# The job files whose pipelines hold Spark SQL, in file name order.
JOBS_WITH_SQL = ("attack_chains", "device_health", "router")


def router_document() -> dict:
    return yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())


def write_job(directory: Path, name: str, document: dict) -> Path:
    path = directory / "jobs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_repo_conf_validates() -> None:
    platform = load_platform(DEFAULT_CONF_DIR)
    loaded = load_jobs(DEFAULT_CONF_DIR)
    assert loaded.errors == {}
    assert "router" in loaded.specs
    assert platform.lake_root == (DEFAULT_CONF_DIR.parent / ".runtime" / "lake").resolve()
    assert platform.resolved_ledger_url == f"sqlite:///{DEFAULT_CONF_DIR.parent.resolve()}/.runtime/ledger.db"


def test_every_repo_job_pages_with_its_own_runbook() -> None:
    runbooks = {
        name: spec.operations.alerts.runbook for name, spec in load_jobs(DEFAULT_CONF_DIR).specs.items()
    }
    assert runbooks == {name: f"ops/runbooks/{name}.md" for name in runbooks}
    assert [name for name in runbooks if not (DEFAULT_CONF_DIR.parent / runbooks[name]).is_file()] == []


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda d: d["operations"].update(colour="red"), "operations.colour", "unknown key"),
        (
            lambda d: d["operations"]["trigger"].update(interval_seconds=-1),
            "operations.trigger.interval_seconds",
            "-1",
        ),
        (
            lambda d: d["pipeline"]["routes"][0].update(columns=["nope"]),
            "pipeline.router",
            "unknown columns ['nope']",
        ),
        (lambda d: d["pipeline"].update(kind="teleporter"), "pipeline", "teleporter"),
        (
            lambda d: d["pipeline"]["routes"].append(
                {"name": "dead_letter", "filter": "true", "columns": ["event_id"]}
            ),
            "pipeline.router",
            "reserved",
        ),
        (lambda d: d.pop("operations"), "operations", "Field required"),
        (
            lambda d: d["operations"].update(restatement={"cron": "every night"}),
            "operations.restatement.cron",
            "not a valid cron expression: 'every night'",
        ),
        (
            lambda d: d["operations"]["savepoints"].update(keep_count=0),
            "operations.savepoints.keep_count",
            "greater than or equal to 1",
        ),
        # Fields that only make sense together.
        (
            lambda d: d["operations"]["restart"].update(initial_backoff_seconds=600, max_backoff_seconds=300),
            "operations.restart",
            "initial_backoff_seconds 600 is larger than max_backoff_seconds 300",
        ),
        (
            lambda d: d["operations"]["savepoints"].update(interval_minutes=60, max_age_hours=0.5),
            "operations.savepoints",
            "max_age_hours 0.5 is shorter than interval_minutes 60",
        ),
        (
            lambda d: d["operations"].update(
                trigger={"interval_seconds": 5}, health={"stuck_grace_seconds": 5}
            ),
            "operations",
            "an idle query reports progress only every 10 s, so the stuck limit (interval + grace = 10 s)",
        ),
        (
            lambda d: d["operations"].update(
                restatement={"cron": "0 3 * * *", "lookback_hours": 2}, savepoints={"interval_minutes": None}
            ),
            "operations",
            "restatement needs periodic savepoints to restate from",
        ),
        (
            lambda d: d["operations"].update(
                restatement={"cron": "0 3 * * *", "lookback_hours": 48},
                savepoints={"interval_minutes": 60, "keep_count": 100, "max_age_hours": 24},
            ),
            "operations",
            "restatement.lookback_hours 48 is longer than savepoints.max_age_hours 24",
        ),
        (
            lambda d: d["operations"].update(
                restatement={"cron": "0 3 * * *", "lookback_hours": 6},
                savepoints={"interval_minutes": 30, "keep_count": 10, "max_age_hours": 168},
            ),
            "operations",
            "(4.5 h): raise keep_count to at least 13",
        ),
    ],
)
def test_invalid_job_names_file_and_field(tmp_path: Path, mutate, field: str, problem: str) -> None:
    document = router_document()
    mutate(document)
    path = write_job(tmp_path, "router", document)
    with pytest.raises(ConfigError) as error:
        load_job(path)
    assert str(path) in str(error.value)
    assert f"field '{field}" in str(error.value)
    assert problem in str(error.value)


@pytest.mark.parametrize(
    "operations",
    [
        {"trigger": {"interval_seconds": 1}, "health": {"stuck_grace_seconds": 10}},
        {"trigger": {"interval_seconds": 30}, "health": {"stuck_grace_seconds": 1}},
        {"restart": {"initial_backoff_seconds": 300, "max_backoff_seconds": 300}},
        {
            "restatement": {"cron": "0 3 * * *", "lookback_hours": 6},
            "savepoints": {"interval_minutes": 30, "keep_count": 13, "max_age_hours": 6},
        },
    ],
)
def test_fields_that_agree_load(tmp_path: Path, operations: dict) -> None:
    document = router_document()
    document["operations"] |= operations
    loaded = load_job(write_job(tmp_path, "router", document)).operations.model_dump()
    for section, values in operations.items():
        assert {key: loaded[section][key] for key in values} == values


def test_a_yml_job_file_is_refused_naming_it_not_ignored(tmp_path: Path) -> None:
    write_job(tmp_path, "router", router_document())
    other = router_document() | {"name": "other"}
    other["operations"] = other["operations"] | {"metrics_port": 9498}
    yml = tmp_path / "jobs" / "other.yml"
    yml.write_text(yaml.safe_dump(other))
    # An editor's backup is no job file at all.
    (tmp_path / "jobs" / "router.yaml~").write_text("name: [unclosed\n")

    loaded = load_jobs(tmp_path)

    assert set(loaded.specs) == {"router"}
    assert set(loaded.errors) == {yml}
    assert str(loaded.errors[yml]) == (
        f"{yml}: job files end in .yaml, so this file is not loaded: rename it to other.yaml"
    )
    with pytest.raises(ConfigError, match=r"other.yml: job files end in .yaml"):
        find_job("other", tmp_path)


def test_warden_validate_exits_non_zero_on_a_yml_job_file(platform_conf: PlatformConfig) -> None:
    yml = platform_conf.conf_dir / "jobs" / "extra.yml"
    yml.write_text(yaml.safe_dump(router_document() | {"name": "extra"}))
    result = subprocess.run(
        [sys.executable, "-m", "ops.cli", "validate", "--no-analysis"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"INVALID  {yml}: job files end in .yaml" in result.stdout


def test_name_must_match_file(tmp_path: Path) -> None:
    path = write_job(tmp_path, "other", router_document())
    with pytest.raises(ConfigError, match="must match the file name 'other'"):
        load_job(path)


def test_one_invalid_file_does_not_hide_the_others(tmp_path: Path) -> None:
    write_job(tmp_path, "router", router_document())
    broken = router_document() | {"name": "broken", "surprise": 1}
    broken_path = write_job(tmp_path, "broken", broken)
    (tmp_path / "jobs" / "garbled.yaml").write_text("name: [unclosed\n")
    loaded = load_jobs(tmp_path)
    assert set(loaded.specs) == {"router"}
    assert set(loaded.errors) == {broken_path, tmp_path / "jobs" / "garbled.yaml"}
    assert "not valid YAML" in str(loaded.errors[tmp_path / "jobs" / "garbled.yaml"])


def test_metrics_ports_must_be_distinct(tmp_path: Path) -> None:
    write_job(tmp_path, "router", router_document())
    write_job(tmp_path, "router_copy", router_document() | {"name": "router_copy"})
    loaded = load_jobs(tmp_path)
    assert list(loaded.specs) == ["router"]
    assert "already used by job 'router'" in str(next(iter(loaded.errors.values())))


def test_config_is_frozen() -> None:
    spec = find_job("router", DEFAULT_CONF_DIR)
    with pytest.raises(Exception, match="frozen"):
        spec.operations.trigger.interval_seconds = 1  # type: ignore[misc]


def test_platform_rejects_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text("ledger: {url: sqlite:///x.db}\nslak: {}\n")
    with pytest.raises(ConfigError, match=r"platform.yaml: field 'slak': unknown key"):
        load_platform(tmp_path)
    assert isinstance(load_platform(DEFAULT_CONF_DIR), PlatformConfig)


def test_airflow_metadata_in_postgres_needs_the_embedded_server(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text("postgres: null\nairflow: {metadata_database: postgres}\n")
    with pytest.raises(ConfigError, match=r"field 'airflow.metadata_database': postgres needs the embedded"):
        load_platform(tmp_path)
    (tmp_path / "platform.yaml").write_text("airflow: {metadata_database: mysql}\n")
    with pytest.raises(ConfigError, match=r"field 'airflow.metadata_database'"):
        load_platform(tmp_path)


def test_warden_validate_exits_non_zero_naming_file_and_field(platform_conf: PlatformConfig) -> None:
    document = router_document() | {"name": "broken"}
    document["operations"] = document["operations"] | {"metrics_port": 80}
    path = write_job(platform_conf.conf_dir, "broken", document)
    result = subprocess.run(
        [sys.executable, "-m", "ops.cli", "validate", "--no-analysis"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"INVALID  {path}: field 'operations.metrics_port'" in result.stdout
    assert "ok       router" in result.stdout


def warden(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, check=False, timeout=900
    )


@pytest.mark.spark  # starts a Spark driver without the fixtures that mark it
def test_warden_validate_runs_spark_s_analyzer_on_every_expression(platform_conf: PlatformConfig) -> None:
    conf = platform_conf.conf_dir
    documents = {name: yaml.safe_load((conf / "jobs" / f"{name}.yaml").read_text()) for name in JOBS_WITH_SQL}
    # `>>>` parses (an unsigned shift) but is no condition; `amout` is no column.
    documents["router"]["pipeline"]["routes"][0]["filter"] = "amount >>> 1"
    documents["router"]["pipeline"]["routes"][1]["filter"] = "amout > 0"
    documents["device_health"]["pipeline"]["data_points"][0]["red_when"] = "value + 1"
    documents["attack_chains"]["pipeline"]["rules"][2]["filter"] = "event_type = = 'connection'"
    for name, document in documents.items():
        write_job(conf, name, document)

    result = warden("validate")

    assert result.returncode == 1, result.stderr
    # Progress on stderr, the report on stdout.
    assert result.stderr.startswith(
        "analysing 8 job file(s) with Spark's analyzer (a local Spark session starts)"
    )
    assert "done" in result.stderr.splitlines()[-1]
    lines = result.stdout.splitlines()
    invalid = [line for line in lines if line.startswith("INVALID")]
    attack_chains, device_health, router = (conf / "jobs" / f"{name}.yaml" for name in JOBS_WITH_SQL)
    assert invalid[0].startswith(
        f"INVALID  {attack_chains}: field 'pipeline.rules.2.filter': rule 'port_scan' filter "
        "\"event_type = = 'connection'\" is not a valid boolean expression: [PARSE_SYNTAX_ERROR] Syntax error"
    )
    assert invalid[1] == (
        f"INVALID  {device_health}: field 'pipeline.data_points.0.red_when': data point 'signal_db' red_when "
        "'value + 1' is not a valid boolean expression: is of type double, not boolean"
    )
    assert invalid[2] == (
        f"INVALID  {router}: field 'pipeline.routes.0.filter': route 'purchases' filter 'amount >>> 1' "
        "is not a valid boolean expression: is of type int, not boolean"
    )
    assert invalid[3].startswith(
        f"INVALID  {router}: field 'pipeline.routes.1.filter': route 'eu_views' filter 'amout > 0' is not a "
        "valid boolean expression: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function "
        "parameter with name `amout` cannot be resolved."
    )
    assert len(invalid) == 4
    assert any(line.startswith("ok       sessionizer (sessionizer, config ") for line in lines)

    # The verdicts are kept per file version: without the analyzer they still count, and an edited
    # file is unanalysed (provisionally valid) until the analyzer sees it again.
    documents["router"]["pipeline"]["routes"][0]["filter"] = "amount > 1"
    documents["router"]["pipeline"]["routes"][1]["filter"] = "amount > 0"
    write_job(conf, "router", documents["router"])
    again = warden("validate", "--no-analysis")
    assert again.returncode == 1
    assert "analysing" not in again.stderr
    assert any(line.startswith("ok       router (router, config ") for line in again.stdout.splitlines())
    assert "not analysed by Spark" in next(line for line in again.stdout.splitlines() if "router" in line)
    assert sum(line.startswith("INVALID") for line in again.stdout.splitlines()) == 2


def test_validate_never_imports_pyspark_itself(platform_conf: PlatformConfig) -> None:
    # Its Spark analysis runs in a process of its own (tests/test_layering.py covers `status`).
    probe = (
        "import sys\n"
        "from ops.cli import main\n"
        "main(['validate', '--no-analysis'])\n"
        "assert 'pyspark' not in sys.modules, sorted(m for m in sys.modules if m.startswith('pyspark'))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "router" in result.stdout


def test_a_code_digest_follows_every_edit_even_of_the_same_size_a_moment_apart(tmp_path: Path) -> None:
    module = tmp_path / "fraud" / "rules.py"
    module.parent.mkdir()
    module.write_text("LIMIT = 10\n")
    first = code_digest(tmp_path)
    module.write_text("LIMIT = 50\n")
    second = code_digest(tmp_path)
    settled = time.time() - 60
    os.utime(module, (settled, settled))

    assert first != second
    assert code_digest(tmp_path) == second == code_digest(tmp_path)
    (tmp_path / "fraud" / "__pycache__").mkdir()
    (tmp_path / "fraud" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"cache")
    assert code_digest(tmp_path) == second


def test_a_copy_of_a_job_file_checked_elsewhere_takes_its_relative_paths_from_where_it_is_for(
    platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    """An upgrade's candidate is checked in a scratch directory, and its dry run runs from another
    conf dir: a relative `code`, UDF `file` or enricher `mapping` still names what it names in
    the platform's conf dir."""
    jobs_dir = platform_conf.conf_dir / "jobs"
    (jobs_dir / "team" / "fraud").mkdir(parents=True)
    (jobs_dir / "team" / "fraud" / "scoring.py").write_text("def build(inputs, context):\n    pass\n")
    document = yaml.safe_load(
        (DEFAULT_CONF_DIR / "jobs" / "warehouse_writer.yaml")
        .read_text()
        .replace("name: warehouse_writer", "name: wh")
    )
    document["pipeline"]["code"] = "team"
    candidate = tmp_path / "elsewhere" / "wh.yaml"
    candidate.parent.mkdir()
    candidate.write_text(yaml.safe_dump(document))

    with pytest.raises(ConfigError, match="field 'pipeline.code'"):
        load_job(candidate)
    installed = jobs_dir / "wh.yaml"
    installed.write_bytes(candidate.read_bytes())
    spec = load_job(candidate, jobs_dir)

    assert spec.pipeline.code == str(jobs_dir / "team")  # type: ignore[union-attr]
    assert spec.config_version == load_job(installed).config_version
    anchored = anchor_paths(document, platform_conf.conf_dir)
    assert anchored["pipeline"]["code"] == str(jobs_dir / "team") and document["pipeline"]["code"] == "team"
    enricher = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "enricher.yaml").read_text())
    mapping = anchor_paths(enricher, platform_conf.conf_dir)["pipeline"]["mapping"]
    assert mapping == str(platform_conf.conf_dir / enricher["pipeline"]["mapping"])
