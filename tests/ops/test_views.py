"""The view store (`ops.views`) on a real PostgreSQL server: batches apply once and whole, a
revert recomputes what later batches wrote, and a reader never sees half a batch; a changelog
batch holding a key twice, or a view with no database, is refused with the view left as it was."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from jobs.runtime import view_publisher
from ops import views
from ops.control.savepointing import forget_view_history
from ops.control.supervisor import Supervisor
from ops.driver.view_publisher import ViewPublisher
from ops.exceptions import ConfigError, ViewStoreError
from ops.ledger.records import SavepointRecord
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.pipelines import DEAD_LETTER_REASON, ViewOutput
from ops.spec.platform import PlatformConfig, ViewStoreConfig, load_platform
from tests.support.ports import free_test_port

JOB = "assets"


def view_job() -> dict[str, object]:
    """A job file of a SQL job whose sink is its view's changelog."""
    return {
        "name": JOB,
        "pipeline": {
            "kind": "sql",
            "query": "SELECT * FROM events",
            "sources": {
                "events": {"path": "events", "fields": [{"name": "event_time", "type": "timestamp"}]}
            },
            "sink": {"path": "assets"},
            "partition_columns": ["event_date"],
            "view": {"key": "event_id", "value": "event_time"},
        },
        "operations": {"metrics_port": free_test_port()},
    }


def _current(url: str, job: str = JOB) -> dict[str, object]:
    with views.connected(url) as connection:
        return {row.key: (row.value, row.batch) for row in views.read_view(connection, job)}


def test_batches_apply_once_with_deletes_and_a_revert_restores_the_earlier_values(
    postgres_database: str,
) -> None:
    url = views.psycopg_url(postgres_database)
    with views.connected(url) as connection:
        assert views.applied_batch(connection, JOB) == -1
        assert views.apply_batch(connection, JOB, 0, {"a": ["x"], "b": ["y", "z"]})
        assert views.apply_batch(connection, JOB, 1, {"a": None, "c": ["x"]})
        assert not views.apply_batch(connection, JOB, 1, {"a": ["never"]}), "batch 1 applied twice"
        assert views.apply_batch(connection, JOB, 2, {"b": ["z"], "d": ["w"]})
        views.apply_batch(connection, "other", 5, {"a": ["kept"]})
    assert _current(url) == {"b": (["z"], 2), "c": (["x"], 1), "d": (["w"], 2)}

    with views.connected(url) as connection:
        assert views.revert_after(connection, JOB, 0) == 4
        assert views.applied_batch(connection, JOB) == 0
        assert [row.key for row in views.read_view(connection, JOB, key="b")] == ["b"]
        summary = views.summarize_view(connection, JOB, limit=1)
    # a and b as batch 0 left them; c and d, which only later batches wrote, are gone.
    assert _current(url) == {"a": (["x"], 0), "b": (["y", "z"], 0)}
    assert (summary.keys, summary.last_batch, [row.key for row in summary.rows]) == (2, 0, ["a"])
    assert _current(url, "other") == {"a": (["kept"], 5)}


def test_forgetting_before_a_batch_keeps_every_revert_to_it_or_later_exact(postgres_database: str) -> None:
    """Two jobs given the same batches, one's history forgotten before batch 3: the superseded
    changes and the deletions up to it go, and reverts of both to 5, 4 and 3 give the same views."""
    batches: list[dict[str, object]] = [
        {"a": ["x"], "b": ["y"], "c": ["z"]},
        {"a": ["x", "w"], "b": None},
        {"a": None, "c": ["z", "v"], "d": ["u"]},
        {"d": ["t"], "e": ["s"]},
        {"a": ["r"], "e": None},
        {"b": ["q"], "d": None},
        {"c": None},
    ]
    url = views.psycopg_url(postgres_database)
    with views.connected(url) as connection:
        for job in ("kept", "forgotten"):
            for batch, changes in enumerate(batches):
                assert views.apply_batch(connection, job, batch, changes)

        def count(table: str, job: str) -> object:
            row = connection.execute(f"SELECT count(*) FROM {table} WHERE job = %s", (job,)).fetchone()
            return row[0] if row else None

        # Up to batch 3: all of a's and b's (each ends deleted), c's first and d's first.
        assert views.forget_before(connection, "forgotten", 3) == 7
        assert (count("view_changes", "forgotten"), count("view_changes", "kept")) == (8, 15)
        assert (count("view_batches", "forgotten"), views.applied_batch(connection, "forgotten")) == (4, 6)
        assert views.read_view(connection, "forgotten") == views.read_view(connection, "kept")
        for batch in (5, 4, 3):
            assert views.revert_after(connection, "forgotten", batch) == views.revert_after(
                connection, "kept", batch
            )
            assert views.read_view(connection, "forgotten") == views.read_view(connection, "kept"), batch
        assert [(row.key, row.value, row.batch) for row in views.read_view(connection, "forgotten")] == [
            ("c", ["z", "v"], 2),
            ("d", ["t"], 3),
            ("e", ["s"], 3),
        ]


