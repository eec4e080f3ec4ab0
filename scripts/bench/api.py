"""Load on the HTTP API: a real `smartsensor serve` (with a token) over a real metadata DB, driven the way Airflow
drives it, and what each request costs the server.

Phases, against one server this script starts and stops:
  registration  --tasks registrations (POST /api/v1/tasks, one try each, NamedHivePartitionSensor) over
                --partitions distinct partitions, --concurrency requests in flight (one connection each)
  polling       --pollers triggerers, each asking for the states of its --keys-per-poller registered tasks
                (POST /api/v1/tasks/states) every --poll-interval seconds for --poll-seconds; a poller whose
                answer comes late asks again at once (it never has two requests out)

It prints one table (Markdown): requests, errors, throughput (requests/s and keys/s), latency p50/p95/p99, and the
server's CPU time (user + system, from /proc/PID/stat before and after the phase) in total and per 1,000 keys, its
RSS after the phase, and this script's own CPU. A key is one task registered, or one try in a states answer.

The client is a minimal HTTP/1.1 client on asyncio streams: one keep-alive connection per concurrent requester,
each request written from a prepared template, each answer read by its Content-Length. On a 2-core machine the
load generator shares the CPU with the server; an httpx client used more CPU than the server did, which would
measure the client. The last column shows what this client took.

Only loopback traffic: the server listens on 127.0.0.1. Every loop is bounded (tasks, a time window, a timeout
per request and per phase); the server is stopped on exit, on an error and on Ctrl-C, and gets SIGTERM if this
script dies without stopping it (Linux).

    .venv/bin/python -m scripts.bench.api [--db-url URL] [--tasks 10000] [--partitions 500] [--concurrency 50]
        [--pollers 50] [--keys-per-poller 200] [--poll-interval 1] [--poll-seconds 20] [--wait 0] [--json FILE]

Without --db-url: SQLite in a temporary folder. ./scripts/bench_api.sh starts a throwaway PostgreSQL for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.harness.usage import cpu_seconds, status_kb
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.process import pdeathsig_preexec

HOST = "127.0.0.1"
DAY = "2026-11-22"
REQUEST_TIMEOUT = 120.0  # seconds for one answer: a slower one is an error, not a hang


# --- the server ------------------------------------------------------------------------------------------------


class Server:
    """`smartsensor serve` on 127.0.0.1 over ``db_url`` with ``token``, its output in ``home``/serve.log."""

    def __init__(self, home: Path, db_url: str, token: str) -> None:
        self.home, self.port, self.token = home, free_port(), token
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR")}
        self.env.update(
            SMARTSENSOR_HOME=str(home), SMARTSENSOR__CORE__SQL_ALCHEMY_CONN=db_url, SMARTSENSOR__API__TOKEN=token
        )
        self.log = home / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "smartsensor.cli", *args]

    def start(self, timeout: float = 60) -> None:
        init = subprocess.run(
            self.cli("db", "init"), env=self.env, cwd=self.home, capture_output=True, text=True, timeout=300
        )
        if init.returncode != 0:
            raise SystemExit(f"smartsensor db init failed: {init.stderr.strip() or init.stdout.strip()}")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.cli("serve", "--host", HOST, "--port", str(self.port)),
                env=self.env,
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=pdeathsig_preexec(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"smartsensor serve exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _ = asyncio.run(one_request(self.port, "GET", "/api/v1/health", None, None))
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"smartsensor serve did not answer /api/v1/health within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s: the server this script started, and only it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


# --- the client ------------------------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection to the server; ``request`` sends one request and reads its answer."""

    def __init__(self, port: int, token: str | None) -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request and read its answer. A kept-alive connection the server closed meanwhile (uvicorn
        closes idle ones after 5 s) is opened again and the request sent once more (both endpoints are idempotent)."""
        reused = self.writer is not None
        try:
            return await self._exchange(method, path, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            await self.close()
            if not reused:
                raise
        return await self._exchange(method, path, body)

    async def _exchange(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        assert self.reader is not None
        head = (f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n").encode() + self.auth
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        self.writer.write(head + b"\r\n" + (body or b""))
        status, headers = parse_head(await self.reader.readuntil(b"\r\n\r\n"))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            data = await self._chunked()
        else:
            data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, data

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append(await self.reader.readexactly(size + 2))
            if size == 0:
                return b"".join(parts)[:-2]

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        self.reader = self.writer = None


def parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def one_request(port: int, method: str, path: str, body: bytes | None, token: str | None) -> tuple[int, bytes]:
    conn = Connection(port, token)
    try:
        return await asyncio.wait_for(conn.request(method, path, body), 5)
    finally:
        await conn.close()


# --- the workload ----------------------------------------------------------------------------------------------


def task_key(i: int, tag: str) -> dict[str, Any]:
    """Task ``i`` of the run: 100 tasks per DAG, one run per bench run (``tag``), try 1."""
    return {
        "dag_id": f"bench_api_{i // 100}",
        "task_id": f"wait_{i % 100}",
        "run_id": f"bench__{tag}",
        "map_index": -1,
        "try_number": 1,
    }


def registration(i: int, partitions: int, tag: str) -> bytes:
    partition = f"bench_api.events/ds={DAY}/part={i % partitions}"
    return json.dumps(
        {
            "key": task_key(i, tag),
            "logical_date": f"{DAY}T00:00:00+00:00",
            "sensor": {
                "class": "NamedHivePartitionSensor",
                "persist": {"partition_names": [partition]},
                "exec": {"poke_interval": 60, "timeout": 7 * 86400},
            },
        }
    ).encode()


@dataclass
class Phase:
    name: str
    requests: int = 0
    errors: int = 0
    keys: int = 0
    wrong: int = 0  # answers that parsed but said something else than expected (a state not smart_pending, …)
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    error_examples: list[str] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    server_rss_mb: float = 0.0
    late_polls: int = 0  # polling: ticks at which the poller's previous answer had not come yet

    def failed(self, what: str) -> None:
        self.errors += 1
        if len(self.error_examples) < 5:
            self.error_examples.append(what)

    def row(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "phase": self.name,
            "requests": self.requests,
            "errors": self.errors,
            "wrong_answers": self.wrong,
            "keys": self.keys,
            "seconds": round(self.seconds, 2),
            "requests_per_s": round(self.requests / self.seconds, 1) if self.seconds else 0.0,
            "keys_per_s": round(self.keys / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": pct(lat, 50),
            "p95_ms": pct(lat, 95),
            "p99_ms": pct(lat, 99),
            "server_cpu_s": round(self.server_cpu, 2),
            "server_cpu_s_per_1k_keys": round(self.server_cpu / (self.keys / 1000), 3) if self.keys else 0.0,
            "server_rss_mb": round(self.server_rss_mb, 1),
            "client_cpu_s": round(self.client_cpu, 2),
            "late_polls": self.late_polls,
            "error_examples": self.error_examples,
        }


def pct(sorted_seconds: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) in milliseconds."""
    if not sorted_seconds:
        return 0.0
    rank = max(0, min(len(sorted_seconds) - 1, math.ceil(q / 100 * len(sorted_seconds)) - 1))
    return round(sorted_seconds[rank] * 1000, 1)


