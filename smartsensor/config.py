"""Configuration: lookup order, typed keys with defaults, env overrides, validation.

Lookup order for the file: ``--config PATH`` (CLI), else env ``SMARTSENSOR_CONFIG``, else
``$SMARTSENSOR_HOME/airflow.cfg`` (home defaults to ``~/smartsensor``). A missing file means
defaults. Env ``SMARTSENSOR__<SECTION>__<KEY>`` overrides the file.
"""

from __future__ import annotations

import configparser
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping
from urllib.parse import quote, unquote, urlsplit

from smartsensor.config_keys import (
    BOUNDS,
    CATALOG_BACKENDS,
    KEY_INDEX,
    KEYS,
    parse_bool,
    parse_float,
    parse_int,
    parse_list,
)
from smartsensor.config_settings import Settings

__all__ = [
    "Config",
    "ConfigError",
    "ENV_PREFIX",
    "MetastoreDb",
    "Settings",
    "ShardRange",
    "config_location",
    "even_shard_ranges",
    "load_config",
    "parse_metastore_db",
    "parse_shard_ranges",
]

log = logging.getLogger(__name__)

ENV_PREFIX = "SMARTSENSOR__"


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class ShardRange:
    """Half-open range [lo, hi) of shardcodes."""

    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.lo}-{self.hi}"

    def contains(self, shardcode: int) -> bool:
        return self.lo <= shardcode < self.hi


def parse_shard_ranges(raw: str, limit: int) -> list[ShardRange]:
    """Parse ``"0-2000, 2000-10000"`` and check it covers [0, limit) exactly once."""
    ranges: list[ShardRange] = []
    for item in parse_list(raw):
        parts = item.split("-")
        if len(parts) != 2:
            raise ConfigError(f"[smart_sensor] shard_ranges: range {item!r} is not of the form LO-HI")
        try:
            lo, hi = int(parts[0]), int(parts[1])
        except ValueError:
            raise ConfigError(f"[smart_sensor] shard_ranges: range {item!r} has a non-integer bound") from None
        if lo >= hi:
            raise ConfigError(f"[smart_sensor] shard_ranges: range {item!r} is empty (LO must be < HI)")
        if lo < 0 or hi > limit:
            raise ConfigError(
                f"[smart_sensor] shard_ranges: range {item!r} falls outside [0, {limit}) "
                f"(shard_code_upper_limit = {limit})"
            )
        ranges.append(ShardRange(lo, hi))
    if not ranges:
        raise ConfigError("[smart_sensor] shard_ranges: no ranges given")
    ranges.sort(key=lambda r: (r.lo, r.hi))
    expected = 0
    for r in ranges:
        if r.lo < expected:
            raise ConfigError(f"[smart_sensor] shard_ranges: range {r} overlaps the range ending at {expected}")
        if r.lo > expected:
            raise ConfigError(f"[smart_sensor] shard_ranges: range {r} leaves a gap {expected}-{r.lo} before it")
        expected = r.hi
    if expected != limit:
        raise ConfigError(f"[smart_sensor] shard_ranges: range {ranges[-1]} leaves a gap {expected}-{limit} at the end")
    return ranges