def test_savepoint_retention_forgets_the_history_before_the_oldest_batch_a_revert_can_reach(
    platform_conf: PlatformConfig, postgres_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The history is forgotten before the oldest complete savepoint's batch, or before the sink
    log's newest when a rewind has cut the log back further; a database that cannot be reached
    is a warning, with the history kept."""
    url = views.psycopg_url(postgres_database)
    platform = platform_conf.model_copy(update={"views": ViewStoreConfig(url=url)})
    (platform.conf_dir / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(view_job()))
    spec = find_job(JOB, platform.conf_dir)
    supervisor = Supervisor.for_platform(platform)
    now = datetime.now(UTC)
    for batch_id, status in ((5, "complete"), (3, "complete"), (1, "failed")):
        supervisor.ledger.add_savepoint(
            SavepointRecord(f"sp-{batch_id}", JOB, batch_id, now, f"sp-{batch_id}.json", 0, 0, status, "v")
        )
    sink_log = JobPaths.of(platform, spec).sink_log
    sink_log.mkdir(parents=True)
    with views.connected(url) as connection:
        for batch in range(7):
            views.apply_batch(
                connection, JOB, batch, {"a": [batch], f"k{batch}": None if batch % 2 else [batch]}
            )
            (sink_log / str(batch)).write_text("v1\n")

        def changes() -> list[tuple[str, int]]:
            rows = connection.execute(
                "SELECT key, batch FROM view_changes WHERE job = %s ORDER BY 1, 2", (JOB,)
            )
            return [(key, int(batch)) for key, batch in rows.fetchall()]

        # A rewind cut the sink log back to batch 2: the revert to it still finds every key's value.
        for batch in (3, 4, 5, 6):
            (sink_log / str(batch)).unlink()
        forget_view_history(supervisor.control, spec)
        assert [change for change in changes() if change[0] == "a"] == [
            ("a", 2),
            ("a", 3),
            ("a", 4),
            ("a", 5),
            ("a", 6),
        ]
        # The log back at 6: forgotten up to the oldest complete savepoint's batch, 3 (not the failed
        # one's); k1 and k3 were deleted (odd batches), so nothing of them stays.
        for batch in (3, 4, 5, 6):
            (sink_log / str(batch)).write_text("v1\n")
        forget_view_history(supervisor.control, spec)
        assert changes() == [
            ("a", 3),
            ("a", 4),
            ("a", 5),
            ("a", 6),
            ("k0", 0),
            ("k2", 2),
            ("k4", 4),
            ("k5", 5),
            ("k6", 6),
        ]

        down = platform.model_copy(
            update={"views": ViewStoreConfig(url=f"postgresql://views@127.0.0.1:{free_test_port()}/views")}
        )
        forget_view_history(Supervisor.for_platform(down).control, spec)
    assert "view history kept" in capsys.readouterr().out


def test_a_reader_polling_while_batches_apply_never_sees_half_a_batch(postgres_database: str) -> None:
    url = views.psycopg_url(postgres_database)
    names = [f"asset-{n:03d}" for n in range(200)]

    def holding(batch: int) -> dict[str, list[str] | None]:
        # Half the assets hold two locations each, the other half none; each batch swaps the halves.
        return {
            name: [f"{name}-a", f"{name}-b"] if i % 2 == batch % 2 else None for i, name in enumerate(names)
        }

    with views.connected(url) as connection:
        views.apply_batch(connection, JOB, 0, holding(0))
    totals: list[int] = []
    done = threading.Event()

    def read() -> None:
        with views.connected(url) as connection:
            while not done.is_set():
                totals.append(sum(len(row.value) for row in views.read_view(connection, JOB)))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with views.connected(url) as connection:
            for batch in range(1, 41):
                views.apply_batch(connection, JOB, batch, holding(batch))
    finally:
        done.set()
        reader.join()
    assert len(totals) > 10 and set(totals) == {200}


def test_an_unreachable_database_is_an_error_naming_it_without_its_password() -> None:
    url = f"postgresql://streamwarden:s3cret@127.0.0.1:{free_test_port()}/views"
    with pytest.raises(
        ViewStoreError, match=r"cannot reach the views' database postgresql://streamwarden:\*\*\*@"
    ) as error:
        views.connect(url)
    assert "s3cret" not in str(error.value)


def test_a_password_by_reference_joins_the_url_quoted_and_never_shows(
    platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    """`views.password` (the team stack's mounted secret) is the password of the URL's user,
    quoted, so one with URL syntax in it is itself; messages show it as ***. A URL with a password
    of its own beside it, or a reference that reads nothing, is refused."""
    secret = tmp_path / "views_db_password"
    secret.write_text("p@ss:w/rd%20?\n")
    url = f"postgresql://views@127.0.0.1:{free_test_port()}/views"
    platform = platform_conf.model_copy(update={"views": ViewStoreConfig(url=url, password=f"file:{secret}")})
    with_password = views.database_url(platform)
    parts = urlsplit(with_password)
    assert (parts.username, unquote(parts.password or ""), parts.path) == ("views", "p@ss:w/rd%20?", "/views")
    with pytest.raises(
        ViewStoreError, match=r"cannot reach the views' database postgresql://views:\*\*\*@"
    ) as error:
        views.connect(with_password)
    assert "p%40ss" not in str(error.value) and "p@ss" not in str(error.value)

    (platform_conf.conf_dir / "platform.yaml").write_text(
        yaml.safe_dump(
            {"views": {"url": "postgresql://views:s3cret@127.0.0.1:5432/views", "password": f"file:{secret}"}}
        )
    )
    with pytest.raises(
        ConfigError, match=r"field 'views\.password': .*a url that names a user and no password"
    ) as refused:
        load_platform(platform_conf.conf_dir)
    assert "s3cret" not in str(refused.value)

    secret.unlink()
    with pytest.raises(ViewStoreError, match=r"views\.password: .*views_db_password"):
        views.database_url(platform)


def test_a_batch_holding_a_key_twice_stops_the_publisher_and_the_view_keeps_what_it_had(
    postgres_database: str, tmp_path: Path
) -> None:
    sink_log = tmp_path / "sink" / "_spark_metadata"
    sink_log.mkdir(parents=True)
    rows = pa.table(
        {
            "asset_id": ["a", "a"],
            "locations": [["x"], ["y"]],
            DEAD_LETTER_REASON: pa.array([None, None], pa.string()),
        }
    )
    data_file = tmp_path / "sink" / "part-0.parquet"
    pq.write_table(rows, data_file)
    (sink_log / "0").write_text("v1\n" + json.dumps({"path": f"file://{data_file}", "action": "add"}) + "\n")
    url = views.psycopg_url(postgres_database)
    publisher = ViewPublisher(JOB, ViewOutput(key="asset_id", value="locations"), sink_log, url)

    with pytest.raises(ViewStoreError, match=r"batch 0 of job 'assets' holds key 'a' twice"):
        publisher.poll()
    publisher.close()
    with views.connected(url) as connection:
        assert views.applied_batch(connection, JOB) == -1
    assert _current(url) == {}


def test_a_job_with_a_view_and_no_database_for_it_is_an_error_of_its_config(
    platform_conf: PlatformConfig,
) -> None:
    assert platform_conf.postgres is None and platform_conf.views.url is None
    (platform_conf.conf_dir / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(view_job()))

    with pytest.raises(ConfigError, match=r"pipeline\.view: no database for views: set views\.url"):
        view_publisher(platform_conf, find_job("assets", platform_conf.conf_dir))
