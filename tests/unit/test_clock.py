"""The one clock (``domain.clock``): aware UTC in, naive UTC text out, and the strings that were naive stay so."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from smartsensor.domain import clock
from smartsensor.sensors.templating import template_context
from tests.support.common import DAY

PARIS = timezone(timedelta(hours=1))


def test_now_is_aware_utc() -> None:
    before = datetime.now(timezone.utc)
    now = clock.now()
    assert now.tzinfo is timezone.utc and before <= now <= datetime.now(timezone.utc)


def test_a_naive_datetime_is_refused_where_an_aware_one_is_required() -> None:
    with pytest.raises(clock.NaiveDatetimeError, match="naive datetime 2026-11-22T00:00:00"):
        clock.aware_utc(DAY.replace(tzinfo=None))
    with pytest.raises(clock.NaiveDatetimeError):
        clock.naive_utc(DAY.replace(tzinfo=None))
    assert clock.aware_utc(datetime(2026, 11, 22, 1, tzinfo=PARIS)) == DAY


def test_as_utc_reads_a_naive_time_as_utc_and_converts_an_aware_one() -> None:
    assert clock.as_utc(datetime(2026, 11, 22)) == DAY
    assert clock.as_utc(datetime(2026, 11, 22, 1, tzinfo=PARIS)).tzinfo is timezone.utc
    assert clock.as_utc(datetime(2026, 11, 22, 1, tzinfo=PARIS)) == DAY


def test_iso_is_the_naive_utc_text_the_api_and_cli_print() -> None:
    assert clock.iso(DAY) == "2026-11-22T00:00:00"
    assert clock.iso(datetime(2026, 11, 22, 7, 30, 1, 5, tzinfo=PARIS)) == "2026-11-22T06:30:01.000005"


def test_templates_see_an_aware_day_as_they_saw_the_naive_one() -> None:
    aware, naive = template_context(DAY), template_context(DAY.replace(tzinfo=None))
    assert aware.keys() == naive.keys()
    assert {k: v for k, v in aware.items() if k != "macros"} == {k: v for k, v in naive.items() if k != "macros"}
    assert aware["ts"] == "2026-11-22T00:00:00" and aware["execution_date"].tzinfo is None