def even_shard_ranges(shards: int, limit: int) -> list[ShardRange]:
    """Split [0, limit) into ``shards`` contiguous ranges of near-equal size."""
    if shards < 1 or shards > limit:
        raise ConfigError(f"[smart_sensor] shards must be between 1 and shard_code_upper_limit ({limit}), got {shards}")
    bounds = [i * limit // shards for i in range(shards + 1)]
    return [ShardRange(bounds[i], bounds[i + 1]) for i in range(shards)]


@dataclass(frozen=True)
class MetastoreDb:
    """``[metastore] database_url`` parsed: the PostgreSQL or MySQL/MariaDB database the metastore service keeps
    its tables in (``kind``: ``postgresql`` or ``mysql``)."""

    host: str
    port: int
    database: str
    user: str
    password: str = field(repr=False)
    kind: str = "postgresql"

    @property
    def jdbc_url(self) -> str:
        """``jdbc:postgresql://host:port/db`` or ``jdbc:mariadb://host:port/db?useMysqlMetadata=true`` (the MariaDB
        driver then reports the server as MySQL, the product Hive's DataNucleus and direct SQL know: without it
        DataNucleus falls back to its generic adapter and SchemaTool fails); user and password go to the driver
        separately, never in the URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.kind == "mysql":
            return f"jdbc:mariadb://{host}:{self.port}/{quote(self.database, safe='')}?useMysqlMetadata=true"
        return f"jdbc:postgresql://{host}:{self.port}/{quote(self.database, safe='')}"

    @property
    def shown(self) -> str:
        """The URL without its password, for messages and logs."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.kind}://{quote(self.user, safe='')}@{host}:{self.port}/{quote(self.database, safe='')}"


def parse_metastore_db(raw: str) -> MetastoreDb | None:
    """``[metastore] database_url``: None when empty (embedded Derby), else the PostgreSQL or MySQL database it
    names.

    Accepts ``postgresql://``, ``postgres://``, ``postgresql+<driver>://``, ``mysql://``, ``mariadb://`` and
    ``mysql+<driver>://`` (the forms ``sql_alchemy_conn`` takes; the driver part is ignored: the service connects
    through JDBC). Raises ConfigError, never naming the password, for another scheme, a missing host, user or
    database (or password, on MySQL), or ``?parameters``.
    """
    if not raw:
        return None
    what = "[metastore] database_url"
    form = "postgresql://user:password@host:port/db or mysql://user:password@host:port/db"
    try:
        parts = urlsplit(raw)
        scheme = parts.scheme.lower().split("+", 1)[0]
        port = parts.port or (3306 if scheme in ("mysql", "mariadb") else 5432)
    except ValueError:
        parts, scheme, port = None, "", 0
    if parts is None or not parts.scheme:
        raise ConfigError(f"{what} is not a URL of the form {form}")
    if scheme not in ("postgresql", "postgres", "mysql", "mariadb"):
        raise ConfigError(f"{what} must be {form} (or empty for embedded Derby), got a {_shown(parts.scheme)} URL")
    database = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    host, user = parts.hostname or "", unquote(parts.username or "")
    missing = [name for name, value in (("host", host), ("user", user), ("database", database)) if not value]
    if missing:
        raise ConfigError(f"{what} names no {' and no '.join(missing)}: {form}")
    if "/" in database or parts.query or parts.fragment:
        raise ConfigError(f"{what} must name one database and take no ?parameters: {form}")
    kind = "mysql" if scheme in ("mysql", "mariadb") else "postgresql"
    password = unquote(parts.password or "")
    if kind == "mysql" and not password:  # Hive's metastore sends its default password ("mine") for an empty one
        raise ConfigError(f"{what} names no password: on MySQL the metastore service needs one: {form}")
    return MetastoreDb(host=host, port=port, database=database, user=user, password=password, kind=kind)


@dataclass(frozen=True)
class Config:
    """Effective configuration: typed values plus where they came from.

    Code reads a setting as an attribute of ``settings`` (``cfg.settings.smart_sensor.poke_interval``), typed and
    checked by mypy; ``get(section, name)`` is the same value by name. Both are built once, by ``load_config``,
    from one store: the Config is frozen and ``values`` is read-only, so they cannot disagree."""

    values: Mapping[tuple[str, str], Any]
    home: Path
    path: Path
    file_found: bool
    warnings: list[str] = field(default_factory=list)
    settings: Settings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = MappingProxyType(dict(self.values))
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "settings", Settings.build(values))

    def get(self, section: str, name: str) -> Any:
        return self.values[(section, name)]

    # Short names for the keys used everywhere.
    @property
    def sql_alchemy_conn(self) -> str:
        return self.settings.core.sql_alchemy_conn

    @property
    def use_smart_sensor(self) -> bool:
        return self.settings.smart_sensor.use_smart_sensor

    @property
    def shard_code_upper_limit(self) -> int:
        return self.settings.smart_sensor.shard_code_upper_limit

    @property
    def sensors_enabled(self) -> list[str]:
        return self.settings.smart_sensor.sensors_enabled

    @property
    def sensor_modules(self) -> list[str]:
        return self.settings.smart_sensor.sensor_modules

    @property
    def poke_interval(self) -> float:
        return self.settings.smart_sensor.poke_interval

    @property
    def convergence_bound(self) -> float:
        """Seconds within which a worker's index holds every waiting task of its ranges, whoever made it wait:
        one reconciliation plus one round. `status` calls a task stuck past this bound."""
        return self.settings.smart_sensor.reconcile_interval + self.poke_interval

    @property
    def resolved_shard_ranges(self) -> list[ShardRange]:
        """The shard ranges served, parsed and checked: ``[smart_sensor] shard_ranges`` (the raw text), or
        ``shards`` even ranges of ``[0, shard_code_upper_limit)`` when it is empty. Raises ConfigError naming a bad
        range."""
        raw = self.settings.smart_sensor.shard_ranges
        limit = self.shard_code_upper_limit
        if raw:
            return parse_shard_ranges(raw, limit)
        return even_shard_ranges(self.settings.smart_sensor.shards, limit)

    @property
    def resolved_catalog_backend(self) -> str:
        """'thrift', 'spark' or 'metastore_db': ``[smart_sensor] catalog_backend`` with auto resolved."""
        backend = self.settings.smart_sensor.catalog_backend.lower()
        uris = self.settings.spark.metastore_uris
        if backend not in CATALOG_BACKENDS:
            raise ConfigError(
                f"[smart_sensor] catalog_backend must be one of {', '.join(CATALOG_BACKENDS)}, got {_shown(backend)}"
            )
        if backend == "thrift" and not uris:
            raise ConfigError(
                "[smart_sensor] catalog_backend = thrift needs [spark] metastore_uris "
                "(thrift://host:port of a Hive metastore service); the embedded Derby "
                "catalog is reachable through Spark only (catalog_backend = spark or auto)"
            )
        if backend == "metastore_db":
            url = self.settings.catalog.metastore_db_url
            if not url.startswith(("postgresql://", "postgresql+psycopg2://", "mysql://", "mysql+pymysql://")):
                raise ConfigError(
                    "[smart_sensor] catalog_backend = metastore_db needs [catalog] metastore_db_url, the metastore's "
                    "PostgreSQL or MySQL database (postgresql://user:password@host:port/db or "
                    "mysql://user:password@host:port/db)"
                    + (f", got {_shown(url.split('://')[0] + '://…')}" if url else "")
                )
        resolved = ("thrift" if uris else "spark") if backend == "auto" else backend
        if resolved == "thrift":
            self.metastore_uris  # noqa: B018 - read to validate: raises ConfigError naming a URI that is not thrift://host:port
        return resolved

    @property
    def metastore_uris(self) -> list[tuple[str, int]]:
        """``[spark] metastore_uris`` as (host, port) pairs, in order."""
        out = []
        for item in (i.strip() for i in self.settings.spark.metastore_uris.split(",")):
            if not item:
                continue
            try:
                parts = urlsplit(item)
                port = parts.port
            except ValueError:
                port = None
            if parts.scheme != "thrift" or not parts.hostname or port is None:
                raise ConfigError(f"[spark] metastore_uris: {_shown(item)} is not of the form thrift://host:port")
            out.append((parts.hostname, port))
        return out

    @property
    def metastore_service_db(self) -> MetastoreDb | None:
        """``[metastore] database_url`` parsed; None means embedded Derby under the home folder."""
        return parse_metastore_db(self.settings.metastore.database_url)

    def spark_conf(self) -> dict[str, str]:
        """Extra ``[spark] conf`` pairs as a dict."""
        out: dict[str, str] = {}
        for item in self.settings.spark.conf:
            if "=" not in item:
                raise ConfigError(f"[spark] conf: {item!r} is not key=value")
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
        return out


