"""The benchmark's printed tables (bench.py measures, this shows): per workload, the strategies side by side, the
round as it runs now, the catalog term and the metastore's load, the profiles; over the workloads, the growth."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from scripts.bench.measures import ALL_STRATEGIES, CATALOG_ROUNDS, IN_PROCESS, Measure, console


def _calls(m: Measure) -> str:
    return f"{m.catalog_calls:,.0f}" + (f" +{m.schema_calls:,.0f} types" if m.schema_calls else "")


def _per_call_ms(m: Measure) -> float | None:
    return 1000 * m.catalog_seconds / m.catalog_calls if m.catalog_calls else None


def print_table(report: dict[str, Any]) -> None:
    res: dict[str, tuple[Measure, Measure]] = report["_measures"]
    ours_w, ours_l = res["batched"]
    floor_ms = 1000 * report["metastore_floor_seconds"]
    t = Table(
        title=f"{report['workload']}: {report['tasks']:,} tasks / {report['partitions']:,} partitions / "
        f"{report['tables']} tables, {report['shards']} shards, {report['landed_partitions']:,} landed"
    )
    for col in (
        "strategy",
        "catalog calls/round",
        "DB stmts/round",
        "round s",
        "excl. catalog s",
        "ms/call",
        "landing: calls",
        "stmts",
        "s",
        "ms/call",
        "vs floor",
        "marked",
        "peak RSS MB",
        "calls vs ours",
        "round vs incremental",
    ):
        t.add_column(col, justify="right" if col != "strategy" else "left")
    sample, rss_of = report["classic_sample"], report["worker_rss"]
    spark_rss, thrift_rss = (f"{rss_of[b]['peak_rss_mb']:,.0f}" if b in rss_of else "-" for b in ("spark", "thrift"))
    fastest = res["incremental"][0].wall if "incremental" in res else None
    for name in ALL_STRATEGIES:
        if name not in res:
            continue
        w, ld = res[name]
        ext = (
            " (extrap.)"
            if name == "classic"
            else f" ({w.extra['processes']} proc.)"
            if name == "fleet"
            else f" (sim., {w.extra['sample']:,} real)"
            if name == "triggerer" and w.extrapolated
            else " (sim.)"
            if name == "triggerer"
            else f" (x{w.extra.get('parallelism', '?')})"
            if name == "thrift-parallel"
            else ""
        )
        rss = {
            "classic": f"{sample.get('process_peak_rss_mb', 0) * report['tasks']:,.0f} (extrap.)",
            "per-hash": spark_rss,
            "batched": spark_rss,
            "incremental": thrift_rss,
            "thrift-parallel": thrift_rss,
            "metastore-db": "-",
            "metastore-db-lookup": "-",
            "fleet": f"{w.extra.get('peak_rss_mb_max', 0):,.0f} each, {w.extra.get('peak_rss_mb_sum', 0):,.0f} all",
            "triggerer": f"{w.extra.get('peak_rss_mb', 0):,.0f} (sim.)",
        }[name]
        wall = f"{w.wall:.1f}/task" if name == "classic" else f"{w.wall:.2f}"
        excl = "-" if name in ("classic", "triggerer") else f"{w.wall_excl_catalog:.2f}"
        per_call, lper_call = (None, None) if name in ("classic", "fleet") else (_per_call_ms(w), _per_call_ms(ld))
        lwall = "-" if name == "classic" else f"{ld.wall:.2f}"
        ratio = f"{w.catalog_calls / ours_w.catalog_calls:,.3g}x" if ours_w.catalog_calls else "-"
        vs = "-" if name == "classic" or not fastest else f"{w.wall / fastest:.1f}x"
        t.add_row(
            name + ext,
            _calls(w),
            f"{w.db_statements:,.0f}",
            wall,
            excl,
            "-" if per_call is None else f"{per_call:.1f}",
            _calls(ld),
            f"{ld.db_statements:,.0f}",
            lwall,
            "-" if lper_call is None else f"{lper_call:.1f}",
            "-"
            if lper_call is None or name in ("triggerer", "metastore-db", "metastore-db-lookup")
            else f"{lper_call / floor_ms:.1f}x",
            f"{ld.marked:,}",
            rss,
            ratio,
            vs,
        )
    t.caption = (
        "Steady-state rounds: sensors rebuilt and partition types read once before (a worker's first "
        "round does this; +N types would count look-ups inside a round). peak RSS: a real `worker --once` over "
        + (
            f"every shard on that backend, its JVM included (spark: JVM {rss_of['spark']['jvm']}; thrift: JVM "
            f"{rss_of['thrift']['jvm']})"
            if rss_of
            else "every shard on that backend, measured on the first workload only (--worker-rss-once)"
        )
        + "; classic: per process x tasks; triggerer: the simulation's own process "
        f"(Airflow's imports not included). Metastore floor per full listing (fastest of 3 on one warm "
        f"connection, median over tables): {floor_ms:.1f} ms; 'vs floor' = landing ms/call / floor. "
        "fleet: real `worker --once` processes (thrift) owning equal shares of the shards, started together; "
        "round s = the slowest process's first round (cold: sensors rebuilt, types read), calls summed. "
        "per-hash, batched, incremental, thrift-parallel, metastore-db: the round as it runs now, its index built "
        "before (timed apart); metastore-db: one statement per round, so 'ms/call' is its whole catalog term. "
        "triggerer: simulated, DB writes not counted"
        + (
            f"; rounds extrapolated from {res['triggerer'][0].extra['sample']:,} real pokes"
            if "triggerer" in res and res["triggerer"][0].extrapolated
            else ""
        )
        + "."
    )
    console.print(t)
    lat = report.get("latency")
    if lat:
        lt = Table(
            title=f"batched, leased worker loop: landing → success ({len(lat['signal']['samples'])} samples each)"
        )
        for col in ("", "p50 s", "p95 s", "samples s"):
            lt.add_column(col, justify="right" if col else "left")
        lt.add_row(
            "with a landing signal (task poke_interval 600 s)",
            f"{lat['signal']['p50']:.3f}",
            f"{lat['signal']['p95']:.3f}",
            ", ".join(f"{x:.2f}" for x in lat["signal"]["samples"]),
        )
        lt.add_row(
            f"without (task poke_interval {lat['poll_interval']:g} s)",
            f"{lat['no_signal']['p50']:.3f}",
            f"{lat['no_signal']['p95']:.3f}",
            ", ".join(f"{x:.2f}" for x in lat["no_signal"]["samples"]),
        )
        console.print(lt)
        console.print(f"median busy round of that loop: {lat['round_seconds_median']} s")


def print_index(report: dict[str, Any]) -> None:
    """Per in-process strategy: its index build, its all-due round per check, incremental's quiet round and
    reconciliation, and the landing round's marking beside PostgreSQL's raw-UPDATE floor."""
    res: dict[str, tuple[Measure, Measure]] = report["_measures"]
    names = [n for n in IN_PROCESS if n in res]
    if not names:
        return
    t = Table(title=f"{report['workload']}: the round as it runs now (one process, {report['shards']} ranges)")
    for col in (
        "strategy",
        "index build s",
        "waiting round s (all due)",
        "excl. catalog s",
        "catalog s",
        "µs/check excl. catalog",
        "quiet round s (none due)",
        "quiet stmts",
        "reconcile s (stmts)",
        "landing round s",
        "marked",
        "marking s",
        "marking µs/row",
        "raw UPDATE floor µs/row",
    ):
        t.add_column(col, justify="right" if col != "strategy" else "left")
    floor = _floor(res)
    for name in names:
        w, ld = res[name]
        checks = w.extra.get("checks") or report["partitions"] or 1
        quiet = "quiet_round_seconds" in w.extra
        write_s = ld.extra.get("write_seconds")
        build_s = w.extra.get("index_build_seconds")
        t.add_row(
            name,
            "-" if build_s is None else f"{build_s:.2f}",
            f"{w.wall:.2f}",
            f"{w.wall_excl_catalog:.2f}",
            f"{w.catalog_seconds:.2f}",
            f"{1e6 * w.wall_excl_catalog / checks:.1f}",
            f"{w.extra['quiet_round_seconds']:.3f}" if quiet else "-",
            f"{w.extra['quiet_round_statements']}" if quiet else "-",
            f"{w.extra['reconcile_seconds']:.3f} ({w.extra['reconcile_statements']})" if quiet else "-",
            f"{ld.wall:.2f}",
            f"{ld.marked:,}",
            f"{write_s:.2f}" if write_s is not None else "-",
            f"{1e6 * write_s / ld.marked:.1f}" if write_s and ld.marked else "-",
            f"{floor['us_per_row']}" if floor.get("us_per_row") else "-",
        )
    t.caption = (
        "index build: each range's index read from the database before the round (a worker's first round, a "
        "takeover), timed apart. marking s: the landing round's writes summed over its ranges. "
        f"Raw floor: UPDATE … SET state, end_date, updated_at WHERE hashcode = ANY(…) of the same "
        f"{floor.get('rows', 0):,} rows, no range, guard or fence, fastest of 2: {floor.get('seconds')} s."
    )
    console.print(t)


def _work(name: str, m: Measure) -> str:
    """The metastore's own work in a round: thrift calls (listings + column-type reads), or our statements."""
    if name.startswith("metastore-db"):
        return f"{m.extra.get('metastore_statements', m.catalog_calls + m.schema_calls):,} stmt"
    return f"{m.catalog_calls + m.schema_calls:,.0f} calls"


