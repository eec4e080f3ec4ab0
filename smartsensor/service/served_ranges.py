"""The shard ranges one worker process serves (``ServedRanges``): those whose leases it holds (``LeasedRanges``), or
one fixed range (``PinnedRange``). Each range's rounds are a ``RangeRounds``; ``service.worker_loop`` drives these.
The names are in ARCHITECTURE.md ("Names")."""

from __future__ import annotations

import threading
from typing import Callable, Protocol

from smartsensor.config import Config
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import CheckAnswerer, RoundStore
from smartsensor.service.leases import LeaseManager
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.service.round.report import RoundResult, checks_all_failed


class ServedRanges(Protocol):
    """What a worker loop drives: the ranges one process serves."""

    def follow_leases(self) -> dict[str, list[int]]:
        """Send the lease heartbeat and serve exactly the ranges held (nothing for a pinned range); returns what
        changed."""
        ...

    def timer_rounds(self) -> list[RoundResult]:
        """One timer round over every range served."""
        ...

    def wake_rounds(self, tables: set[TableName], shardcodes: set[int] | None) -> list[RoundResult]:
        """A wake-up round at once: checks on ``tables``, new tasks of ranges holding ``shardcodes`` (None: all)."""
        ...

    def stop(self, keep_rounds: bool = False) -> None:
        """Release what is held; ``keep_rounds``: leave the status rows of the last round."""
        ...

    def held_ranges(self) -> list[tuple[int, int]]:
        """The ranges served now, ``(shard_min, shard_max)``: the landing publisher publishes their tables."""
        ...


class LeasedRanges:
    """The ranges whose leases this process holds, one ``RangeRounds`` (under the lease's fence) per lease, over one
    round store; ``answerer`` makes the timer rounds' catalog answerer, ``wake_answerer`` the wake-up rounds' (a
    client of its own). Built by ``roots.worker``."""

    def __init__(
        self,
        leases: LeaseManager,
        store: RoundStore,
        cfg: Config,
        answerer: Callable[[], CheckAnswerer],
        wake_answerer: Callable[[], CheckAnswerer],
    ) -> None:
        self.cfg = cfg
        self.leases = leases
        self.store = store
        self.answerer = answerer
        self.wake_answerer = wake_answerer  # its own metastore client: clients are not shared
        self.ranges: dict[int, RangeRounds] = {}
        self._lock = threading.Lock()

    @property
    def worker_id(self) -> str:
        return self.leases.worker_id

    def follow_leases(self) -> dict[str, list[int]]:
        """The lease heartbeat (renew, claim, release), then one RangeRounds, with the lease's fence, per lease."""
        changes = self.leases.heartbeat()
        with self._lock:
            for lo in list(self.ranges):
                if lo not in self.leases.owned:
                    del self.ranges[lo]
            for lo, lease in self.leases.owned.items():
                served = self.ranges.get(lo)
                if served is None:
                    served = RangeRounds(
                        self.store,
                        self.cfg,
                        lease.shard_min,
                        lease.shard_max,
                        range_rounds_id=f"{self.worker_id}:{lease.shard_min}-{lease.shard_max}",
                        clock=self.leases.clock.now,  # the fence is judged by the database's time, as the lease
                    )
                    self.ranges[lo] = served
                served.fence = lease.fence
        return changes

    def held_ranges(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(r.shard_min, r.shard_max) for _, r in sorted(self.ranges.items())]

    def _served(self) -> list[RangeRounds]:
        with self._lock:
            return [self.ranges[lo] for lo in sorted(self.ranges)]

    def timer_rounds(self) -> list[RoundResult]:
        """One round over every range held: one catalog call per table for all of them. Whether its checks all
        failed goes to the lease manager (``note_checks``: a worker that cannot answer hands its ranges over)."""
        served = self._served()
        results = [run_round(served, self.answerer)] if served else []
        self.leases.note_checks(checks_all_failed(results))
        return results

    def wake_rounds(self, tables: set[TableName], shardcodes: set[int] | None) -> list[RoundResult]:
        """A wake-up round at once, beside any timer round under way: the checks on ``tables`` (landing
        signals) in every range held, and the new tasks of the ranges holding ``shardcodes`` (None: all)."""
        return _wake_rounds(self._served(), self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        """Clean stop: release every lease at once so others take over without waiting for expiry.

        ``keep_rounds``: leave the status rows of the last round (``worker --once``), so that
        `smartsensor status` shows what the round did.
        """
        with self._lock:
            served = list(self.ranges.values())
            self.ranges.clear()
        self.leases.release_all()
        for r in served if not keep_rounds else ():
            try:
                r.forget()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


class PinnedRange:
    """One fixed range (``worker --shard-min/--shard-max``): no lease, no fence."""

    def __init__(
        self,
        served: RangeRounds,
        answerer: Callable[[], CheckAnswerer],
        wake_answerer: Callable[[], CheckAnswerer] | None = None,
    ) -> None:
        self.served = served
        self.answerer = answerer
        self.wake_answerer = wake_answerer or answerer

    def follow_leases(self) -> dict[str, list[int]]:
        return {}

    def held_ranges(self) -> list[tuple[int, int]]:
        return [(self.served.shard_min, self.served.shard_max)]

    def timer_rounds(self) -> list[RoundResult]:
        return [run_round([self.served], self.answerer)]

    def wake_rounds(self, tables: set[TableName], shardcodes: set[int] | None) -> list[RoundResult]:
        return _wake_rounds([self.served], self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        if keep_rounds:
            return
        try:
            self.served.forget()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def _wake_rounds(
    served: list[RangeRounds],
    answerer: Callable[[], CheckAnswerer],
    tables: set[TableName],
    shardcodes: set[int] | None,
) -> list[RoundResult]:
    if tables:  # every range: the checks on these tables, and whatever arrived
        return [run_round(served, answerer, focus=tables)] if served else []
    concerned = [r for r in served if shardcodes is None or any(r.shard_min <= c < r.shard_max for c in shardcodes)]
    return [run_round(concerned, answerer, focus=set())] if concerned else []
