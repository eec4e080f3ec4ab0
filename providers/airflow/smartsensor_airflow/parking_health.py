"""Whether parked tries have an attendant (issue 66), kept where a platform team looks: the parking pool's description
in Airflow (the UI's Pools page) carries each attendant's heartbeat, and ``python -m smartsensor_airflow.attendant
status`` reads it beside the tries that wait, for a probe or an alert (exit 1: tries wait and no attendant lives).

No process of Airflow's ends a parked try by itself: with no attendant they wait, as deferred tries wait while no
triggerer runs. Run two attendants (each ends or hands back only what is still parked); alert on ``status``."""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from smartsensor_airflow._compat import pool_model, task_instance_model, write_variable
from smartsensor_airflow.start import ATTENDANT_VARIABLE

DESCRIPTION = "smartsensor: parked sensor tries"
ALIVE = re.compile(r"attendant (?P<who>\S+) alive at (?P<at>\S+?);")
HEARTBEAT_EVERY = 10.0  # seconds between two heartbeats of an attendant
ALIVE_FOR = 60.0  # seconds a heartbeat vouches for an attendant ([smartsensor] park_attendant_timeout)


def heartbeat(session: Any, pool: str, watched: int, now: datetime | None = None) -> bool:
    """Write this attendant's heartbeat into the parking pool's description (a guarded update of that one column),
    and into the ``start.ATTENDANT_VARIABLE`` Variable, which DAG parsing reads (``park = auto``): whether the pool
    was there."""
    from sqlalchemy import update

    Pool = pool_model()
    now = now or datetime.now(timezone.utc)
    who = f"{socket.gethostname()}:{os.getpid()}"
    at = now.isoformat(timespec="seconds")
    text = f"{DESCRIPTION}; attendant {who} alive at {at}; {watched} watched"
    result = session.execute(update(Pool).where(Pool.pool == pool).values(description=text))
    write_variable(ATTENDANT_VARIABLE, json.dumps({"alive_at": at, "attendant": who, "pool": pool}), session)
    return bool(result.rowcount)


@dataclass(frozen=True)
class ParkingHealth:
    """The parked tries and their attendant, as Airflow's database says: how many tries wait in the pool and the
    oldest's wait (seconds, by its last change), the pool's slots, and the last heartbeat (who, when)."""

    parked: int
    oldest_wait: float | None
    slots: int | None
    attendant: str | None
    alive_at: datetime | None
    now: datetime
    alive_for: float = ALIVE_FOR

    @property
    def attended(self) -> bool:
        """Whether an attendant's heartbeat is younger than ``alive_for`` seconds."""
        return self.alive_at is not None and (self.now - self.alive_at) <= timedelta(seconds=self.alive_for)

    @property
    def unattended(self) -> int:
        """The tries that wait with no attendant alive (0 while one is)."""
        return 0 if self.attended else self.parked

    def line(self) -> str:
        """One line for a person or a log."""
        if self.slots is None:
            return "parking pool missing: no attendant has run"
        beat = (
            "no attendant has written a heartbeat"
            if self.alive_at is None
            else f"last heartbeat {(self.now - self.alive_at).total_seconds():.0f} s ago ({self.attendant})"
        )
        wait = "" if self.oldest_wait is None else f", the oldest changed {self.oldest_wait:.0f} s ago"
        state = "attended" if self.attended else f"UNATTENDED: {self.unattended} tries wait with no attendant"
        return f"{self.parked} parked tries{wait}; pool slots {self.slots}; {beat}; {state}"


def parking_health(session: Any, pool: str, now: datetime | None = None, alive_for: float = ALIVE_FOR) -> ParkingHealth:
    """Read the parked tries and the parking pool's heartbeat (one younger than ``alive_for`` seconds vouches)."""
    from sqlalchemy import func, select

    Pool = pool_model()
    TaskInstance = task_instance_model()
    now = now or datetime.now(timezone.utc)
    row = session.execute(select(Pool.slots, Pool.description).where(Pool.pool == pool)).first()
    parked, oldest = session.execute(
        select(func.count(), func.min(TaskInstance.updated_at)).where(
            TaskInstance.state == "scheduled", TaskInstance.pool == pool
        )
    ).one()
    who = alive_at = None
    if row is not None and (match := ALIVE.search(str(row[1] or ""))) is not None:
        who = match.group("who")
        try:
            alive_at = datetime.fromisoformat(match.group("at"))
        except ValueError:
            alive_at = None
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=timezone.utc)
    wait = None if oldest is None else max(0.0, (now - oldest).total_seconds())
    slots = None if row is None else int(row[0])
    return ParkingHealth(int(parked), wait, slots, who, alive_at, now, alive_for)