def _db(m: Measure, key: str, fmt: str = "{:,.1f}") -> str:
    load = m.extra.get("metastore_db")
    return "-" if not load or load.get(key) is None else fmt.format(load[key])


def _vs(m: Measure, base: Measure | None, key: str = "exec_ms") -> str:
    load, base_load = m.extra.get("metastore_db"), base.extra.get("metastore_db") if base else None
    if not load or not base_load or load.get(key) is None or not base_load.get(key):
        return "-"
    return f"{load[key] / base_load[key]:.3f}x"


def _floor(res: dict[str, tuple[Measure, Measure]]) -> dict[str, Any]:
    return next((res[n][1].extra["raw_floor"] for n in IN_PROCESS if n in res and "raw_floor" in res[n][1].extra), {})


def print_metastore_load(report: dict[str, Any], skipped: dict[str, str], load_unavailable: str | None) -> None:
    """Per catalog strategy and round: the round beside its catalog term, the metastore's own work (calls or
    statements) and its database's time (pg_stat_statements), and on the landing round the marking beside
    PostgreSQL's raw-UPDATE floor."""
    res: dict[str, tuple[Measure, Measure]] = report["_measures"]
    names = [n for n in CATALOG_ROUNDS if n in res]
    base_name = "incremental" if "incremental" in res else None  # the thrift round the others are compared with
    floor = _floor(res)
    for kind, title in ((0, "waiting round, every check due"), (1, "landing round")):
        t = Table(
            title=f"{report['workload']}: {title}: the catalog term and the metastore's load "
            f"({report['tables']:,} tables, {report['partitions']:,} checks, one process)"
        )
        cols = ["strategy", "round s", "catalog s", "round / catalog", "metastore work", "metastore DB stmts"]
        cols += ["DB exec ms", "DB plan ms", "DB CPU ms", "service CPU ms", f"DB exec vs {base_name or 'thrift'}"]
        cols += ["DB CPU vs it"]
        if kind == 1:
            cols += ["marked", "finish s", "finish µs/row", "raw UPDATE floor µs/row", "finish vs floor"]
        for col in cols:
            t.add_column(col, justify="left" if col == "strategy" else "right")
        base = res[base_name][kind] if base_name else None
        for name in names:
            m = res[name][kind]
            row = [
                name,
                f"{m.wall:.3f}",
                f"{m.catalog_seconds:.3f}",
                f"{m.wall / m.catalog_seconds:.2f}x" if m.catalog_seconds else "-",
                _work(name, m),
                _db(m, "statements", "{:,}"),
                _db(m, "exec_ms"),
                _db(m, "plan_ms"),
                _db(m, "backend_cpu_ms", "{:,.0f}"),
                _db(m, "service_cpu_ms", "{:,.0f}"),
                _vs(m, base),
                _vs(m, base, "backend_cpu_ms"),
            ]
            if kind == 1:
                finish_s = m.extra.get("finish_wall_seconds")
                us = 1e6 * finish_s / m.marked if finish_s and m.marked else None
                fus = floor.get("us_per_row")
                row += [
                    f"{m.marked:,}",
                    "-" if finish_s is None else f"{finish_s:.2f}",
                    "-" if us is None else f"{us:.1f}",
                    "-" if not fus else f"{fus}",
                    "-" if us is None or not fus else f"{us / fus:.2f}x",
                ]
            t.add_row(*row)
        t.caption = (
            "metastore work: thrift calls (listings + column-type reads) or our statements (metastore-db). "
            "metastore DB: what the metastore's own PostgreSQL database executed during the round "
            "(pg_stat_statements: statements incl. BEGIN/ROLLBACK, SET and pings; executor and planner ms, wall time "
            "there, so CPU plus any wait for a core, parsing not included; on thrift the service's JDBC queries, on "
            "metastore-db ours). DB CPU: user + system CPU of that database's server processes over the round (/proc, "
            "10 ms ticks); service CPU: the metastore service's JVM's. 'vs' columns: against the thrift round of the "
            "same kind. finish: the wall time of the round's finish step (decide, mark, update the index; "
            "write_threads ranges at once), the landing round's marking part. "
            + (f"Not measured: {load_unavailable}. " if load_unavailable else "")
            + "".join(f"{n}: skipped: {why}. " for n, why in skipped.items())
            + _cold(res, kind)
            + (
                f"Raw UPDATE floor: the same {floor.get('rows', 0):,} rows marked by a plain UPDATE … WHERE hashcode "
                f"= ANY(…), fastest of 2: {floor.get('seconds')} s."
                if kind == 1 and floor
                else ""
            )
        )
        console.print(t)