async def timed(conn: Connection, phase: Phase, method: str, path: str, body: bytes) -> tuple[int, bytes] | None:
    start = time.perf_counter()
    try:
        status, data = await asyncio.wait_for(conn.request(method, path, body), REQUEST_TIMEOUT)
    except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        await conn.close()
        phase.requests += 1
        phase.failed(f"{type(exc).__name__}: {exc}"[:200])
        return None
    phase.latencies.append(time.perf_counter() - start)
    phase.requests += 1
    if status != 200:
        phase.failed(f"{status}: {data[:200].decode('utf-8', 'replace')}")
        return None
    return status, data


async def register_all(
    port: int, token: str, tasks: int, partitions: int, concurrency: int, tag: str, phase: Phase
) -> None:
    """``tasks`` registrations, ``concurrency`` at a time, each requester on its own connection."""
    next_task = iter(range(tasks))

    async def requester() -> None:
        conn = Connection(port, token)
        try:
            for i in next_task:  # shared: each task is taken once
                answer = await timed(conn, phase, "POST", "/api/v1/tasks", registration(i, partitions, tag))
                if answer is None:
                    continue
                body = json.loads(answer[1])
                phase.keys += 1
                if not body.get("created") or body.get("state") != "smart_pending":
                    phase.wrong += 1
        finally:
            await conn.close()

    await asyncio.gather(*(requester() for _ in range(concurrency)))


