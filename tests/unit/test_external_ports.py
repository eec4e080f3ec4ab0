"""The external door on its port, without a database: registration (one try, a batch) and the states answers on the
memory store (``adapters.memory_external``), and what the door does with ``InsertConflict`` (a concurrent
registration: read the key again, up to ``RACE_ATTEMPTS`` times, then 409's "ask again"), as it did with
SQLAlchemy's IntegrityError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.memory_external import MemoryExternalTryStore
from smartsensor.config import Config
from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.states import State
from smartsensor.external.registration import (
    RACE_ATTEMPTS,
    ExternalConflict,
    ExternalRegistered,
    ExternalTry,
    register_external,
    register_externals,
)
from smartsensor.external.states import Asked, external_states
from smartsensor.ports import InsertConflict
from smartsensor.sensors.errors import SensorDefinitionError
from tests.support.common import make_cfg

KEY = ExternalKey("etl", "wait", "r1")
NAMED = {"partition_names": ["db.t/ds=1"]}
EXEC = {"poke_interval": 30, "timeout": 600}


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")


def reg(store: Any, cfg: Config, try_number: int = 1, key: ExternalKey = KEY, **persist: Any) -> ExternalRegistered:
    return register_external(store, cfg, key, try_number, "NamedHivePartitionSensor", persist or NAMED, EXEC)


def test_tries_register_and_answer_on_the_memory_store(cfg: Config) -> None:
    store = MemoryExternalTryStore()
    first = reg(store, cfg)
    again = reg(store, cfg)
    assert first.created and not again.created and again.task_instance == first.task_instance
    second = reg(store, cfg, try_number=2)
    assert second.created and store.store.tasks[first.task_instance].state == State.SKIPPED
    with pytest.raises(ExternalConflict, match="older than the registered try 2"):
        reg(store, cfg, try_number=1)
    store.store.set_state(second.task_instance, State.SUCCESS)  # a round, or a user, ended it
    answers = external_states(store, [Asked(KEY, 1), Asked(KEY, 2, second.hashcode), Asked(KEY, 3)])
    assert [(a["state"], a["reason"]) for a in answers] == [
        ("superseded", "superseded"),
        (State.SUCCESS, "landed"),
        ("unknown", "unknown"),
    ]


def test_a_batch_registers_new_tries_together_and_refuses_each_bad_one_alone(cfg: Config) -> None:
    store = MemoryExternalTryStore()
    reg(store, cfg, try_number=2)
    keys = [KEY, ExternalKey("etl", "a", "r1"), ExternalKey("etl", "b", "r1")]
    tries = [ExternalTry(k, 1, "NamedHivePartitionSensor", NAMED, EXEC) for k in keys]
    tries.append(ExternalTry(keys[1], 1, "NamedHivePartitionSensor", {"partition_names": ["no-slash"]}, EXEC))
    done = register_externals(store, cfg, tries)
    assert isinstance(done[0], ExternalConflict) and isinstance(done[3], SensorDefinitionError)
    assert [d.created for d in done[1:3] if isinstance(d, ExternalRegistered)] == [True, True]
    assert set(store.mappings) == set(keys) and len(store.store.tasks) == 3


class Raced(MemoryExternalTryStore):
    """A concurrent registration wins the first ``times`` transactions: InsertConflict, nothing written."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def register_try(self, *args: Any, **kwargs: Any) -> Any:
        if self.times:
            self.times -= 1
            raise InsertConflict("external_task moved meanwhile")
        return super().register_try(*args, **kwargs)

    def register_new_tries(self, tries: Any) -> set[ExternalKey]:
        if self.times:
            self.times -= 1
            raise InsertConflict("a key taken meanwhile")
        return super().register_new_tries(tries)


def test_a_raced_registration_reads_the_key_again_then_asks_the_caller_to(cfg: Config) -> None:
    store = Raced(times=3)
    assert reg(store, cfg).created and store.times == 0  # the fourth transaction went through
    hopeless = Raced(times=RACE_ATTEMPTS)
    with pytest.raises(ExternalConflict, match=f"met {RACE_ATTEMPTS} concurrent registrations"):
        reg(hopeless, cfg)
    assert hopeless.mappings == {} and hopeless.store.tasks == {}
    batch = Raced(times=1)  # the batch's transaction loses: each try goes on its own
    done = register_externals(batch, cfg, [ExternalTry(KEY, 1, "NamedHivePartitionSensor", NAMED, EXEC)])
    assert isinstance(done[0], ExternalRegistered) and done[0].created and set(batch.mappings) == {KEY}
