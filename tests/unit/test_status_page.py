"""The status page's pure parts: chart geometry (scales, stacked areas with 0, 1 and many samples, bars, the
shard strip), the history bucket, and how waiting checks become tables and landings a line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from smartsensor.api import charts
from smartsensor.service import status_report as report
from smartsensor.service.history import bucket_of
from smartsensor.service.overview import series, tables_of, waited_for, waiting_per_table

UTC = timezone.utc
T = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)


def polygon(area: charts.Area) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in area.points.split()]  # type: ignore[misc]  # two numbers per point


def test_a_linear_scale_and_its_empty_domain() -> None:
    x = charts.linear(0, 10, 100, 200)
    assert (x(0), x(5), x(10)) == (100, 150, 200)
    y = charts.linear(0, 4, 250, 10)  # inverted, as an SVG y axis
    assert (y(0), y(4)) == (250, 10)
    assert charts.linear(3, 3, 0, 100)(3) == 50 == charts.linear(5, 1, 0, 100)(7)


def test_nice_ceiling() -> None:
    assert [charts.nice_ceiling(v) for v in (0, -3, 0.3, 1, 3, 7, 10, 11, 48, 51, 999)] == [
        1,
        1,
        0.5,
        1,
        5,
        10,
        10,
        20,
        50,
        100,
        1000,
    ]


def test_a_chart_without_samples_has_no_bands_but_an_axis() -> None:
    chart = charts.stacked_chart([], 600, 200)
    assert chart.areas == [] and chart.x_ticks == [] and chart.y_ticks == [(chart.bottom, "0")]


def test_one_sample_is_a_narrow_band_in_the_middle() -> None:
    chart = charts.stacked_chart([(T, {"success": 3, "smart_pending": 1})], 600, 200, margin=(10, 10, 20, 40))
    assert [a.state for a in chart.areas] == ["success", "smart_pending"]  # finished at the bottom
    middle = (40 + 590) / 2
    xs = {x for a in chart.areas for x, _ in polygon(a)}
    assert xs == {middle - charts.ONE_POINT_HALF_WIDTH, middle + charts.ONE_POINT_HALF_WIDTH}
    success, pending = (polygon(a) for a in chart.areas)
    y = charts.linear(0, 5, 180, 10)  # 4 tasks: the top is the nice ceiling 5
    assert {p[1] for p in success} == {y(0), y(3)} and {p[1] for p in pending} == {y(3), y(4)}
    assert chart.x_ticks == [(middle, "06:00:00")] and chart.y_ticks[-1] == (10, "5")


def test_zero_counts_stay_on_the_axis() -> None:
    chart = charts.stacked_chart([(T, {"success": 0}), (T + timedelta(minutes=1), {"success": 0})], 600, 200)
    assert all(y == chart.bottom for x, y in polygon(chart.areas[0]))


def test_stacked_bands_span_the_time_axis_and_stack() -> None:
    history = [(T + timedelta(minutes=m), {"success": m, "smart_pending": 10 - m}) for m in range(11)]
    chart = charts.stacked_chart(history, 1000, 300, margin=(10, 10, 20, 50))
    success, pending = (polygon(a) for a in chart.areas)
    assert min(x for x, _ in success) == 50 and max(x for x, _ in success) == 990
    assert all(abs(y - 10) < 0.1 for _, y in pending[:11])  # the stack's top is 10 all along: the chart's top
    assert [label for _, label in chart.x_ticks] == ["06:00", "06:02", "06:05", "06:07", "06:10"]
    long = [(T, {"success": 1}), (T + timedelta(days=2), {"success": 2})]
    assert charts.stacked_chart(long, 600, 200).x_ticks[0][1] == "11-23 06:00"


def test_time_ticks_show_seconds_for_a_short_span_and_never_repeat() -> None:
    assert [label for _, label in charts.time_ticks(T, T + timedelta(seconds=8), 0, 100)] == [
        "06:00:00",
        "06:00:02",
        "06:00:04",
        "06:00:06",
        "06:00:08",
    ]
    assert [label for _, label in charts.time_ticks(T, T + timedelta(seconds=2), 0, 100)] == [
        "06:00:00",
        "06:00:01",
        "06:00:02",
    ]
    assert [x for x, _ in charts.time_ticks(T, T + timedelta(minutes=20), 0, 100)] == [0, 25, 50, 75, 100]


def test_state_order_puts_finished_states_first_and_unknown_last() -> None:
    assert charts.ordered_states(["smart_pending", "weird", "success", "none", "failed"]) == [
        "success",
        "failed",
        "smart_pending",
        "none",
        "weird",
    ]
    assert charts.state_colour("success") != charts.state_colour("failed")


def test_bars_scale_to_the_largest_and_never_vanish() -> None:
    bars = charts.hbars([("a", 1000), ("b", 500), ("c", 1), ("d", 0)], 300)
    assert [b.length for b in bars] == [300, 150, 1.0, 0.0]
    assert charts.hbars([], 300) == [] and charts.hbars([("z", 0)], 300)[0].length == 0


def lease(lo: int, hi: int, owner: str | None, epoch: int = 1, expired: bool = False) -> report.LeaseStatus:
    return report.LeaseStatus(lo, hi, owner, epoch, None, None, expired)


def test_the_strip_covers_0_to_limit_once_with_gaps_shown() -> None:
    segments = charts.strip_segments(
        [lease(2500, 5000, "b", 3, True), lease(0, 2500, "a"), lease(7500, 10000, None, 0)], 10000, 1000
    )
    assert [(s.lo, s.hi, s.lease, s.owner) for s in segments] == [
        (0, 2500, True, "a"),
        (2500, 5000, True, "b"),
        (5000, 7500, False, None),
        (7500, 10000, True, None),
    ]
    assert [(s.x, s.width) for s in segments] == [(0, 250), (250, 250), (500, 250), (750, 250)]
    assert segments[1].expired and segments[1].epoch == 3
    assert segments[0].colour != segments[1].colour and segments[3].colour == charts.FREE
    assert segments[2].colour == charts.NO_LEASE


def test_the_strip_clamps_rows_outside_the_limit_and_overlaps() -> None:
    """Rows left by a larger shard_code_upper_limit, or overlapping while shard_ranges change."""
    segments = charts.strip_segments(
        [lease(0, 6000, "a"), lease(5000, 8000, "b"), lease(9000, 20000, "c"), lease(12000, 15000, "d")], 10000, 100
    )
    assert [(s.lo, s.hi, s.owner) for s in segments] == [
        (0, 6000, "a"),
        (6000, 8000, "b"),
        (8000, 9000, None),
        (9000, 10000, "c"),
    ]
    assert sum(s.width for s in segments) == 100
    assert [(s.lo, s.hi, s.lease) for s in charts.strip_segments([], 10, 100)] == [(0, 10, False)]


def test_owner_colours_are_distinct_on_a_page() -> None:
    colours = charts.owner_colours([f"w{i}" for i in range(len(charts.PALETTE))] + [None, "w0"])
    assert len(set(colours.values())) == len(charts.PALETTE) and None not in colours


def test_buckets_are_floored_to_the_interval() -> None:
    assert bucket_of(datetime(2026, 11, 23, 6, 0, 59, 999999, tzinfo=UTC), 60) == datetime(
        2026, 11, 23, 6, 0, tzinfo=timezone.utc
    )
    assert bucket_of(datetime(2026, 11, 23, 6, 7, 30, tzinfo=UTC), 300) == datetime(
        2026, 11, 23, 6, 5, tzinfo=timezone.utc
    )
    assert bucket_of(datetime(2026, 11, 23, 6, 0, 12, tzinfo=UTC), 7.5) == datetime(
        2026, 11, 23, 6, 0, 7, 500000, tzinfo=timezone.utc
    )


def test_samples_become_one_point_per_bucket() -> None:
    rows = [(T, "smart_pending", 2), (T, "success", 1), (T + timedelta(minutes=1), "success", 3)]
    assert series(rows) == [(T, {"smart_pending": 2, "success": 1}), (T + timedelta(minutes=1), {"success": 3})]
    assert series([]) == []


def test_waiting_checks_become_tables() -> None:
    named = json.dumps({"partition_names": ["db.a/ds=1", "db.b/ds=1", "db.a/ds=2"]})
    hive = json.dumps({"table": "db.a", "partition": {"ds": "1"}})
    checks = [
        ("NamedHivePartitionSensor", named, 3),
        ("HivePartitionSensor", hive, 2),
        ("SuccessFileSensor", json.dumps({"path": "/x/_SUCCESS"}), 4),
        ("Custom", "not json", 1),
        ("Custom", json.dumps(["a list"]), 1),
    ]
    assert waiting_per_table(checks) == [("db.a", 5), ("(SuccessFileSensor)", 4), ("db.b", 3), ("(Custom)", 2)]
    assert tables_of({"partition_names": [1, None, ""]}) == [] and tables_of({"table": 3}) == []


def test_what_a_landing_waited_for_is_one_short_line() -> None:
    assert waited_for("N", json.dumps({"partition_names": ["db.a/ds=1", "db.b/ds=1"]})) == "db.a/ds=1, db.b/ds=1"
    assert waited_for("H", json.dumps({"table": "db.a", "partition": {"ds": "1", "hr": "00"}})) == "db.a (ds=1/hr=00)"
    assert waited_for("H", json.dumps({"table": "db.a", "partition": {}})) == "db.a (any partition)"
    assert waited_for("S", json.dumps({"path": "/data/_SUCCESS"})) == "/data/_SUCCESS"
    assert waited_for("Custom", json.dumps({"n": 1})) == 'Custom {"n": 1}'
    assert waited_for("Custom", None) == "Custom" and waited_for(None, "{") == "?"
    line = waited_for("N", json.dumps({"partition_names": [f"db.t/ds={i}" for i in range(100)]}))
    assert len(line) == 160 and line.endswith("…")


def test_every_branch_of_the_page_renders_the_status_numbers(tmp_path) -> None:
    """A status with zombies, a stale worker, a worker that never reported, warnings and no ratio: the page
    renders it (no database here) and states its numbers."""
    from smartsensor.api.page import render_login, render_page
    from tests.support.common import make_cfg
    from tests.support.page_dom import external_references, page_numbers, status_numbers

    cfg = make_cfg(tmp_path, f"sqlite:///{tmp_path / 'none.db'}")
    status = report.StatusReport(
        tasks_by_state={"running": 2, "none": 1},
        waiting=0,
        distinct_hashes=0,
        dedup_ratio=None,
        stranded=0,
        problems=("worker w: its last round failed: <boom>",),
        shards=(report.ShardRow(0, 10000, 0, 0),),
        leases=(report.LeaseStatus(0, 10000, "w", 7, expires_at=None, expires_in=None, expired=True),),
        lease_workers=(report.LiveWorker("w", hostname=None, pid=None, heartbeat_age=None, stale=True, ranges=(0,)),),
        workers=(
            report.WorkerRoundRow(
                "w",
                pid=3,
                shard_min=0,
                shard_max=10000,
                last_round_at=None,
                age_seconds=None,
                last_round_seconds=None,
                last_round={"marked": {"success": 2}},
            ),
        ),
        stuck=report.Stuck(60.0, report.StuckCount(0, None), report.StuckCount(0, None)),
        zombies=(report.Zombie("d", "t", datetime(2026, 11, 22, tzinfo=UTC), hostname=None, heartbeat_age=7300.0),),
    )
    data = {
        "status": status,
        "history": [(T, {"running": 2, "none": 1})],
        "samples": 0,
        "tables": [],
        "table_count": 0,
        "landings": [],
        "history_interval": 60.0,
        "history_retention": 604800.0,
        "now": T,
    }
    html = render_page(data, cfg)
    assert page_numbers(html) == status_numbers(status.as_json())
    assert external_references(html) == [] and "&lt;boom&gt;" in html and "2.0 h" in html
    assert 'data-zombie="d.t"' in html and "stopped heartbeating" in html and "no task has succeeded yet" in html
    assert 'role="alert"' not in render_login(None) and "wrong &amp; right" in render_login("wrong & right")
