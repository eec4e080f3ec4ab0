"""Commands that run the service: `worker`, `workers`, `scheduler`, `status`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from smartsensor.cli.app import INTERVAL, App, UserError, global_args

EXIT_ROUND_FAILED = 1
EXIT_NOTHING_WRITTEN = 4  # worker --once: the round lost its lease, or claimed no range at all


@click.command()
@click.option(
    "--shard-min",
    type=click.IntRange(min=0),
    default=None,
    help="Pin: first shardcode owned (inclusive). Default: claim leases.",
)
@click.option("--shard-max", type=click.IntRange(min=1), default=None, help="Pin: end of the range (exclusive).")
@click.option(
    "--once",
    is_flag=True,
    help="Run one round and exit (leased: claim, round, release). Exit status 1: "
    "the round failed; 4: it claimed no range or lost its lease, so it wrote nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per round.")
@click.option(
    "--interval",
    type=INTERVAL,
    default=None,
    help="Seconds between rounds, 0.05-86400 (default [smart_sensor] poke_interval).",
)
@click.option(
    "--metrics-port", type=click.IntRange(1, 65535), default=None, help="Serve Prometheus metrics on 127.0.0.1:PORT."
)
@click.option("--no-signals", is_flag=True, help="Do not listen for landing signals.")
@click.pass_obj
def worker(
    app: App,
    shard_min: int | None,
    shard_max: int | None,
    once: bool,
    as_json: bool,
    interval: float | None,
    metrics_port: int | None,
    no_signals: bool,
) -> None:
    """Run a worker until SIGTERM: the ranges whose leases it claims (default, with failover), or a pinned range."""
    from smartsensor.roots.worker import build_worker
    from smartsensor.sensors.base import import_sensor_modules, smart_class_names

    limit = app.cfg.shard_code_upper_limit
    engine = app.engine()
    if (shard_min is None) != (shard_max is None):
        raise UserError("give both --shard-min and --shard-max (a pinned range), or neither (leases)")
    if shard_min is not None and shard_max is not None:
        if not 0 <= shard_min < shard_max <= limit:
            raise UserError(f"shard range [{shard_min}, {shard_max}) must satisfy 0 <= min < max <= {limit}")
    failures = import_sensor_modules(app.cfg.sensor_modules)
    for module, why in failures.items():
        click.echo(
            f"WARNING: [smart_sensor] sensor_modules: {module!r} cannot be imported on this host ({why}); "
            f"tasks of its classes wait (within their own timeouts) until it can, every other task is "
            f"served",
            err=True,
        )
    unknown = sorted(set(app.cfg.sensors_enabled) - smart_class_names())
    if unknown:
        click.echo(
            f"WARNING: [smart_sensor] sensors_enabled names {', '.join(unknown)}, which no built-in or "
            f"configured sensor module defines as a @smart_eligible class"
            + (" (perhaps the module that fails to import)" if failures else ""),
            err=True,
        )
    results = []

    def emit(result) -> None:  # type: ignore[no-untyped-def]
        if once:
            results.append(result)
        if as_json:
            click.echo(result.to_json())
        else:
            marked = ", ".join(f"{k} {v}" for k, v in sorted(result.marked.items())) or "nothing"
            click.echo(
                f"[{result.shard_min},{result.shard_max}) loaded {result.loaded}, "
                f"{result.distinct_hashes} distinct, poked {result.groups_poked}, catalog calls "
                f"{result.catalog_calls}, marked {marked}, {result.seconds:.2f} s"
                + (f" ERROR {result.error}" if result.error else "")
            )
        sys.stdout.flush()

    pinned = (shard_min, shard_max) if shard_min is not None and shard_max is not None else None
    status = build_worker(
        engine,
        app.cfg,
        emit,
        pinned=pinned,
        once=once,
        interval=interval or app.cfg.poke_interval,
        metrics_port=metrics_port,
        wake_ups=not no_signals,
    ).start()
    if status:
        click.echo(
            "Error: the Spark driver JVM died; the worker stopped and released its leases "
            "(restart it, or run it under `smartsensor workers`, which does)",
            err=True,
        )
        sys.exit(status)
    if once:
        _report_once(results)


def _report_once(results: list[Any]) -> None:
    """`worker --once` says what its round did when that was not a normal round, with a distinct exit status."""
    if not results:
        click.echo(
            "Error: this worker claimed no shard range: every range is leased by a live worker (they check "
            "those tasks); nothing was checked or written",
            err=True,
        )
        sys.exit(EXIT_NOTHING_WRITTEN)
    failed = [r for r in results if r.error]
    if failed:
        click.echo(f"Error: the round failed: {failed[0].error}", err=True)
        sys.exit(EXIT_ROUND_FAILED)
    fenced = [r for r in results if r.fenced_out]
    if fenced:
        click.echo(
            "Error: this worker lost its lease during the round (another worker took the range over, e.g. "
            "after a pause past lease_timeout): its results were not written; the new owner checks these "
            "tasks",
            err=True,
        )
        sys.exit(EXIT_NOTHING_WRITTEN)


@click.command()
@click.option(
    "-n", "count", type=click.IntRange(1, 1000), default=None, help="Worker processes (default: one per shard range)."
)
@click.option("--interval", type=INTERVAL, default=None, help="Seconds between rounds (0.05-86400).")
@click.option("--json", "as_json", is_flag=True, help="Workers print one JSON object per round.")
@click.option("--pinned", is_flag=True, help="Fixed contiguous blocks of the ranges instead of leases.")
@click.pass_obj
def workers(app: App, count: int | None, interval: float | None, as_json: bool, pinned: bool) -> None:
    """Start N shard workers (leases: extras stand by); restart crashed ones; stop all on SIGTERM."""
    from smartsensor.service.supervisor import supervise_workers

    app.engine()  # fail fast with a clear message if the DB is not ready
    if count is not None and count < 1:
        raise UserError("-n must be at least 1")
    extra = (["--interval", str(interval)] if interval else []) + (["--json"] if as_json else [])
    supervise_workers(app.cfg, count, global_args(app), extra_args=extra, pinned=pinned)


@click.command()
@click.option("--once", is_flag=True, help="One pass, wait for the classic tasks it started, exit.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per pass.")
@click.pass_obj
def scheduler(app: App, once: bool, as_json: bool) -> None:
    """Re-queue retries after retry_delay; run scheduled tasks in classic mode (at most [scheduler] parallelism);
    end classic runs that stopped heartbeating (zombies)."""
    from smartsensor.roots.scheduler import build_scheduler

    def emit(summary: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps(summary))
        elif any(
            summary.get(k)
            for k in (
                "requeued_smart",
                "requeued_classic",
                "failed_bad_rows",
                "zombies",
                "launched",
                "finished",
                "error",
            )
        ):
            click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))
        sys.stdout.flush()

    build_scheduler(app.engine(), app.cfg, global_args(app)).run(once, emit)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(app: App, as_json: bool) -> None:
    """Tasks per state and shard range, dedup ratio, workers' last rounds."""
    from smartsensor.adapters.sql.status_store import SqlStatusReads
    from smartsensor.service.status import collect_status, status_lines

    data = collect_status(SqlStatusReads(app.engine()), app.cfg)
    if as_json:
        click.echo(json.dumps(data.as_json()))
        return
    for line in status_lines(data, app.cfg.shard_code_upper_limit):
        click.echo(line)