async def poll_all(
    port: int,
    token: str,
    tasks: int,
    pollers: int,
    keys_per_poller: int,
    interval: float,
    window: float,
    wait: float,
    tag: str,
    phase: Phase,
) -> None:
    """``pollers`` pollers, each asking for its keys every ``interval`` s for ``window`` s, started spread evenly
    over one interval."""
    path = "/api/v1/tasks/states" + (f"?wait={wait:g}" if wait > 0 else "")
    start = time.monotonic()
    end = start + window

    async def poller(j: int) -> None:
        keys = [task_key((j * keys_per_poller + k) % tasks, tag) for k in range(keys_per_poller)]
        body = json.dumps({"keys": keys}).encode()
        conn = Connection(port, token)
        due = start + j * interval / pollers
        try:
            while due < end:
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                answer = await timed(conn, phase, "POST", path, body)
                if answer is not None:
                    states = json.loads(answer[1])["states"]
                    phase.keys += len(states)
                    phase.wrong += len(keys) - len(states) + sum(s["state"] != "smart_pending" for s in states)
                due += interval
                if due < time.monotonic():  # the answer took longer than the interval: ask again at once
                    phase.late_polls += 1
                    due = time.monotonic()
        finally:
            await conn.close()

    await asyncio.gather(*(poller(j) for j in range(pollers)))


def measured(server: Server, phase: Phase, run: Any, limit: float) -> Phase:
    """Run the coroutine ``run`` as ``phase``: wall time, the server's and this process's CPU around it."""
    assert server.proc is not None
    pid = server.proc.pid
    cpu0, client0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    try:
        asyncio.run(asyncio.wait_for(run, limit))
    except asyncio.TimeoutError:
        phase.failed(f"phase stopped after its limit of {limit:.0f} s")
    phase.seconds = time.perf_counter() - t0
    phase.client_cpu = time.process_time() - client0
    phase.server_cpu = cpu_seconds(pid) - cpu0
    phase.server_rss_mb = status_kb(pid, "VmRSS") / 1024
    return phase


# --- output ----------------------------------------------------------------------------------------------------