def _cold(res: dict[str, tuple[Measure, Measure]], kind: int) -> str:
    """The caption's note of metastore-db's cold round (every due check looked up), timed before its waiting round."""
    cold = res["metastore-db"][0].extra.get("cold_round") if kind == 0 and "metastore-db" in res else None
    if not cold:
        return ""
    return (
        f"metastore-db follows its feed; its cold round (a process's first over these checks, and each verify, "
        f"every metastore_db_verify_seconds) took {cold['seconds']:.3f} s, catalog {cold['catalog_seconds']:.3f} s, "
        f"{cold['statements']} statement(s). "
    )


def print_profiles(report: dict[str, Any]) -> None:
    """``--profile``: metastore-db's rounds again under cProfile, and its statement under EXPLAIN ANALYZE."""
    res: dict[str, tuple[Measure, Measure]] = report["_measures"]
    if "metastore-db" not in res:
        return
    for kind, m in zip(("waiting round, every check due", "landing round"), res["metastore-db"], strict=True):
        prof = m.extra.get("profile")
        if not prof:
            continue
        console.print(
            f"[bold]{report['workload']}: metastore-db {kind}, again under cProfile[/bold]: {prof['seconds']:.2f} s "
            f"(catalog {prof['catalog_seconds']:.2f} s, {prof['marked']:,} marked; cProfile slows Python ~2x)"
        )
        for key in ("cumulative", "tottime"):
            console.print(f"top functions by {key}:", markup=False)
            console.print(prof[key], markup=False, highlight=False, soft_wrap=True)
        if "explain" in prof:
            console.print("its statement, EXPLAIN (ANALYZE, BUFFERS):", markup=False)
            console.print(prof["explain"], markup=False, highlight=False, soft_wrap=True)