def config_location(cli_path: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """(home folder, config file) by the lookup order: ``--config``, ``$SMARTSENSOR_CONFIG``, then
    ``$SMARTSENSOR_HOME/airflow.cfg`` (home defaults to ``~/smartsensor``)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("SMARTSENSOR_HOME", str(Path.home() / "smartsensor"))).expanduser()
    if cli_path:
        return home, Path(cli_path).expanduser()
    if env.get("SMARTSENSOR_CONFIG"):
        return home, Path(env["SMARTSENSOR_CONFIG"]).expanduser()
    return home, home / "airflow.cfg"


def load_config(cli_path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Load, override from env, type-check and validate the configuration."""
    env = os.environ if environ is None else environ
    home, path = config_location(cli_path, env)

    raw: dict[tuple[str, str], str] = {(k.section, k.name): k.default for k in KEYS}
    warnings: list[str] = []
    parser = configparser.ConfigParser(interpolation=None)
    file_found = path.is_file()
    if cli_path and not file_found:
        raise ConfigError(f"config file {path} does not exist")
    if file_found:
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} cannot be parsed: {exc}".splitlines()[0]) from None
        for section in parser.sections():
            for name, value in parser.items(section):
                key = (section.lower(), name.lower())
                if key not in KEY_INDEX:
                    warnings.append(f"unknown key [{section}] {name} in {path} (ignored)")
                    continue
                raw[key] = value
    for env_name, value in env.items():
        if not env_name.startswith(ENV_PREFIX):
            continue
        parts = env_name[len(ENV_PREFIX) :].split("__")
        if len(parts) != 2:
            warnings.append(f"env {env_name} is not SMARTSENSOR__<SECTION>__<KEY> (ignored)")
            continue
        key = (parts[0].lower(), parts[1].lower())
        if key not in KEY_INDEX:
            warnings.append(f"unknown key [{key[0]}] {key[1]} from env {env_name} (ignored)")
            continue
        raw[key] = value

    values: dict[tuple[str, str], Any] = {}
    for key, text in raw.items():
        spec = KEY_INDEX[key]
        text = text.replace("{SMARTSENSOR_HOME}", str(home))
        values[key] = _parsed(key, spec.parse, text)
    cfg = Config(values=values, home=home, path=path, file_found=file_found, warnings=warnings)
    _validate(cfg)
    for w in warnings:
        log.warning(w)
    return cfg