COLUMNS = [
    ("phase", "phase", "{}"),
    ("requests", "requests", "{:,}"),
    ("errors", "errors", "{:,}"),
    ("req/s", "requests_per_s", "{:,.0f}"),
    ("keys/s", "keys_per_s", "{:,.0f}"),
    ("p50 ms", "p50_ms", "{:,.0f}"),
    ("p95 ms", "p95_ms", "{:,.0f}"),
    ("p99 ms", "p99_ms", "{:,.0f}"),
    ("server CPU s", "server_cpu_s", "{:.1f}"),
    ("server CPU s / 1,000 keys", "server_cpu_s_per_1k_keys", "{:.3f}"),
    ("server RSS MB", "server_rss_mb", "{:.0f}"),
    ("client CPU s", "client_cpu_s", "{:.1f}"),
]


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per phase."""
    lines = ["| " + " | ".join(title for title, _, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt.format(row[key]) for _, key, fmt in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def interrupted(*_: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db-url", help="metadata DB (default: SQLite in a temporary folder)")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--pollers", type=int, default=50)
    parser.add_argument("--keys-per-poller", type=int, default=200)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--poll-seconds", type=float, default=20.0)
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="send states requests with ?wait=S (held while every key waits; default 0: plain polls)",
    )
    parser.add_argument("--phase-limit", type=float, default=900.0, help="seconds a phase may take at most")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (config, serve.log, SQLite)")
    args = parser.parse_args(argv)
    for name in ("tasks", "partitions", "concurrency", "pollers", "keys_per_poller"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            parser.error(f"--{name.replace('_', '-')} must be between 1 and 1,000,000")
    if args.keys_per_poller > 10_000:
        parser.error("--keys-per-poller: the API takes at most 10,000 keys per request")
    if not (0.01 <= args.poll_interval <= 3600 and 0 < args.poll_seconds <= 3600 and 0 <= args.wait <= 30):
        parser.error("--poll-interval 0.01-3600 s, --poll-seconds up to 3600 s, --wait 0-30 s")

    home = Path(tempfile.mkdtemp(prefix="smartsensor-bench-api-"))
    db_url = args.db_url or f"sqlite:///{home / 'smartsensor.db'}"
    backend = db_url.split(":", 1)[0].split("+", 1)[0]
    server = Server(home, db_url, secrets.token_urlsafe(24))
    tag = f"{int(time.time())}_{secrets.token_hex(3)}"  # a fresh run id: a reused database holds no such keys
    for sig in (signal.SIGINT, signal.SIGTERM):  # (also when started with SIGINT ignored, as a background job)
        signal.signal(sig, interrupted)  # KeyboardInterrupt: the finally below stops the server
    rows = []
    try:
        server.start()
        print(
            f"smartsensor serve pid {server.proc.pid if server.proc else '?'} on {HOST}:{server.port}, {backend}, "
            f"{os.cpu_count()} cores; this client pid {os.getpid()}",
            flush=True,
        )
        reg = Phase("registration")
        measured(
            server,
            reg,
            register_all(server.port, server.token, args.tasks, args.partitions, args.concurrency, tag, reg),
            args.phase_limit,
        )
        rows.append(reg.row())
        print(
            f"registration: {args.tasks:,} tasks over {args.partitions:,} partitions, concurrency "
            f"{args.concurrency}: {reg.seconds:.1f} s",
            flush=True,
        )
        polls = Phase("polling")
        measured(
            server,
            polls,
            poll_all(
                server.port,
                server.token,
                args.tasks,
                args.pollers,
                args.keys_per_poller,
                args.poll_interval,
                args.poll_seconds,
                args.wait,
                tag,
                polls,
            ),
            args.poll_seconds + args.phase_limit,
        )
        rows.append(polls.row())
        print(
            f"polling: {args.pollers} pollers x {args.keys_per_poller} keys every {args.poll_interval:g} s for "
            f"{args.poll_seconds:g} s{f' (wait={args.wait:g})' if args.wait else ''}: {polls.late_polls} late "
            f"polls",
            flush=True,
        )
    except KeyboardInterrupt:
        print("interrupted: stopping the server", file=sys.stderr)
        return 130
    finally:
        server.stop()
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print()
    print(table(rows))
    for row in rows:
        if row["errors"] or row["wrong_answers"]:
            print(
                f"{row['phase']}: {row['errors']} errors, {row['wrong_answers']} wrong answers, e.g. "
                f"{row['error_examples'][:3]}"
            )
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "backend": backend,
                    "cores": os.cpu_count(),
                    "args": vars(args),
                    "server_pid": server.proc.pid if server.proc else None,
                    "phases": rows,
                },
                indent=2,
            )
        )
    return 1 if any(row["errors"] or row["wrong_answers"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