def print_catalog_growth(reports: list[dict[str, Any]]) -> None:
    """The catalog term per strategy over the workloads: flat in tables or not (catalog s, the metastore's work and
    its database's time per round)."""
    names = [n for n in CATALOG_ROUNDS if all(n in r["_measures"] for r in reports)]
    g = Table(title="the catalog term over the workloads (one process; flat in tables = the same figure per row)")
    for col in (
        "strategy",
        "workload",
        "tables",
        "checks due",
        "waiting: catalog s",
        "ms/table",
        "landing: catalog s",
        "metastore work/round",
        "metastore DB stmts",
        "DB exec ms waiting",
        "DB exec ms landing",
        "DB CPU ms waiting",
        "DB CPU ms landing",
        "service CPU ms waiting",
        "DB exec µs/table",
        "catalog s vs first",
        "tables vs first",
    ):
        g.add_column(col, justify="left" if col in ("strategy", "workload") else "right")
    for name in names:
        first = reports[0]["_measures"][name][0]
        for r in reports:
            w, ld = r["_measures"][name]
            load = w.extra.get("metastore_db")
            g.add_row(
                name,
                r["workload"],
                f"{r['tables']:,}",
                f"{r['partitions']:,}",
                f"{w.catalog_seconds:.3f}",
                f"{1000 * w.catalog_seconds / r['tables']:.2f}",
                f"{ld.catalog_seconds:.3f}",
                _work(name, w),
                _db(w, "statements", "{:,}"),
                _db(w, "exec_ms"),
                _db(ld, "exec_ms"),
                _db(w, "backend_cpu_ms", "{:,.0f}"),
                _db(ld, "backend_cpu_ms", "{:,.0f}"),
                _db(w, "service_cpu_ms", "{:,.0f}"),
                "-" if not load or load["exec_ms"] is None else f"{1000 * load['exec_ms'] / r['tables']:,.1f}",
                f"{w.catalog_seconds / max(first.catalog_seconds, 1e-9):.1f}x",
                f"{r['tables'] / reports[0]['tables']:.1f}x",
            )
        g.add_section()
    console.print(g)


