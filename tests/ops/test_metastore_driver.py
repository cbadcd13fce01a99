"""The metastore's PostgreSQL JDBC driver: `make install` brings it, and `warden validate` says
when there is none (issue 27: the demo's compactions paged at first start without Debian's jar)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ops.cli import main
from ops.exceptions import ConfigError
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig, load_platform
from ops.warehouse.metastore import (
    DEBIAN_JDBC_DRIVER_JAR,
    default_jdbc_driver_jars,
    installed_jdbc_driver_jar,
    jdbc_driver_jar,
    metastore_conf,
)


def test_the_install_brings_the_driver_and_the_demo_uses_it() -> None:
    installed = installed_jdbc_driver_jar()

    assert installed is not None
    # In this environment (the venv `make install` syncs from uv.lock), not a system directory.
    assert installed.is_relative_to(sys.prefix)
    with zipfile.ZipFile(installed) as jar:
        assert "org/postgresql/Driver.class" in jar.namelist()
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    assert "Bundle-Name: PostgreSQL JDBC Driver" in manifest
    # The repo's own platform.yaml (what `make demo` runs) names no jar: the install's comes first,
    # whether or not Debian's is there too.
    demo = load_platform(DEFAULT_CONF_DIR)
    assert demo.warehouse.jdbc_driver_jar is None
    assert jdbc_driver_jar(demo) == installed
    assert metastore_conf(demo)["spark.driver.extraClassPath"] == str(installed)


def test_validate_prints_the_driver_it_found(
    platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--no-analysis"]) == 0
    assert (
        f"ok       metastore JDBC driver {installed_jdbc_driver_jar()}"
        in capsys.readouterr().out.splitlines()
    )


def test_validate_names_how_to_get_a_missing_driver(
    platform_conf: PlatformConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "no-jars-here"
    empty.mkdir()
    platform_file = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(platform_file.read_text())
    document["warehouse"] = {"jdbc_driver_jar": str(empty / "postgresql.jar")}
    platform_file.write_text(yaml.safe_dump(document))

    assert main(["validate", "--no-analysis"]) == 1

    lines = capsys.readouterr().out.splitlines()
    assert (
        f"INVALID  {platform_file}: field 'warehouse.jdbc_driver_jar': {empty / 'postgresql.jar'} does not "
        "exist: `make install` brings one (the locked PyPI package wbjdbc), or install Debian's "
        "libpostgresql-jdbc-java, or name a jar in warehouse.jdbc_driver_jar"
    ) in lines
    # The job files are still checked and reported.
    assert any(line.startswith("ok       router (router, config ") for line in lines)


def test_with_no_jar_where_it_looks_the_lookup_says_where_it_looked(
    platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    searched = (tmp_path / "site-packages" / "postgresql-42.7.4.jar", tmp_path / "usr" / "postgresql.jar")

    with pytest.raises(ConfigError) as raised:
        jdbc_driver_jar(platform_conf, searched)

    assert str(raised.value) == (
        f"{platform_conf.conf_dir / 'platform.yaml'}: field 'warehouse.jdbc_driver_jar': no PostgreSQL "
        f"JDBC driver for the warehouse's metastore (looked for {searched[0]}, {searched[1]}): `make "
        "install` brings one (the locked PyPI package wbjdbc), or install Debian's "
        "libpostgresql-jdbc-java, or name a jar in warehouse.jdbc_driver_jar"
    )
    # Debian's jar is the fallback after the install's.
    fallback = tmp_path / "usr" / "postgresql.jar"
    fallback.parent.mkdir()
    fallback.write_bytes(b"")
    assert jdbc_driver_jar(platform_conf, searched) == fallback


def test_the_default_search_order_is_the_install_then_debian() -> None:
    assert default_jdbc_driver_jars() == (installed_jdbc_driver_jar(), DEBIAN_JDBC_DRIVER_JAR)
