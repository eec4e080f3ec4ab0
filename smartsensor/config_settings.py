"""The settings as typed attributes: ``cfg.settings.smart_sensor.metastore_timeout`` rather than a name in a string
(``Config.get(section, name)``), so that a misspelt name fails at lint (mypy) rather than at run time.

One frozen dataclass per section of ``config_keys.KEYS``, one field per key, typed as the key's parser returns
(``parse_float`` → float, ``parse_int`` → int, ``parse_bool`` → bool, ``parse_str`` → str, ``parse_list`` →
list[str]). ``KEYS`` stays the one source of names, defaults, bounds and help; these classes only give the parsed
values a shape. ``tests/unit/test_config_settings.py`` checks that the fields are exactly the keys of each section
with those types, and ``Settings.build`` refuses values that do not match them, so the two cannot drift apart.
``config.load_config`` builds the object once, from the values it has parsed and validated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, get_type_hints

__all__ = [
    "ApiSettings",
    "CatalogSettings",
    "CoreSettings",
    "LandingsSettings",
    "MetastoreServiceSettings",
    "RetentionSettings",
    "SchedulerSettings",
    "Settings",
    "SmartSensorSettings",
    "SparkSettings",
]


@dataclass(frozen=True)
class CoreSettings:
    """``[core]``."""

    sql_alchemy_conn: str
    dag_file_import_timeout: float
    sql_call_timeout: float
    listen_check_interval: float


@dataclass(frozen=True)
class SmartSensorSettings:
    """``[smart_sensor]``."""

    use_smart_sensor: bool
    shard_code_upper_limit: int
    shards: int
    shard_ranges: str  # the raw text; ``Config.resolved_shard_ranges`` parses and checks it
    sensors_enabled: list[str]
    sensor_modules: list[str]
    poke_interval: float
    index_rebuild_interval: float
    reconcile_interval: float
    reconcile_lookback: float
    write_threads: int
    poke_timeout: float
    heartbeat_interval: float
    lease_timeout: float
    failover_after: float
    signal_poll_interval: float
    catalog_backend: str  # as written, auto included; ``Config.resolved_catalog_backend`` resolves it
    metastore_timeout: float


@dataclass(frozen=True)
class SparkSettings:
    """``[spark]``."""

    master: str
    app_name: str
    warehouse_dir: str
    metastore_uris: str  # the raw text; ``Config.metastore_uris`` parses it into (host, port) pairs
    conf: list[str]  # key=value items; ``Config.spark_conf()`` makes them a dict


@dataclass(frozen=True)
class CatalogSettings:
    """``[catalog]``."""

    parallelism: int
    metastore_db_url: str
    metastore_db_feed: bool
    metastore_db_verify_seconds: float
    metastore_db_max_gaps: int


@dataclass(frozen=True)
class LandingsSettings:
    """``[landings]``: landings published to Airflow as asset events."""

    publish: bool
    airflow_url: str
    airflow_username: str
    airflow_password_file: str
    asset_uri_prefix: str
    publish_existing: bool
    interval: float
    change_record_interval: float
    assets_refresh_interval: float
    request_timeout: float
    retry_base: float
    retry_max: float
    unknown_outcome_patience: float
    publish_recreated: list[str]
    batch: int


@dataclass(frozen=True)
class RetentionSettings:
    """``[retention]``: what `serve` and `db prune` delete, and when."""

    enabled: bool
    max_age_days: float
    forget_dropped_landings: bool
    interval: float
    batch_size: int
    time_budget: float


@dataclass(frozen=True)
class MetastoreServiceSettings:
    """``[metastore]``: the metastore service `smartsensor metastore start` runs (its metastore database:
    ``database_url``)."""

    host: str
    port: int
    java_opts: str
    start_timeout: float
    database_url: str  # the raw text; ``Config.metastore_service_db`` parses it


@dataclass(frozen=True)
class SchedulerSettings:
    """``[scheduler]``."""

    parallelism: int
    loop_interval: float
    task_heartbeat_interval: float
    stop_grace: float
    zombie_threshold: float


@dataclass(frozen=True)
class ApiSettings:
    """``[api]``."""

    host: str
    port: int
    token: str
    token_file: str
    history_interval: float
    history_retention: float
    status_max_age: float


@dataclass(frozen=True)
class Settings:
    """Every setting, by section: each field is named as its section in ``config_keys.KEYS``."""

    core: CoreSettings
    smart_sensor: SmartSensorSettings
    spark: SparkSettings
    catalog: CatalogSettings
    landings: LandingsSettings
    retention: RetentionSettings
    metastore: MetastoreServiceSettings
    scheduler: SchedulerSettings
    api: ApiSettings

    @classmethod
    def build(cls, values: Mapping[tuple[str, str], Any]) -> Settings:
        """The typed view of ``values`` (``(section, name)`` → parsed value, every key of ``KEYS``). Raises
        ValueError when a key has no field or a field no key: the classes above have drifted from ``KEYS``."""
        sections: dict[str, Any] = {}
        used: set[tuple[str, str]] = set()
        kinds = get_type_hints(cls)
        for section in fields(cls):
            kind = kinds[section.name]
            names = [f.name for f in fields(kind)]
            missing = [n for n in names if (section.name, n) not in values]
            if missing:
                raise ValueError(f"settings [{section.name}] {', '.join(missing)} have no configuration key")
            sections[section.name] = kind(**{n: values[(section.name, n)] for n in names})
            used.update((section.name, n) for n in names)
        extra = sorted(set(values) - used)
        if extra:
            raise ValueError(f"configuration keys without a settings field: {extra}")
        return cls(**sections)
