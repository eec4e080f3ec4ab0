"""Config lookup order, env overrides, typing and shard-range validation."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from smartsensor.config import ConfigError, ShardRange, even_shard_ranges, load_config, parse_shard_ranges
from tests.support.common import ROOT


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path: Path) -> None:
    cfg = load_config(environ={"SMARTSENSOR_HOME": str(tmp_path)})
    assert not cfg.file_found
    assert cfg.sql_alchemy_conn == f"sqlite:///{tmp_path}/smartsensor.db"
    assert cfg.use_smart_sensor is True
    assert cfg.shard_code_upper_limit == 10000
    assert cfg.resolved_shard_ranges == [
        ShardRange(0, 2000),
        ShardRange(2000, 4000),
        ShardRange(4000, 6000),
        ShardRange(6000, 8000),
        ShardRange(8000, 10000),
    ]
    assert "NamedHivePartitionSensor" in cfg.sensors_enabled


def test_lookup_order(tmp_path: Path) -> None:
    home_cfg = write(tmp_path / "home" / "airflow.cfg", "[smart_sensor]\nshards = 2\n")
    env_cfg = write(tmp_path / "env.cfg", "[smart_sensor]\nshards = 3\n")
    cli_cfg = write(tmp_path / "cli.cfg", "[smart_sensor]\nshards = 4\n")
    env = {"SMARTSENSOR_HOME": str(home_cfg.parent)}
    assert len(load_config(environ=env).resolved_shard_ranges) == 2
    env["SMARTSENSOR_CONFIG"] = str(env_cfg)
    assert len(load_config(environ=env).resolved_shard_ranges) == 3
    assert len(load_config(str(cli_cfg), environ=env).resolved_shard_ranges) == 4


def test_env_overrides_file_and_ignores_airflow_env(tmp_path: Path) -> None:
    path = write(tmp_path / "a.cfg", "[smart_sensor]\nshard_code_upper_limit = 100\nshards = 2\n")
    env = {
        "SMARTSENSOR_HOME": str(tmp_path),
        "SMARTSENSOR__SMART_SENSOR__SHARDS": "4",
        "AIRFLOW__SMART_SENSOR__SHARDS": "7",
    }
    cfg = load_config(str(path), environ=env)
    assert [str(r) for r in cfg.resolved_shard_ranges] == ["0-25", "25-50", "50-75", "75-100"]


def test_missing_cli_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "nope.cfg"), environ={})


def test_non_integer_names_section_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "a.cfg", "[smart_sensor]\nshards = five\n")
    with pytest.raises(ConfigError, match=r"\[smart_sensor\] shards must be an integer, got 'five'"):
        load_config(str(path), environ={})


def test_bad_boolean(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[smart_sensor\] use_smart_sensor must be a boolean"):
        load_config(environ={"SMARTSENSOR_HOME": str(tmp_path), "SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR": "maybe"})


def test_unknown_keys_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "a.cfg", "[smart_sensor]\nshardz = 3\n[nosection]\nx = 1\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_config(str(path), environ={"SMARTSENSOR__CORE__NOPE": "1"})
    assert any("shardz" in w for w in cfg.warnings)
    assert any("[nosection] x" in w for w in cfg.warnings)
    assert any("[core] nope" in w for w in cfg.warnings)
    assert "shardz" in caplog.text


def test_unparseable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a.cfg", "no section header\n")
    with pytest.raises(ConfigError, match="cannot be parsed"):
        load_config(str(path), environ={})


@pytest.mark.parametrize(
    "raw,message",
    [
        ("0-2000, 1500-10000", "range 1500-10000 overlaps"),
        ("0-2000, 2500-10000", "range 2500-10000 leaves a gap 2000-2500"),
        ("0-2000, 2000-9000", "leaves a gap 9000-10000 at the end"),
        ("100-2000, 2000-10000", "range 100-2000 leaves a gap 0-100"),
        ("0-2000, 2000-12000", "range '2000-12000' falls outside"),
        ("0-2000, 2000-x", "range '2000-x' has a non-integer bound"),
        ("0-2000, 3000-3000, 2000-10000", "range '3000-3000' is empty"),
        ("0-2000-3000", "is not of the form LO-HI"),
    ],
)
def test_shard_range_errors_name_the_range(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_shard_ranges(raw, 10000)


def test_explicit_ranges_override_even_split(tmp_path: Path) -> None:
    path = write(tmp_path / "a.cfg", "[smart_sensor]\nshards = 9\nshard_ranges = 2000-7000, 0-2000,\n  7000-10000\n")
    cfg = load_config(str(path), environ={})
    assert [str(r) for r in cfg.resolved_shard_ranges] == ["0-2000", "2000-7000", "7000-10000"]


def test_config_errors_at_load_time(tmp_path: Path) -> None:
    path = write(tmp_path / "a.cfg", "[smart_sensor]\nshard_ranges = 0-10, 20-10000\n")
    with pytest.raises(ConfigError, match="20-10000 leaves a gap 10-20"):
        load_config(str(path), environ={})


@pytest.mark.parametrize(
    "body,message",
    [
        ("[smart_sensor]\nheartbeat_interval = 5\nlease_timeout = 5\n", "lease_timeout (5.0) must be greater"),
        (
            "[scheduler]\ntask_heartbeat_interval = 10\nzombie_threshold = 15\n",
            "zombie_threshold (15.0) must be at least twice task_heartbeat_interval (10.0)",
        ),
        ("[scheduler]\nparallelism = 0\n", "parallelism must be between 1 and 1000, got 0"),
    ],
)
def test_inconsistent_timings_are_load_errors(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path / "a.cfg", body)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(str(path), environ={})


def test_even_split_covers_everything() -> None:
    for shards, limit in [(1, 1), (3, 10), (7, 10000), (10000, 10000)]:
        ranges = even_shard_ranges(shards, limit)
        assert ranges[0].lo == 0 and ranges[-1].hi == limit
        assert all(a.hi == b.lo for a, b in zip(ranges, ranges[1:], strict=False))
        assert all(r.lo < r.hi for r in ranges)
    with pytest.raises(ConfigError):
        even_shard_ranges(0, 10)


def test_example_file_documents_every_key_with_its_default() -> None:
    from smartsensor.config_keys import KEYS

    example = ROOT / "airflow.cfg.example"
    text = example.read_text()
    for key in KEYS:
        assert f"[{key.section}]" in text
        assert f"# {key.name} = {key.default}" in text or f"{key.name} = {key.default}" in text, key.name
    cfg = load_config(str(example), environ={"SMARTSENSOR_HOME": "/tmp/x"})
    assert not cfg.warnings


def test_example_config_is_the_rendered_key_table() -> None:
    from smartsensor.config_keys import render_config

    assert (ROOT / "airflow.cfg.example").read_text() == render_config({}), (
        'regenerate: python -c "from smartsensor.config_keys import render_config; '
        "open('airflow.cfg.example', 'w').write(render_config({}))\""
    )


def test_every_numeric_key_has_bounds() -> None:
    from smartsensor.config_keys import KEYS, parse_float, parse_int

    assert [k.name for k in KEYS if k.parse in (parse_int, parse_float) and k.bounds is None] == []


@pytest.mark.parametrize(
    "body,backend",
    [
        ("", "spark"),
        ("[spark]\nmetastore_uris = thrift://h:9083\n", "thrift"),
        ("[smart_sensor]\ncatalog_backend = spark\n[spark]\nmetastore_uris = thrift://h:9083\n", "spark"),
        ("[smart_sensor]\ncatalog_backend = Thrift\n[spark]\nmetastore_uris = thrift://h:9083\n", "thrift"),
    ],
)
def test_catalog_backend_auto_resolves_by_metastore_uris(tmp_path: Path, body: str, backend: str) -> None:
    assert load_config(str(write(tmp_path / "a.cfg", body)), environ={}).resolved_catalog_backend == backend


@pytest.mark.parametrize(
    "body,message",
    [
        ("[smart_sensor]\ncatalog_backend = thrift\n", "catalog_backend = thrift needs [spark] metastore_uris"),
        (
            "[smart_sensor]\ncatalog_backend = jdbc\n",
            "catalog_backend must be one of auto, thrift, spark, metastore_db, got 'jdbc'",
        ),
        (
            "[smart_sensor]\ncatalog_backend = metastore_db\n",
            "catalog_backend = metastore_db needs [catalog] metastore_db_url, the metastore's PostgreSQL or MySQL",
        ),
        (
            "[smart_sensor]\ncatalog_backend = metastore_db\n[catalog]\nmetastore_db_url = oracle://u:secret@h/hive\n",
            "got 'oracle://…'",
        ),
        ("[smart_sensor]\nmetastore_timeout = 0\n", "metastore_timeout must be between 0.1 and 3600, got 0"),
    ],
)
def test_catalog_backend_errors_at_load_time(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(str(write(tmp_path / "a.cfg", body)), environ={})


def test_metastore_database_url_empty_is_derby_and_postgresql_is_parsed_for_jdbc(tmp_path: Path) -> None:
    assert load_config(environ={"SMARTSENSOR_HOME": str(tmp_path)}).metastore_service_db is None
    body = "[metastore]\ndatabase_url = postgresql+psycopg2://hive:p%40ss%3Aw@db.example:5433/meta store\n"
    db = load_config(str(write(tmp_path / "a.cfg", body)), environ={}).metastore_service_db
    assert db is not None
    assert (db.host, db.port, db.database, db.user, db.password) == ("db.example", 5433, "meta store", "hive", "p@ss:w")
    assert db.jdbc_url == "jdbc:postgresql://db.example:5433/meta%20store"  # no credentials in the URL
    assert db.shown == "postgresql://hive@db.example:5433/meta%20store" and "p@ss" not in repr(db)
    bare = write(tmp_path / "b.cfg", "[metastore]\ndatabase_url = postgres://hive@[::1]/hive\n")
    assert load_config(str(bare), environ={}).metastore_service_db.jdbc_url == "jdbc:postgresql://[::1]:5432/hive"


@pytest.mark.parametrize("scheme", ["mysql", "mysql+pymysql", "mariadb"])
def test_metastore_database_url_mysql_is_parsed_for_the_mariadb_jdbc_driver(tmp_path: Path, scheme: str) -> None:
    body = f"[metastore]\ndatabase_url = {scheme}://hive:p%40ss@db.example/meta\n"
    db = load_config(str(write(tmp_path / "a.cfg", body)), environ={}).metastore_service_db
    assert db is not None
    assert (db.kind, db.host, db.port, db.database, db.user, db.password) == (
        *("mysql", "db.example", 3306, "meta", "hive", "p@ss"),
    )
    assert db.jdbc_url == "jdbc:mariadb://db.example:3306/meta?useMysqlMetadata=true"  # no credentials in it
    assert db.shown == "mysql://hive@db.example:3306/meta" and "p@ss" not in repr(db)


@pytest.mark.parametrize(
    "url,message",
    [
        (
            "sqlite:///x.db",
            "database_url must be postgresql://user:password@host:port/db or mysql://user:password@host:port/db "
            "(or empty for embedded Derby)",
        ),
        ("mysql://:pw@h/hive", "database_url names no user"),
        ("mysql://hive@h/hive", "database_url names no password: on MySQL the metastore service needs one"),
        ("mysql://hive:pw@h/hive?useSSL=true", "must name one database and take no ?parameters"),
        ("hive@h/hive", "database_url is not a URL of the form postgresql://"),
        ("postgresql://:pw@h/hive", "database_url names no user"),
        ("postgresql://hive:pw@h", "database_url names no database"),
        ("postgresql://hive:pw@h:99999/hive", "database_url is not a URL of the form"),
        ("postgresql://hive:pw@h/hive?sslmode=require", "must name one database and take no ?parameters"),
    ],
)
def test_metastore_database_url_errors_at_load_time_without_the_password(
    tmp_path: Path, url: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_config(str(write(tmp_path / "a.cfg", f"[metastore]\ndatabase_url = {url}\n")), environ={})
    assert "pw" not in str(err.value)


def test_metastore_uris_parse_in_order_and_a_bad_one_is_named(tmp_path: Path) -> None:
    good = write(tmp_path / "a.cfg", "[spark]\nmetastore_uris = thrift://h1:9083, thrift://h2:9084\n")
    assert load_config(str(good), environ={}).metastore_uris == [("h1", 9083), ("h2", 9084)]
    bad = write(tmp_path / "b.cfg", "[spark]\nmetastore_uris = thrift://h1:9083, h2:9084\n")
    with pytest.raises(ConfigError, match=re.escape("[spark] metastore_uris: 'h2:9084' is not of the form")):
        load_config(str(bad), environ={})


LANDINGS_ON = (
    "[landings]\npublish = true\nairflow_url = http://af:8080\nairflow_username = u\n"
    "airflow_password_file = /tmp/pw\nasset_uri_prefix = hive://meta:10000/\n"
)
METASTORE_DB = "[smart_sensor]\ncatalog_backend = metastore_db\n[catalog]\nmetastore_db_url = postgresql://u@h/hive\n"


@pytest.mark.parametrize(
    "body,message",
    [
        (LANDINGS_ON + "publish_recreated = db.a\n", "publish_recreated needs the metastore's change record"),
        (
            LANDINGS_ON + "publish_recreated = *\n" + METASTORE_DB + "metastore_db_feed = false\n",
            "publish_recreated needs the metastore's change record",
        ),
        (LANDINGS_ON + "publish_recreated = events\n", "not a table name of the form db.table: 'events'"),
        (LANDINGS_ON + "publish_recreated = *, db.a\n", "'*' means every table: give it alone"),
    ],
)
def test_publishing_recreated_partitions_needs_the_change_record(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(str(write(tmp_path / "a.cfg", body)), environ={})


def test_publishing_recreated_partitions_on_the_change_record_loads(tmp_path: Path) -> None:
    body = LANDINGS_ON + "publish_recreated = DB.A, db.b\n" + METASTORE_DB
    cfg = load_config(str(write(tmp_path / "a.cfg", body)), environ={})
    assert cfg.settings.landings.publish_recreated == ["db.a", "db.b"]
