"""The synthetic event generator: deterministic, atomic, and honest about what it broke."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from synthetic.generator import REQUIRED_FIELDS, TYPED_FIELDS, run, write_batch
from synthetic.profiles import RateProfile


def test_same_seed_writes_the_same_file(tmp_path: Path) -> None:
    first = write_batch(tmp_path / "a", 200, 0.1, seed=42)
    second = write_batch(tmp_path / "b", 200, 0.1, seed=42)
    assert first.path.read_bytes() == second.path.read_bytes()
    assert write_batch(tmp_path / "c", 200, 0.1, seed=43).path.read_bytes() != first.path.read_bytes()


def test_batch_reports_exactly_the_lines_it_wrote(tmp_path: Path) -> None:
    batch = write_batch(tmp_path, 300, 0.1, seed=1)
    lines = batch.path.read_text().splitlines()
    assert len(lines) == batch.total == 300
    assert batch.malformed_by_kind() == {"bad_json": 10, "wrong_type": 10, "missing_field": 10}
    assert sorted(lines) == sorted(
        [json.dumps(event) for event in batch.events] + [m.line for m in batch.malformed]
    )
    event_ids = [event["event_id"] for event in batch.events]
    assert len(set(event_ids)) == len(event_ids)
    assert all(set(REQUIRED_FIELDS) <= event.keys() for event in batch.events)


def test_malformed_lines_are_broken_the_stated_way(tmp_path: Path) -> None:
    for line in write_batch(tmp_path, 300, 0.2, seed=2).malformed:
        if line.kind == "bad_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(line.line)
            continue
        document = json.loads(line.line)
        if line.kind == "missing_field":
            assert line.field in REQUIRED_FIELDS and line.field not in document
        else:
            assert line.field is not None and document[line.field] == TYPED_FIELDS[line.field]


def test_file_appears_under_its_final_name_only(tmp_path: Path) -> None:
    batch = write_batch(tmp_path, 10, 0.0, seed=3)
    assert [path.name for path in tmp_path.iterdir()] == [batch.path.name] == ["events-3.json"]


def test_run_writes_files_at_the_requested_rate_until_stopped(tmp_path: Path) -> None:
    stop = threading.Event()
    seen: list[int] = []

    def on_file(batch: object, totals: object) -> None:
        seen.append(1)
        if len(seen) == 3:
            stop.set()

    totals = run(
        tmp_path, events_per_second=100, files_per_second=20, seed=5, stop_event=stop, on_file=on_file
    )
    assert totals.files == 3 and totals.events + totals.malformed == 15
    assert sorted(path.name for path in tmp_path.glob("*.json")) == sorted(path.name for path in totals.paths)


def test_command_line_prints_progress(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "synthetic.generator",
            "--landing",
            str(tmp_path),
            "--rate",
            "50",
            "--files-per-second",
            "10",
            "--duration",
            "0.35",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    written = list(tmp_path.glob("*.json"))
    assert 3 <= len(written) <= 5
    assert result.stdout.count("wrote events-") == len(written)


def test_rate_profiles_step_ramp_and_hold_a_noisy_plateau() -> None:
    profile = RateProfile.parse("step 200 60, ramp 200 800 120, noisy 300 0.15 600", seed=3)
    assert profile.seconds == 780
    assert [profile.rate_at(t) for t in (0, 59.9, 60, 120, 179.4)] == pytest.approx([200, 200, 200, 500, 797])
    plateau = [profile.rate_at(t) for t in range(180, 780)]
    assert all(255 <= rate <= 345 for rate in plateau)
    assert len(set(plateau)) > 100  # it is noisy
    assert 255 <= profile.rate_at(10_000) <= 345  # after the end, the last segment holds
    again = RateProfile.parse("step 200 60, ramp 200 800 120, noisy 300 0.15 600", seed=3)
    assert [again.rate_at(t) for t in range(180, 780)] == plateau  # seeded


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "has no segment"),
        ("jump 200 60", "kind must be one of step, ramp, noisy"),
        ("ramp 200 60", "ramp takes 3 numbers"),
        ("step fast 60", "are not all numbers"),
        ("step 200 0", "the duration > 0"),
        ("noisy 300 1.5 60", "noise is a fraction below 1"),
    ],
)
def test_a_bad_rate_profile_is_refused_with_the_segment_quoted(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RateProfile.parse(text)


def test_run_follows_a_profile(tmp_path: Path) -> None:
    # 20 files per second: 100 events/s for 0.5 s (5 a file), then 400 events/s (20 a file).
    totals = run(tmp_path, RateProfile.parse("step 100 0.5, step 400 1"), files_per_second=20, duration=0.9)
    sizes = [len(path.read_text().splitlines()) for path in totals.paths]
    assert sizes[:10] == [5] * 10
    assert set(sizes[10:]) == {20}


def test_a_rate_below_one_event_per_file_carries_over(tmp_path: Path) -> None:
    totals = run(tmp_path, events_per_second=5, files_per_second=20, duration=0.95)
    # 5 events/s in 19 slots of 50 ms: an event every 4th slot.
    assert totals.events + totals.malformed == 4
