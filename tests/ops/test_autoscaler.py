"""The autoscaler's pure policy over recorded metric series: the formula, its bounds, each guard."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from pydantic import ValidationError

from ops.control.autoscaler import LastRescale, LoadWindow, ScalingDecision, decide_scale
from ops.driver.telemetry import BatchSample
from ops.spec.job import AutoscalingPolicy, Operations

POLICY = AutoscalingPolicy(
    mode="apply",
    min_cores=1,
    max_cores=8,
    target_utilization=0.5,
    catch_up_seconds=100,
    stabilization_seconds=60,
    scale_down_delay_seconds=300,
    max_factor_per_step=2.0,
)
NOW = 10_000.0


def window(rate: float, true_rate: float, *, backlog: float = 0.0, growth: float = 0.0) -> LoadWindow:
    """120 s in which `rate` rows/s were read at `true_rate` rows per busy second."""
    seconds = 120.0
    rows = round(rate * seconds)
    return LoadWindow(
        seconds=seconds,
        rows=rows,
        busy_seconds=rows / true_rate,
        backlog_start_rows=backlog - growth * seconds,
        backlog_end_rows=backlog,
    )


def decide(
    load: LoadWindow,
    cores: int = 2,
    *,
    last: LastRescale | None = None,
    low_since: float | None = None,
    max_files: int | None = None,
    restart_cost: float | None = None,
) -> ScalingDecision:
    return decide_scale(
        POLICY,
        cores=cores,
        window=load,
        now=NOW,
        last=last,
        low_since=low_since,
        max_files_per_trigger=max_files,
        restart_cost_seconds=restart_cost,
    )


def test_the_window_of_recorded_batches_measures_arrival_true_rate_and_backlog() -> None:
    # Five 5 s batches of 1,000 rows, each busy 2 s; the backlog grew from 10 to 20 files.
    samples = [
        BatchSample(
            batch_id=i,
            num_input_rows=1000,
            input_rows_per_second=200,
            processed_rows_per_second=500,
            duration_ms=2000,
            backlog_files=10 + i * 2.5,
        )  # fmt: skip
        for i in range(5)
    ]
    load = LoadWindow.from_samples(samples, interval_seconds=5, rows_per_backlog_file=100)
    assert (load.seconds, load.rows, load.busy_seconds) == (25, 5000, 10)
    assert load.true_rate == 500
    # 200 rows/s read, and the backlog grew by 1,000 rows in 25 s: 240 rows/s arrived.
    assert load.arrival_rate == pytest.approx(240)


def test_idle_triggers_between_batches_count_as_wall_time() -> None:
    # A file every 4 s, a 2 s trigger: the trigger between two files finds nothing and leaves no
    # sample. Five batches of 1,000 rows, busy 1 s each, started 4 s apart: 1,000 rows per 4 s
    # arrive (250 rows/s), 25 % busy; without the start times the window would see 5 x 2 s.
    samples = [
        BatchSample(i, 1000, 500.0, 1000.0, 1000, backlog_files=0, started_at=1_000 + 4.0 * i)
        for i in range(5)
    ]
    load = LoadWindow.from_samples(samples, interval_seconds=2, rows_per_backlog_file=100)
    assert load.seconds == 18  # 16 s from the first start to the last, and the last's 2 s
    assert load.arrival_rate == pytest.approx(5000 / 18)
    assert load.busy_seconds / load.seconds == pytest.approx(5 / 18)
    without_starts = LoadWindow.from_samples(
        [replace(sample, started_at=None) for sample in samples],
        interval_seconds=2,
        rows_per_backlog_file=100,
    )
    assert without_starts.arrival_rate == 500


def series(
    rows: list[int],
    fixed: float,
    per_row: float,
    *,
    interval: float = 5.0,
    noise: float = 0.0,
    every: float | None = None,
) -> LoadWindow:
    """The window of recorded batches of `rows` each, one per trigger (or `every` seconds: input
    that arrives less often), each taking `fixed` seconds plus `per_row` seconds a row (times
    1 +- `noise`, seeded)."""
    rng = random.Random(11)
    samples, apart = [], every or interval
    for i, count in enumerate(rows):
        seconds = (fixed + per_row * count) * rng.uniform(1 - noise, 1 + noise)
        samples.append(
            BatchSample(i, count, count / apart, count / seconds, round(seconds * 1000), 0, 1_000 + apart * i)
        )
    return LoadWindow.from_samples(samples, interval_seconds=interval, rows_per_backlog_file=100)


def test_a_fixed_cost_dominated_job_is_not_given_more_cores() -> None:
    # 3 s of every batch is fixed (60 % of the 5 s trigger) and 0.1 ms a row: by rows per busy
    # second one core looks short (the old rate asked for 2), but more cores would not shorten the
    # fixed part, and the per-row part is tiny.
    load = series([100, 1000, 300, 800, 500, 1000, 200, 700, 400, 900], fixed=3.0, per_row=0.0001)
    assert load.cost is not None
    assert load.cost.fixed_seconds == pytest.approx(3.0, abs=0.01)
    assert load.fixed_share == pytest.approx(0.6, abs=0.01)
    assert math.ceil(load.arrival_rate / (load.true_rate * POLICY.target_utilization)) == 2
    decision = decide(load, cores=1)
    assert decision.recommended == 1
    assert (
        "takes 0.60 of the time, above the 0.5 target: more cores would not shorten it"
        in (decision.inputs["formula"])
    )


def test_the_fixed_part_counts_once_per_batch_and_input_arriving_every_other_trigger_halves_it() -> None:
    rows = [100, 1000, 300, 800, 500, 1000, 200, 700, 400, 900]
    every_trigger = series(rows, fixed=0.8, per_row=0.001, interval=2.0)
    every_other = series(rows, fixed=0.8, per_row=0.001, interval=2.0, every=4.0)
    assert every_trigger.fixed_share == pytest.approx(0.4, abs=0.01)
    assert every_other.fixed_share == pytest.approx(0.2, abs=0.015)
    # Behind, a batch runs every trigger again: the whole share counts.
    behind = replace(every_other, backlog_end_rows=5000)
    assert behind.fixed_share == pytest.approx(0.4, abs=0.01)


def test_a_per_row_dominated_job_is_sized_as_by_its_true_rate() -> None:
    # 50 ms fixed, 4 ms a row: 250 rows per second of work, 150 rows/s arriving.
    load = series([500, 1000, 750, 600, 900, 800, 700, 650, 850, 750], fixed=0.05, per_row=0.004)
    assert load.per_row_rate == pytest.approx(250, rel=0.01)
    assert load.fixed_share == pytest.approx(0.01, abs=0.002)
    decision = decide(load, cores=1)
    assert (
        decision.recommended
        == math.ceil(load.arrival_rate / (load.true_rate * POLICY.target_utilization))
        == 2
    )


def test_a_mixed_job_gets_the_cores_that_fit_its_per_row_part_beside_the_fixed_one() -> None:
    # 1 s fixed, 4 ms a row, +-5 % noise. The fit recovers both parts; the cores it recommends
    # put the batch the trigger produces at the target utilization or under, one fewer would not.
    load = series([300, 900, 600, 450, 750, 350, 850, 500, 700, 650], fixed=1.0, per_row=0.004, noise=0.05)
    assert load.cost is not None
    assert load.cost.fixed_seconds == pytest.approx(1.0, rel=0.15)
    assert load.cost.seconds_per_row == pytest.approx(0.004, rel=0.1)
    decision = decide(load, cores=1)

    def utilization(cores: int) -> float:
        return load.fixed_share + load.arrival_rate / (load.per_row_rate * cores)

    assert decision.recommended == 2
    assert (
        utilization(decision.recommended) <= POLICY.target_utilization < utilization(decision.recommended - 1)
    )
    assert "x (0.5 - 0.2" in decision.inputs["formula"]


def test_the_per_row_rate_does_not_move_with_the_batch_size_as_the_true_rate_does() -> None:
    # The same job (2 s fixed, 1 ms a row) seen reading small batches and large ones: rows per busy
    # second differ 8x, what a row costs does not.
    small = series([40, 60, 50, 45, 55, 30, 70, 50], fixed=2.0, per_row=0.001)
    large = series([2000, 3000, 2500, 1500, 3500, 2200, 2800, 2500], fixed=2.0, per_row=0.001)
    assert large.true_rate / small.true_rate > 8
    assert small.per_row_rate == pytest.approx(large.per_row_rate, rel=0.05)
    # Larger batches that took no longer: all of it is fixed cost, and no core is added for it.
    flat = series([100, 1000, 300, 800, 500, 1000], fixed=0.5, per_row=0.0)
    assert flat.cost is not None and flat.cost.seconds_per_row == 0
    assert (
        decide(flat, cores=2)
        .inputs["formula"]
        .startswith(
            "the batches took no longer for more rows (0.50 s + 0.000 ms/row): no per-row work for more cores"
        )
    )
    # Batches all of one size cannot tell the parts apart: all of it counts per row.
    same = series([500] * 8, fixed=2.0, per_row=0.001)
    assert same.cost is not None and same.cost.fixed_seconds == 0
    assert same.per_row_rate == pytest.approx(same.true_rate)


def test_a_load_step_scales_up_by_the_formula() -> None:
    # 400 rows/s arriving, 2 cores process 500 rows per busy second, 50 % target utilization:
    # ceil(2 x 400 / (500 x 0.5)) = 4.
    decision = decide(window(400, 500), max_files=10)
    assert (decision.recommended, decision.blocked_by) == (4, None)
    assert decision.changes
    assert decision.max_files_per_trigger == 20
    assert decision.inputs["formula"] == "ceil(2 x 400.0 / (500.0 x 0.5)) = 4, bounded to 4"


def test_a_backlog_adds_its_catch_up_rate() -> None:
    # 100 rows/s arriving plus 30,000 rows to drain in 100 s: target 400 rows/s, as above.
    assert decide(window(100, 500, backlog=30_000)).recommended == 4


def test_the_step_and_the_bounds_cap_the_change() -> None:
    assert decide(window(4000, 500)).recommended == 4  # wants 32: at most x2 per step
    assert decide(window(4000, 500), cores=6).recommended == 8  # max_cores
    quiet = decide(window(1, 500), cores=8, low_since=NOW - 1000)
    assert quiet.recommended == 4  # wants 1: at most /2 per step
    assert decide(window(1, 500), cores=1).recommended == 1  # min_cores


def test_too_short_a_window_decides_nothing() -> None:
    load = LoadWindow(seconds=30, rows=12_000, busy_seconds=24, backlog_start_rows=0, backlog_end_rows=0)
    decision = decide(load)
    assert decision.recommended == 4
    assert not decision.changes
    assert decision.blocked_by == "stabilization: 30 s of metrics, a decision needs 60 s"


def test_no_scale_down_while_a_backlog_drains() -> None:
    # The arrival rate fell, but 5,000 rows still wait (draining at 40 rows/s).
    draining = decide(window(20, 500, backlog=5000, growth=-40), cores=4, low_since=NOW - 1000)
    assert draining.recommended < 4
    assert draining.blocked_by == "backlog: 5000 rows still draining"


def test_scale_down_waits_for_its_delay() -> None:
    low = window(50, 500)
    assert decide(low, cores=4, low_since=NOW - 100).blocked_by == (
        "scale-down delay: lower for 100 s of the 300 s it must hold"
    )
    assert decide(low, cores=4, low_since=NOW - 301).changes


def test_an_ineffective_scale_up_blocks_the_next() -> None:
    # 1 -> 2 cores promised twice the true rate; it fell from 500 to 255 rows per busy second
    # (the 2 cores process 510 rows/s: 2 % of the promised 100 % more).
    last = LastRescale(at=NOW - 600, from_cores=1, to_cores=2, true_rate_before=500)
    decision = decide(window(400, 255), last=last)
    assert decision.recommended == 4
    assert (
        decision.blocked_by == "ineffective scaling: 1 -> 2 cores moved the true rate from 500 to 255 rows/s"
    )
    # One that delivered does not block.
    assert decide(window(400, 1000), last=last).blocked_by is None


def test_a_rescale_that_costs_more_than_it_saves_is_not_made() -> None:
    # 100 rows/s arrive; 2 cores read 500 rows/s, busy all the time; 30,000 rows wait: they drain
    # in 75 s as is. At 4 cores a 60 s restart takes 60 s plus (30,000 + 6,000) / 900 = 40 s: 100 s.
    load = window(500, 500, backlog=30_000, growth=-400)
    slow = decide(load, restart_cost=60)
    assert slow.recommended == 4
    assert (
        slow.blocked_by
        == "restart cost: the backlog drains in 75 s as is, 100 s with a 4-core restart (60 s down)"
    )
    # A 10 s restart drains it in 10 + 31,000 / 900 = 44 s: worth it.
    assert decide(load, restart_cost=10).changes
    # A job that cannot keep up rescales whatever the restart costs.
    assert decide(window(600, 500, backlog=30_000), restart_cost=600).changes


def test_a_rescale_is_followed_by_a_quiet_window() -> None:
    last = LastRescale(at=NOW - 50, from_cores=1, to_cores=2, true_rate_before=500)
    assert decide(window(400, 1000), last=last).blocked_by == "stabilization: the last rescale was 50 s ago"


def test_a_noisy_plateau_settles_and_then_never_rescales() -> None:
    """Twenty minutes of a plateau with +-15 % noise, a decision every minute, each applied."""
    rng = random.Random(7)
    cores, last, low_since, rescales = 1, None, None, []
    for minute in range(20):
        now = NOW + minute * 60
        # Each core processes 250 rows per busy second, whatever their number.
        load = window(300 * rng.uniform(0.85, 1.15), 250 * cores)
        decision = decide_scale(
            POLICY,
            cores=cores,
            window=load,
            now=now,
            last=last,
            low_since=low_since,
            max_files_per_trigger=None,
            restart_cost_seconds=20,
        )
        low_since = (low_since or now) if decision.recommended < cores else None
        if decision.changes:
            rescales.append((minute, decision.recommended))
            last = LastRescale(now, cores, decision.recommended, load.true_rate)
            cores = decision.recommended
    assert rescales == [(0, 2), (1, 3)]


def test_the_spec_refuses_bounds_out_of_order_and_cores_beyond_state_partitions() -> None:
    with pytest.raises(ValidationError, match="min_cores 4 is larger than max_cores 2"):
        AutoscalingPolicy(min_cores=4, max_cores=2)
    operations = {"metrics_port": 9999, "stateful": True, "resources": {"shuffle_partitions": 4}}
    with pytest.raises(ValidationError, match="max_cores 8 is more than resources.shuffle_partitions 4"):
        Operations.model_validate({**operations, "autoscaling": {"mode": "recommend", "max_cores": 8}})
    # Off, the bound does not matter; within the partitions it is fine.
    Operations.model_validate({**operations, "autoscaling": {"max_cores": 8}})
    Operations.model_validate({**operations, "autoscaling": {"mode": "apply", "max_cores": 4}})