def _shown(value: Any) -> str:
    """A value for an error message, cut short (a hostile file may hold a 5,000-digit number)."""
    text = repr(value) if isinstance(value, str) else (f"{value:g}" if isinstance(value, float) else None)
    if text is None:
        text = (
            str(value)
            if value.bit_length() < 200
            else f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        )
    return text if len(text) <= 60 else text[:57] + "..."


def _validate(cfg: Config) -> None:
    for (section, name), (low, high) in BOUNDS.items():
        value = cfg.get(section, name)
        if not low <= value <= high:
            raise ConfigError(f"[{section}] {name} must be between {low:.10g} and {high:.10g}, got {_shown(value)}")
    cfg.resolved_shard_ranges  # noqa: B018 - read to validate: raises ConfigError naming the offending range
    hb, lease = cfg.settings.smart_sensor.heartbeat_interval, cfg.settings.smart_sensor.lease_timeout
    if hb <= 0 or lease <= hb:
        raise ConfigError(f"[smart_sensor] lease_timeout ({lease}) must be greater than heartbeat_interval ({hb}) > 0")
    beat, zombie = cfg.settings.scheduler.task_heartbeat_interval, cfg.settings.scheduler.zombie_threshold
    if beat <= 0 or zombie < 2 * beat:
        raise ConfigError(
            f"[scheduler] zombie_threshold ({zombie}) must be at least twice task_heartbeat_interval ({beat}) > 0"
        )
    interval, retention = cfg.settings.api.history_interval, cfg.settings.api.history_retention
    if retention < interval:
        raise ConfigError(f"[api] history_retention ({retention:g}) must be at least history_interval ({interval:g})")
    _validate_landings(cfg)
    cfg.spark_conf()
    cfg.metastore_service_db  # noqa: B018 - read to validate: raises ConfigError for a URL that is not postgresql:// or mysql://
    cfg.resolved_catalog_backend  # noqa: B018 - read to validate: raises ConfigError for an unknown backend, or thrift without metastore_uris


