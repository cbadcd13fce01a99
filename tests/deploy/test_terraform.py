"""terraform/ checked offline: `terraform fmt -check`, `validate` and `test` (its .tftest.hcl files
plan and apply against `mock_provider "aws"`: the AWS APIs are the one thing mocked, because they
cannot run here), and checkov with no failed check.

`terraform init` writes a lock file into the configuration and its plugins into the data dir, so
the checks run on a copy in tmp_path with TF_DATA_DIR there: the tree stays clean and parallel runs
never share state. The AWS provider comes from the machine's offline mirror (`-plugin-dir`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ops.spec.platform import load_platform

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "terraform"
TERRAFORM = "/usr/local/bin/terraform"
# The offline mirror of the hashicorp/aws provider on these machines (registry.terraform.io/...).
PLUGIN_DIR = Path("/opt/tf-plugins")


def terraform(*args: str, cwd: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TF_DATA_DIR": str(data_dir),
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        # No credentials or region of the caller's shell may reach the mocked runs.
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_PROFILE": "",
    }
    return subprocess.run(
        [TERRAFORM, *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def terraform_copy(tmp_path: Path) -> Path:
    """terraform/ copied to tmp_path and initialised from the offline provider mirror."""
    copy = tmp_path / "terraform"
    shutil.copytree(
        TERRAFORM_DIR, copy, ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*")
    )
    init = terraform(
        "init", "-backend=false", f"-plugin-dir={PLUGIN_DIR}", cwd=copy, data_dir=tmp_path / "data"
    )
    assert init.returncode == 0, init.stdout + init.stderr
    return copy


@pytest.mark.slow
def test_terraform_is_formatted_valid_and_its_tests_pass(terraform_copy: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    fmt = terraform("fmt", "-check", "-recursive", cwd=TERRAFORM_DIR, data_dir=data_dir)
    assert fmt.returncode == 0, f"not formatted (run `terraform fmt -recursive terraform`):\n{fmt.stdout}"
    validate = terraform("validate", cwd=terraform_copy, data_dir=data_dir)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    test = terraform("test", cwd=terraform_copy, data_dir=data_dir)
    assert test.returncode == 0, test.stdout + test.stderr
    passed = re.search(r"Success! (\d+) passed, 0 failed", test.stdout)
    assert passed and int(passed[1]) >= 11, test.stdout
    # What the configuration creates, by terraform's own reading of it: the PostgreSQL the code
    # uses, and no Glue catalog, which nothing reads (the metastore is in PostgreSQL).
    graph = terraform("graph", cwd=terraform_copy, data_dir=data_dir)
    assert graph.returncode == 0, graph.stderr
    resources = set(re.findall(r'"((?:module\.\w+\.)*aws_\w+\.\w+)"', graph.stdout))
    assert {
        "module.database.aws_db_instance.platform",
        "module.database.aws_db_subnet_group.platform",
        "module.database.aws_security_group.database",
    } <= resources, sorted(resources)
    assert not [resource for resource in resources if "aws_glue" in resource]
    # Nothing was written into the repo's tree.
    assert not (TERRAFORM_DIR / ".terraform.lock.hcl").exists()
    assert not (TERRAFORM_DIR / ".terraform").exists()


@pytest.mark.slow
def test_terraform_checks_fail_on_a_bad_configuration(terraform_copy: Path, tmp_path: Path) -> None:
    """The checks have teeth: a misformatted file fails fmt; unversioned savepoints and a key policy
    without CloudWatch Logs each fail an assertion of the same `terraform test` run (a run reports
    every failed assertion, so one run checks both)."""
    data_dir = tmp_path / "data"
    (terraform_copy / "extra.tf").write_text("locals {\nx=1\n}\n")
    assert terraform("fmt", "-check", "-recursive", cwd=terraform_copy, data_dir=data_dir).returncode != 0
    (terraform_copy / "extra.tf").unlink()
    storage = terraform_copy / "modules" / "storage" / "main.tf"
    original = storage.read_text()
    unversioned = original.replace(
        "    savepoints = {\n      versioned = true", "    savepoints = {\n      versioned = false", 1
    )
    # A key policy without CloudWatch Logs: the EKS log group could not be created with the key.
    broken = unversioned.replace('"logs.${var.region}.amazonaws.com"', '"ec2.amazonaws.com"', 1)
    assert original != unversioned != broken
    storage.write_text(broken)
    test = terraform("test", cwd=terraform_copy, data_dir=data_dir)
    assert test.returncode != 0
    assert "versioning protects savepoints, the archive and the warehouse" in test.stdout + test.stderr
    assert "the key policy lets CloudWatch Logs of the region use the key" in test.stdout + test.stderr


def test_savepoint_retention_default_matches_the_job_files() -> None:
    """The bucket keeps a deleted savepoint recoverable for as long as the jobs keep savepoints."""
    ages = [
        spec["operations"]["savepoints"]["max_age_hours"]
        for spec in (yaml.safe_load(path.read_text()) for path in (REPO / "conf" / "jobs").glob("*.yaml"))
        if (spec["operations"].get("savepoints") or {}).get("max_age_hours")
    ]
    assert ages, "no job sets savepoints.max_age_hours"
    assert terraform_default("savepoint_max_age_days") == math.ceil(max(ages) / 24)


def test_archive_retention_default_matches_the_platform() -> None:
    """S3 expires archived input after the platform's own retention has deleted it (a backstop)."""
    assert terraform_default("archive_retention_days") == math.ceil(
        load_platform(REPO / "conf").archive.retention_days
    )


