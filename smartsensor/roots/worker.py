"""The ``smartsensor worker`` process's parts, built in one place: the served ranges (leased or pinned) over the SQL
round and lease stores and the configured catalog backend, the landing signals, the notification hub, the landing
publisher (``[landings] publish``) and the loop, all under the process's one ``StopRequest``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from sqlalchemy import Engine

from smartsensor.adapters.catalog.backends import answerer_factory, landing_listings
from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.spark import jvm_exit_code as spark_jvm_exit_code
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.adapters.sql.notifications import NotificationHub
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.config import Config
from smartsensor.domain import clock as wall_clock
from smartsensor.service.landings import LandingPublisher
from smartsensor.service.leases import LeaseManager, new_worker_id
from smartsensor.service.round.range_rounds import RangeRounds
from smartsensor.service.round.report import RoundResult
from smartsensor.service.round_metrics import RoundMetrics
from smartsensor.service.served_ranges import LeasedRanges, PinnedRange, ServedRanges
from smartsensor.service.worker_loop import WorkerLoop

SIGNAL_LISTENER = "signal listener"  # the worker's hub: its log lines start with this


def leased_ranges(
    engine: Engine, cfg: Config, spark_provider: Callable[[], Any] | None = None, worker_id: str | None = None
) -> LeasedRanges:
    """The ranges whose leases this worker claims (the default): the SQL lease and round stores, and an answerer of
    the configured catalog backend for the timer rounds and another for the wake-up rounds."""
    return LeasedRanges(
        LeaseManager(SqlLeaseStore(engine), cfg, worker_id),
        SqlRoundStore(engine, cfg.settings.smart_sensor.write_threads),
        cfg,
        answerer_factory(cfg, spark_provider),
        answerer_factory(cfg, spark_provider),
    )


def range_rounds(
    engine: Engine, cfg: Config, shard_min: int, shard_max: int, *, record_rounds: bool = True
) -> RangeRounds:
    """One range's rounds over the SQL round store, no lease: a pinned range's, or (``record_rounds`` off: no
    ``worker_round`` row) a benchmark's."""
    return RangeRounds(SqlRoundStore(engine), cfg, shard_min, shard_max, record_rounds=record_rounds)


def pinned_range(engine: Engine, cfg: Config, shard_min: int, shard_max: int) -> PinnedRange:
    """One fixed range (``--shard-min/--shard-max``): no lease, no fence."""
    return PinnedRange(range_rounds(engine, cfg, shard_min, shard_max), answerer_factory(cfg), answerer_factory(cfg))


def landing_publisher(
    engine: Engine, cfg: Config, owner: str, clock: Callable[[], datetime] = wall_clock.now
) -> LandingPublisher:
    """The publisher a worker runs with ``[landings] publish`` on: its outbox in the metadata database, Airflow's
    REST API over httpx, the worker's catalog backend (a client of its own); ``clock``: the worker's lease clock
    (claims lapse as leases do, judged by the database's time)."""
    from smartsensor.adapters.airflow_assets import AirflowAssets
    from smartsensor.adapters.sql.landings import SqlOutboxStore
    from smartsensor.service.landings import airflow_password

    settings = cfg.settings.landings
    events = AirflowAssets(
        settings.airflow_url, settings.airflow_username, airflow_password(cfg), settings.request_timeout
    )
    return LandingPublisher(SqlOutboxStore(engine), cfg, events, landing_listings(cfg), owner, clock=clock)


def worker_loop(
    engine: Engine,
    cfg: Config,
    served: ServedRanges,
    interval: float,
    once: bool,
    emit: Callable[[RoundResult], None],
    *,
    metrics: RoundMetrics | None = None,
    wake_ups: bool = True,
    stop: StopRequest | None = None,
    landings: LandingPublisher | None = None,
    jvm_exit_code: Callable[[], int | None] = spark_jvm_exit_code,
) -> WorkerLoop:
    """The loop over ``served``, with its landing signals, its stop and (``wake_ups``, not ``once``) its
    notification hub."""
    stop = stop or StopRequest()
    hub = None
    if wake_ups and not once:
        hub = NotificationHub(
            engine,
            stop,
            cfg.settings.smart_sensor.signal_poll_interval,
            name=SIGNAL_LISTENER,
            check_interval=cfg.settings.core.listen_check_interval,
        )
    return WorkerLoop(
        served,
        cfg,
        interval,
        once,
        emit,
        signals=SqlLandingSignals(engine),
        metrics=metrics,
        notifications=hub,
        stop_request=stop,
        jvm_exit_code=jvm_exit_code,
        landings=landings,
    )


def build_worker(
    engine: Engine,
    cfg: Config,
    emit: Callable[[RoundResult], None],
    *,
    pinned: tuple[int, int] | None,
    once: bool,
    interval: float,
    metrics_port: int | None = None,
    wake_ups: bool = True,
) -> WorkerLoop:
    """The whole worker process: ranges (``pinned`` or leased), metrics, publisher, hub, loop."""
    served: ServedRanges
    if pinned is not None:
        served = pinned_range(engine, cfg, *pinned)
    else:
        served = leased_ranges(engine, cfg)
    landings = None
    if cfg.settings.landings.publish and not once:
        if isinstance(served, LeasedRanges):
            landings = landing_publisher(engine, cfg, served.worker_id, served.leases.clock.now)
        else:
            landings = landing_publisher(engine, cfg, new_worker_id())
    metrics = RoundMetrics(metrics_port) if metrics_port else None
    return worker_loop(engine, cfg, served, interval, once, emit, metrics=metrics, wake_ups=wake_ups, landings=landings)