def _parsed(key: tuple[str, str], parse: Callable[[str], Any], text: str) -> Any:
    """``text`` parsed for ``key``; a ConfigError naming the key and what it must be."""
    try:
        return parse(text)
    except ValueError as exc:
        kinds: dict[Callable[[str], Any], str] = {
            parse_int: "an integer",
            parse_float: "a number",
            parse_bool: "a boolean",
        }
        kind = kinds.get(parse)
        if kind is None:  # a parser of its own says what is wrong
            raise ConfigError(f"[{key[0]}] {key[1]}: {exc}") from None
        raise ConfigError(f"[{key[0]}] {key[1]} must be {kind}, got {_shown(text)}") from None


def _validate_landings(cfg: Config) -> None:
    """With ``[landings] publish`` on: where Airflow is, who posts, which assets, and retries that grow."""
    from smartsensor.domain.landings import parse_hive_uri

    landings = cfg.settings.landings
    if not landings.publish:
        return
    for name in ("airflow_url", "airflow_username", "airflow_password_file", "asset_uri_prefix"):
        if not getattr(landings, name).strip():
            raise ConfigError(f"[landings] {name} is required when publish is on")
    if not landings.airflow_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"[landings] airflow_url must start with http:// or https://, got {_shown(landings.airflow_url)}"
        )
    prefix = landings.asset_uri_prefix
    if parse_hive_uri(prefix.rstrip("/") + "/db/table") is None or not prefix.endswith("/"):
        raise ConfigError(f"[landings] asset_uri_prefix must be hive://host:port/ (ending in /), got {_shown(prefix)}")
    lease = cfg.settings.smart_sensor.lease_timeout
    if landings.request_timeout + 1 >= lease:
        raise ConfigError(
            f"[landings] request_timeout ({landings.request_timeout:g}) must be under [smart_sensor] lease_timeout "
            f"({lease:g}) less 1 s: a post must end before its claim, a lease timeout long, lapses"
        )
    following = cfg.resolved_catalog_backend == "metastore_db" and cfg.settings.catalog.metastore_db_feed
    if landings.publish_recreated and not following:
        raise ConfigError(
            "[landings] publish_recreated needs the metastore's change record to tell a partition dropped and added "
            "again from one kept: [smart_sensor] catalog_backend = metastore_db with [catalog] metastore_db_feed = "
            "true (a listing backend sees the same name either way)"
        )
    if landings.retry_max < landings.retry_base:
        raise ConfigError(
            f"[landings] retry_max ({landings.retry_max:g}) must be at least retry_base ({landings.retry_base:g})"
        )


def read_secret_file(path: str, setting: str, what: str) -> str:
    """The first line of the file at ``path`` (``what``: a token, a password, kept out of the config), stripped. A
    file that cannot be read, or whose first line is blank, is a ConfigError naming ``setting``."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{setting} {path}: cannot be read ({exc.__class__.__name__}: {exc})") from None
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ConfigError(f"{setting} {path} is empty: write {what} on its first line")
    return secret