def print_over_workloads(reports: list[dict[str, Any]]) -> None:
    """The tables comparing the workloads (growth, and the catalog term's growth): with two workloads or more only."""
    if len(reports) > 1:
        print_growth(reports)
        print_catalog_growth(reports)


def print_growth(reports: list[dict[str, Any]]) -> None:
    """How our round grows from one workload to the next: time per task, per check and per table should stay flat.
    Of the incremental round (thrift) if every workload measured it, else of batched (Spark)."""
    name = "incremental" if all("incremental" in r["_measures"] for r in reports) else "batched"
    g = Table(title=f"{name}: growth over the workloads (waiting round; linear = flat per-unit columns)")
    for col in (
        "workload",
        "tasks",
        "checks",
        "tables",
        "round s",
        "excl. catalog s",
        "µs/task excl. catalog",
        "µs/check excl. catalog",
        "catalog s",
        "ms/table",
        "excl. catalog vs first",
        "checks vs first",
    ):
        g.add_column(col, justify="right")
    first = reports[0]["_measures"][name][0]
    for r in reports:
        m = r["_measures"][name][0]
        g.add_row(
            r["workload"],
            f"{r['tasks']:,}",
            f"{r['partitions']:,}",
            f"{r['tables']:,}",
            f"{m.wall:.2f}",
            f"{m.wall_excl_catalog:.2f}",
            f"{1e6 * m.wall_excl_catalog / r['tasks']:.1f}",
            f"{1e6 * m.wall_excl_catalog / r['partitions']:.1f}",
            f"{m.catalog_seconds:.2f}",
            f"{1000 * m.catalog_seconds / r['tables']:.1f}",
            f"{m.wall_excl_catalog / max(first.wall_excl_catalog, 1e-9):.1f}x",
            f"{r['partitions'] / reports[0]['partitions']:.1f}x",
        )
    console.print(g)