def terraform_default(variable: str) -> int:
    variables = (TERRAFORM_DIR / "variables.tf").read_text()
    default = re.search(rf'variable "{variable}" \{{.*?default\s*=\s*(\d+)', variables, re.S)
    assert default, f"no default for {variable}"
    return int(default[1])


def test_every_secret_file_the_platform_reads_on_aws_is_a_terraform_secret(tmp_path: Path) -> None:
    """conf/platform-compose.yaml reads its secrets from files under /run/secrets/, which the pods
    on AWS mount from Secrets Manager (terraform/README.md): each file but the S3 keys (Amazon S3
    signs with the pod's role) is a secret terraform creates, named after the file."""
    secrets_module = (TERRAFORM_DIR / "modules" / "secrets" / "main.tf").read_text()
    secret_block = re.search(r"secrets = \{(.*?)\n  \}", secrets_module, re.S)
    assert secret_block
    terraform_secrets = set(re.findall(r"^\s+(\w+)\s+=", secret_block[1], re.M))
    (tmp_path / "platform.yaml").write_text((REPO / "conf" / "platform-compose.yaml").read_text())
    platform = load_platform(tmp_path)
    files = {
        reference.removeprefix("file:/run/secrets/")
        for reference in (
            platform.slack.webhook_url,
            platform.warehouse.metastore_password,
            platform.views.password,
            platform.s3.access_key_id,
            platform.s3.secret_access_key,
        )
        if reference and reference.startswith("file:/run/secrets/")
    }
    s3_keys = {"s3_access_key_id", "s3_secret_access_key"}
    assert files - s3_keys == {"slack_webhook_url", "metastore_db_password", "views_db_password"}
    assert files - s3_keys <= terraform_secrets
    # The roles of conf/postgres/init-databases.sh each have their password's secret.
    roles = set(
        re.findall(r"CREATE ROLE (\w+) LOGIN", (REPO / "conf" / "postgres" / "init-databases.sh").read_text())
    )
    assert roles == {"airflow", "ledger", "metastore", "views"}
    assert {f"{role}_db_password" for role in roles} <= terraform_secrets


def test_every_checkov_suppression_is_justified() -> None:
    skips = [
        (path.relative_to(REPO), line.strip())
        for path in TERRAFORM_DIR.rglob("*.tf")
        for line in path.read_text().splitlines()
        if "checkov:skip=" in line
    ]
    assert skips
    for path, skip in skips:
        match = re.fullmatch(r"#checkov:skip=(CKV2?_AWS_\d+):(.+)", skip)
        assert match and len(match[2].split()) >= 6, f"{path}: a suppression needs its reason: {skip}"


@pytest.mark.slow
def test_checkov_finds_no_failed_check() -> None:
    # `make checkov` installs checkov on first use and scans with the repo's settings; JSON here.
    scan = subprocess.run(
        ["make", "--silent", "--no-print-directory", "checkov", "CHECKOV_OUTPUT=--output json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert scan.returncode == 0, scan.stdout[-3000:] + scan.stderr[-3000:]
    report = json.loads(scan.stdout)
    summary = report["summary"]
    failed = [(check["check_id"], check["resource"]) for check in report["results"]["failed_checks"]]
    assert summary["failed"] == 0, failed
    # Every file was read (a file checkov cannot parse is silently left unchecked otherwise).
    assert summary["parsing_errors"] == 0, report["results"]["parsing_errors"]
    assert summary["passed"] > 100 and summary["resource_count"] > 50, summary
