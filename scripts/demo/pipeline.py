#!/usr/bin/env python3
"""The landing pipeline: a real PySpark job that lands one Hive partition per hour, then a _SUCCESS file.

    python -m scripts.demo.pipeline --table demo.events --ds 2026-11-22 --hours 0-23 --every 2 --rows 10

For each hour it overwrites ``PARTITION (ds='<ds>', hr='HH')`` of every table given (``--table`` also
takes a comma list, landed hour by hour across the tables), prints ``landed db.t/ds=<ds>/hr=HH`` and
``landed-at <ISO time, UTC> db.t/ds=<ds>/hr=HH`` (when the insert returned), and sleeps ``--every``
seconds before the next hour. At the end it creates an empty ``<table location>/ds=<ds>/_SUCCESS``
through Spark's Hadoop FileSystem and prints
``success-file <path>``. The tables (``id BIGINT, payload STRING``, partitioned by ds and hr,
Parquet) and their databases are created when missing. Point ``[spark] metastore_uris`` at a
metastore service (``smartsensor metastore start``) so other processes see the partitions.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import date, datetime, timezone
from typing import Any

from smartsensor.adapters.spark import get_spark
from smartsensor.config import ConfigError, load_config

NAME = re.compile(r"[A-Za-z0-9_]+")
DS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
HR = re.compile(r"[0-9]{2}")


# -- validation: nothing reaches SQL unless it matched one of the patterns above ----------------------


def parse_table(text: str) -> tuple[str, str]:
    """``db.table`` → (db, table), both matching ``[A-Za-z0-9_]+``."""
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(NAME.fullmatch(p) for p in parts):
        raise ValueError(f"table {text!r} must be db.table with names matching [A-Za-z0-9_]+")
    return parts[0], parts[1]


def parse_ds(text: str) -> str:
    """A YYYY-MM-DD date that exists."""
    if not DS.fullmatch(text):
        raise ValueError(f"ds {text!r} must be YYYY-MM-DD")
    date.fromisoformat(text)  # rejects 2026-13-45
    return text


def parse_hours(text: str) -> list[int]:
    """``A-B`` (inclusive) and/or a comma list of hours 0..23, e.g. ``0-3,7``; ordered, duplicates dropped."""
    hours: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"hours {text!r}: {item!r} is not an hour or a range A-B")
        first, last = int(lo), int(hi) if sep else int(lo)
        if not 0 <= first <= last <= 23:
            raise ValueError(f"hours {text!r}: {item!r} must lie within 0-23 with A <= B")
        hours += [h for h in range(first, last + 1) if h not in hours]
    return hours


def _check_hr(hr: int | str) -> str:
    text = f"{hr:02d}" if isinstance(hr, int) else hr
    if not HR.fullmatch(text) or int(text) > 23:
        raise ValueError(f"hr {hr!r} must be an hour 0..23 (two digits)")
    return text


def _check_names(db: str, table: str) -> None:
    for name in (db, table):
        if not NAME.fullmatch(name):
            raise ValueError(f"name {name!r} must match [A-Za-z0-9_]+")


# -- Spark ------------------------------------------------------------------------------------------


def ensure_table(spark: Any, db: str, table: str) -> None:
    """Create the database and the partitioned Parquet table if missing."""
    _check_names(db, table)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS `{db}`.`{table}` (id BIGINT, payload STRING) "
        "PARTITIONED BY (ds STRING, hr STRING) STORED AS PARQUET"
    )


def land_partition(spark: Any, db: str, table: str, ds: str, hr: int | str, rows: int) -> str:
    """Overwrite partition (ds, hr) of ``db.table`` with ``rows`` generated rows; return its name."""
    _check_names(db, table)
    ds, hr = parse_ds(ds), _check_hr(hr)
    view = f"pipeline_rows_{db}_{table}"
    data = spark.range(int(rows)).selectExpr("id", f"concat('{ds}T{hr}:', CAST(id AS STRING)) AS payload")
    data.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"INSERT OVERWRITE TABLE `{db}`.`{table}` PARTITION (ds='{ds}', hr='{hr}') SELECT id, payload FROM `{view}`"
        )
    finally:
        spark.catalog.dropTempView(view)
    return f"{db}.{table}/ds={ds}/hr={hr}"


def table_location(spark: Any, db: str, table: str) -> str:
    """The table's storage location as the metastore records it (e.g. ``file:/…/demo.db/events``)."""
    _check_names(db, table)
    for row in spark.sql(f"DESCRIBE FORMATTED `{db}`.`{table}`").collect():
        if row["col_name"].strip() == "Location":
            return row["data_type"].strip()
    raise RuntimeError(f"DESCRIBE FORMATTED {db}.{table} shows no Location")


