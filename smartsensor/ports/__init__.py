"""Ports: what the service needs from the outside, as Protocols. Adapters implement them.

- ``RoundStore``: the metadata database as a shard round sees it. ``adapters.sql.round_store`` is
  the real one (SQLite or PostgreSQL); ``adapters.memory`` keeps the same rules in dicts, so the
  round's logic is unit-tested without a database.
- ``LeaseStore``: the shard_lease and worker rows the lease manager claims, renews and releases, one
  transaction at a time (``LeaseOps``). ``adapters.sql.lease_store`` and ``adapters.memory`` again.
- ``CheckAnswerer``: answers batched partition/path checks (one catalog call per table).
  ``smartsensor.adapters.catalog.batch.BatchChecker`` answers them through Spark or the metastore's thrift
  API (``[smart_sensor] catalog_backend``); a unit test answers them from a dict.

The Protocols live in modules by concern (``round``, ``catalog``, ``landings``, ``process``, ``doors``, ``status``,
and the stores' ``errors``); every name is imported from ``smartsensor.ports`` itself.
"""

from smartsensor.ports.catalog import (
    AnsweredListing,
    BatchLister,
    CheckAnswerer,
    ListingRequest,
    PartitionLister,
    PartitionTypeCache,
)
from smartsensor.ports.doors import (
    ClassicRunStore,
    DeadRunPlan,
    ExitedRunPlan,
    ExternalTryStore,
    RegistrationStore,
    RetryPlan,
    SchedulerStore,
)
from smartsensor.ports.errors import InsertConflict, StoreError, StoreUnavailable
from smartsensor.ports.landings import AssetEvents, LandingSignals, OutboxStore, TableListings
from smartsensor.ports.process import Notifications
from smartsensor.ports.round import LeaseOps, LeaseStore, RoundStore
from smartsensor.ports.status import AirflowSensorHistory, ExpiredRows, OverviewReads, StateSamples, StatusReads

__all__ = [
    "AirflowSensorHistory",
    "AnsweredListing",
    "AssetEvents",
    "BatchLister",
    "CheckAnswerer",
    "ClassicRunStore",
    "DeadRunPlan",
    "ExitedRunPlan",
    "ExpiredRows",
    "ExternalTryStore",
    "InsertConflict",
    "LandingSignals",
    "LeaseOps",
    "LeaseStore",
    "ListingRequest",
    "Notifications",
    "OutboxStore",
    "OverviewReads",
    "PartitionLister",
    "PartitionTypeCache",
    "RegistrationStore",
    "RetryPlan",
    "RoundStore",
    "SchedulerStore",
    "StateSamples",
    "StatusReads",
    "StoreError",
    "StoreUnavailable",
    "TableListings",
]
