"""The typed settings (``cfg.settings.<section>.<name>``): their fields are exactly ``config_keys.KEYS``, typed as
each key's parser returns; they hold the same values as ``cfg.get`` whatever set them; the Config cannot change
under them; and no code outside ``smartsensor/config.py`` reads a setting by its name in a string."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable, get_type_hints

import pytest

from smartsensor.config import load_config
from smartsensor.config_keys import KEYS, parse_bool, parse_float, parse_int, parse_list, parse_str, parse_tables
from smartsensor.config_settings import Settings
from tests.support.common import ROOT, make_cfg

# What each parser returns, as the field's annotation.
TYPES: dict[Callable[[str], Any], Any] = {
    parse_bool: bool,
    parse_int: int,
    parse_float: float,
    parse_str: str,
    parse_list: list[str],
    parse_tables: list[str],
}


def test_each_section_class_has_exactly_the_keys_of_its_section_with_their_types() -> None:
    sections = list(dict.fromkeys(k.section for k in KEYS))
    assert [f.name for f in dataclasses.fields(Settings)] == sections
    kinds = get_type_hints(Settings)
    for section in sections:
        kind = kinds[section]
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, section
        expected = {k.name: TYPES[k.parse] for k in KEYS if k.section == section}
        assert [f.name for f in dataclasses.fields(kind)] == list(expected), section
        assert get_type_hints(kind) == expected, section


def test_every_parser_has_a_type() -> None:
    assert {k.parse for k in KEYS} <= set(TYPES)


def flat(settings: Settings) -> dict[tuple[str, str], Any]:
    out = {}
    for section in dataclasses.fields(settings):
        group = getattr(settings, section.name)
        for f in dataclasses.fields(group):
            out[(section.name, f.name)] = getattr(group, f.name)
    return out


def test_defaults_file_and_env_give_the_same_values_through_settings_and_get(tmp_path: Path) -> None:
    cfg = load_config(environ={"SMARTSENSOR_HOME": str(tmp_path)})
    assert flat(cfg.settings) == dict(cfg.values)
    assert cfg.settings.smart_sensor.metastore_timeout == 10.0
    assert cfg.settings.core.sql_alchemy_conn == f"sqlite:///{tmp_path}/smartsensor.db"

    path = tmp_path / "airflow.cfg"
    path.write_text("[smart_sensor]\nshards = 3\nmetastore_timeout = 2.5\n[api]\nport = 9000\n")
    env = {
        "SMARTSENSOR_HOME": str(tmp_path),
        "SMARTSENSOR__API__PORT": "9001",
        "SMARTSENSOR__CATALOG__METASTORE_DB_FEED": "no",
    }
    cfg = load_config(str(path), environ=env)
    assert flat(cfg.settings) == dict(cfg.values)
    assert cfg.settings.smart_sensor.shards == 3
    assert cfg.settings.smart_sensor.metastore_timeout == 2.5
    assert cfg.settings.api.port == 9001
    assert cfg.settings.catalog.metastore_db_feed is False
    assert cfg.settings.spark.conf == [] and cfg.settings.smart_sensor.sensors_enabled == cfg.sensors_enabled


def test_make_cfg_overrides_reach_the_settings(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "sqlite:///x.db", smart_sensor__lease_timeout="30", scheduler__parallelism="3")
    assert flat(cfg.settings) == dict(cfg.values)
    assert cfg.settings.smart_sensor.lease_timeout == 30.0 == cfg.get("smart_sensor", "lease_timeout")
    assert cfg.settings.scheduler.parallelism == 3
    assert cfg.settings.core.sql_alchemy_conn == "sqlite:///x.db"


def test_a_loaded_config_cannot_change_under_its_settings(tmp_path: Path) -> None:
    cfg = load_config(environ={"SMARTSENSOR_HOME": str(tmp_path)})
    with pytest.raises(TypeError):
        cfg.values[("smart_sensor", "shards")] = 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.values = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.settings.smart_sensor.shards = 9  # type: ignore[misc]


def test_settings_refuse_values_that_do_not_match_the_keys(tmp_path: Path) -> None:
    values = dict(load_config(environ={"SMARTSENSOR_HOME": str(tmp_path)}).values)
    with pytest.raises(ValueError, match="no_such_key"):
        Settings.build({**values, ("api", "no_such_key"): 1})
    del values[("api", "port")]
    with pytest.raises(ValueError, match=r"\[api\] port"):
        Settings.build(values)


def test_no_setting_is_read_by_its_name_outside_config() -> None:
    """``cfg.get("smart_sensor", "poke_interval")`` fails only at run time when misspelt; the attribute
    ``cfg.settings.smart_sensor.poke_interval`` fails at lint. Only ``smartsensor/config.py`` reads by name."""
    sections = "|".join(sorted({re.escape(k.section) for k in KEYS}))
    pattern = re.compile(rf"""\.get\(\s*(["'])({sections})\1\s*,\s*["']""")
    found = []
    for folder in ("smartsensor", "scripts", "sensors"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "smartsensor" / "config.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "read these as cfg.settings.<section>.<name>:\n" + "\n".join(found)
