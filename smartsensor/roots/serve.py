"""The ``smartsensor serve`` process's parts, built in one place: the application (``api.app.api_app``) with its
status snapshot, the external door's store of tries (``SqlExternalTryStore``), the ended watch its held requests
wait on, and its lifespan: the process's one ``PeriodicJobs`` (the page's history sampler, the retention job) and one
``NotificationHub`` (the ended tasks' channel); and the server itself (``serve_until_stopped``), which ends, like every
smartsensor process, on the process's one ``StopRequest`` (SIGTERM, SIGINT), the hub and the jobs with it."""

from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql.external import SqlExternalTryStore
from smartsensor.adapters.sql.notifications import NotificationHub
from smartsensor.adapters.sql.status_store import SqlExpiredRows, SqlOverviewReads, SqlStateSamples, SqlStatusReads
from smartsensor.api.app import api_app
from smartsensor.config import Config
from smartsensor.external.ended_watch import EndedWatch
from smartsensor.service.history import HistorySampler
from smartsensor.service.retention import RetentionJob
from smartsensor.service.status import collect_status
from smartsensor.service.status_snapshot import StatusSnapshot

ENDED_POLL_INTERVAL = 0.2  # SQLite: seconds between two reads of its data version (long-polls wake within it)
ENDED_WATCH = "ended-task watch"  # serve's hub: its log lines start with this


def history_sampler(cfg: Config, engine: Engine) -> HistorySampler:
    """The sampler of tasks by state (``service.history``) that the page's chart reads; the app's lifespan
    schedules it from startup to shutdown (SIGTERM)."""
    return HistorySampler(
        SqlStateSamples(engine), cfg.settings.api.history_interval, cfg.settings.api.history_retention
    )


def create_app(cfg: Config, engine: Engine, token: str | None, stop: StopRequest | None = None) -> FastAPI:
    """The application over one engine, with everything it runs while it serves. ``token`` None: no auth. ``stop``:
    the process's stop, which ends the hub at once (each lifespan makes one of its own without it: tests)."""
    watch = EndedWatch()
    status_reads = SqlStatusReads(engine)
    snapshot = StatusSnapshot(lambda: collect_status(status_reads, cfg), cfg.settings.api.status_max_age)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """While the server runs, on the process's one ``PeriodicJobs``: the page's history sampler and the
        retention job (``[retention]``); on its one ``NotificationHub``, the watch that wakes long-polling requests
        (the ended tasks' channel on PostgreSQL, SQLite's data version polled)."""
        ending = stop or StopRequest()
        hub = NotificationHub(
            engine,
            ending,
            ENDED_POLL_INTERVAL,
            name=ENDED_WATCH,
            check_interval=cfg.settings.core.listen_check_interval,
        )
        jobs = PeriodicJobs("serve")
        history_sampler(cfg, engine).schedule(jobs)
        RetentionJob(SqlExpiredRows(engine), cfg).schedule(jobs)
        watch.start(hub)
        hub.start()
        jobs.start()
        try:
            yield
        finally:
            ending.request("serve is stopping")
            jobs.stop(timeout=10)  # a sample or a prune batch in flight: waited for up to 10 s, then abandoned
            hub.close()

    return api_app(
        cfg,
        token,
        tries=SqlExternalTryStore(engine),
        watch=watch,
        snapshot=snapshot,
        status_reads=status_reads,
        overview=SqlOverviewReads(engine),
        lifespan=lifespan,
    )


class _StoppedServer(uvicorn.Server):
    """uvicorn's server without signal handlers of its own: the process's ``StopRequest`` hears SIGTERM and SIGINT
    and ends it (a graceful shutdown: requests in flight answered, the lifespan's shutdown run)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve_until_stopped(api: FastAPI, host: str, port: int, stop: StopRequest, **options: Any) -> None:
    """Serve ``api`` on ``host``:``port`` until ``stop`` (inside ``stop.signals()``: SIGTERM or SIGINT). uvicorn's
    ``SystemExit`` (it exits 1 when it cannot bind) goes to the caller."""
    server = _StoppedServer(uvicorn.Config(api, host=host, port=port, **options))
    stop.on_request(lambda: setattr(server, "should_exit", True))
    with stop.signals():
        server.run()
    if not server.started and not stop.is_set():  # as uvicorn.run: it never served (its startup failed)
        raise SystemExit(1)