def write_success_file(spark: Any, db: str, table: str, ds: str) -> str:
    """Create an empty ``<location>/ds=<ds>/_SUCCESS`` in Spark's Hadoop FileSystem; return its full path."""
    ds = parse_ds(ds)
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{table_location(spark, db, table)}/ds={ds}/_SUCCESS")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.create(path, True).close()
    return str(fs.makeQualified(path).toString())


def quiet_committer(spark: Any) -> None:
    # The Hadoop committer drops its own _SUCCESS into the table folder on every insert;
    # only our explicit one, written once the whole day has landed, may signal completion.
    spark.sparkContext._jsc.hadoopConfiguration().set("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")


# -- command line -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True, help="db.table, or a comma list of them")
    p.add_argument("--ds", required=True, help="partition date YYYY-MM-DD")
    p.add_argument("--hours", default="0-23", help="A-B inclusive or a comma list (default 0-23)")
    p.add_argument("--every", type=float, default=2.0, help="seconds between hours (default 2)")
    p.add_argument("--rows", type=int, default=10, help="rows per partition (default 10)")
    p.add_argument("--config", help="smartsensor config file (default: the usual lookup)")
    p.add_argument("--no-signal", action="store_true", help="do not send landing signals to the workers")
    p.add_argument("--no-success-file", action="store_true", help="do not write ds=<ds>/_SUCCESS at the end")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate the options (argparse exits with status 2 on a bad value)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.tables = [parse_table(t) for t in args.table.split(",")]
        args.ds = parse_ds(args.ds)
        args.hour_list = parse_hours(args.hours)
    except ValueError as exc:
        parser.error(str(exc))
    if args.every < 0 or args.rows < 0:
        parser.error("--every and --rows must not be negative")
    return args


class Signaller:
    """Sends a landing signal after each partition (a hint that wakes the owning worker at once).

    Best effort: if the metadata DB is not reachable the pipeline keeps landing and says so once.
    """

    def __init__(self, cfg: Any, enabled: bool) -> None:
        self.engine = None
        if not enabled:
            return
        try:
            from smartsensor.adapters.sql.engine import current_revision, make_engine

            engine = make_engine(cfg.sql_alchemy_conn)
            if current_revision(engine) is None:
                print("pipeline: metadata DB not initialised; no landing signals", file=sys.stderr, flush=True)
                return
            self.engine = engine
        except Exception as exc:  # noqa: BLE001 - signals are optional
            print(f"pipeline: no landing signals ({exc})".splitlines()[0], file=sys.stderr, flush=True)

    def send(self, name: str) -> None:
        if self.engine is None:
            return
        from smartsensor.adapters.sql.signals import SqlLandingSignals
        from smartsensor.service.signals import send_signal

        try:
            send_signal(SqlLandingSignals(self.engine), name)
        except Exception as exc:  # noqa: BLE001 - signals are optional
            print(f"pipeline: signal for {name} failed: {exc}".splitlines()[0], file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> None:
    """Land every (hour, table) partition in order, each followed by a signal, then the _SUCCESS files."""
    cfg = load_config(args.config)
    signaller = Signaller(cfg, not args.no_signal)
    spark = get_spark(cfg)
    quiet_committer(spark)
    for db, table in args.tables:
        ensure_table(spark, db, table)
    for i, hr in enumerate(args.hour_list):
        if i:
            time.sleep(args.every)
        for db, table in args.tables:
            name = land_partition(spark, db, table, args.ds, hr, args.rows)
            at = datetime.now(timezone.utc).isoformat()
            signaller.send(name)
            print(f"landed {name}", flush=True)
            print(f"landed-at {at} {name}", flush=True)
    if not args.no_success_file:
        for db, table in args.tables:
            print(f"success-file {write_success_file(spark, db, table, args.ds)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 on success, 1 with a one-line error otherwise."""
    args = parse_args(argv)
    try:
        run(args)
    except (ConfigError, ValueError) as exc:
        print(f"pipeline: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - one line for the operator; Spark's traces are long
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"pipeline: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
