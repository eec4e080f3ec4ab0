"""Running the suite's hypothesis state machines (``tests/integration/test_index_model.py``, ``test_landings.py``),
and the base of those that hold a memory store to its SQL one (``StoreModel``)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine
from sqlalchemy import Engine, Table, delete

from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.config import Config


class StoreModel(RuleBasedStateMachine):
    """A state machine over a SQL store and its memory twin: ``on`` binds the SQL engine and the config (a class of
    its own, so its ``steps`` start at 0), and every example starts with the ``emptied`` tables empty."""

    engine: Engine
    cfg: Config
    emptied: tuple[Table, ...] = ()
    steps = 0

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:
            for table in self.emptied:
                conn.execute(delete(table))

    @classmethod
    def on(cls, engine: Engine, cfg: Config) -> type[StoreModel]:
        """This machine on ``engine`` with ``cfg``."""
        return type(f"{cls.__name__}On{engine.dialect.name.title()}", (cls,), {"engine": engine, "cfg": cfg})


def run_model(machine: Any, examples: int, steps: int) -> None:
    """Run the state machine class ``machine`` (which counts its steps in ``machine.steps``): ``examples`` runs of
    up to ``steps`` steps, the same ones every time unless SMARTSENSOR_MODEL_RANDOM is set. Fails when fewer than
    half the steps ran (rules that never apply)."""
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=os.environ.get("SMARTSENSOR_MODEL_RANDOM") is None,
    )
    machine.TestCase().runTest()
    assert machine.steps >= examples * steps // 2, f"only {machine.steps} steps ran"
    print(f"{machine.__name__}: {machine.steps} steps")


def run_parity(machine: Any, engine: Any, examples: int, steps: int) -> None:
    """``run_model`` on a parity model (``machine``: the same operations on a store in memory and a SQL one, on
    ``machine.engine``) bound to ``engine``."""
    run_model(type(f"{machine.__name__}On{engine.dialect.name}", (machine,), {"engine": engine}), examples, steps)


@contextmanager
def sqlite_engine(path: Path) -> Iterator[Any]:
    """An engine on a new SQLite file at ``path`` with smartsensor's schema; disposed at the end."""
    engine = make_engine(f"sqlite:///{path}")
    init_db(engine)
    try:
        yield engine
    finally:
        engine.dispose()
