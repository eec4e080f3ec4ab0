"""A pipeline's Hive tables and landings, through the metastore's thrift API (no Spark, no JVM but the metastore
service's): a database, tables partitioned by string columns, and partitions added as a pipeline's commit adds them.
The benchmarks' (scripts/bench/landings.py) and the tests' (tests/support/liveness.py, the Airflow deployments, the
metastore oracle) one copy."""

from __future__ import annotations

import copy
import time
from typing import Iterable

from hmsclient.genthrift.hive_metastore.ttypes import (
    AddPartitionsRequest,
    Database,
    FieldSchema,
    Partition,
    SerDeInfo,
    StorageDescriptor,
    Table,
)

from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.config import Config

PARQUET = "org.apache.hadoop.hive.ql.io.parquet"


def parquet_table(db: str, name: str, location: str, partition_keys: list[FieldSchema]) -> Table:
    """A managed Parquet table ``db.name`` (x INT) at ``location``, partitioned by ``partition_keys``, as the
    metastore's thrift API creates it (its ``sd`` is the partitions' template too)."""
    sd = StorageDescriptor(
        cols=[FieldSchema("x", "int", None)],
        location=location,
        inputFormat=f"{PARQUET}.MapredParquetInputFormat",
        outputFormat=f"{PARQUET}.MapredParquetOutputFormat",
        compressed=False,
        numBuckets=-1,
        serdeInfo=SerDeInfo(None, f"{PARQUET}.serde.ParquetHiveSerDe", {"serialization.format": "1"}),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )
    return Table(
        tableName=name,
        dbName=db,
        owner="test",
        createTime=int(time.time()),
        lastAccessTime=0,
        retention=0,
        sd=sd,
        partitionKeys=partition_keys,
        parameters={},
        tableType="MANAGED_TABLE",
    )


class Metastore:
    """The metastore service as a pipeline sees it: a database, tables partitioned by ``ds``, and landings
    (``add_partitions``, what a pipeline's commit does), all over thrift."""

    def __init__(self, service: Config, db: str = "live") -> None:
        self.catalog = ThriftCatalog.from_config(service)
        self.warehouse = service.settings.spark.warehouse_dir
        self.db = db

    def create_tables(self, tables: Iterable[str], columns: tuple[str, ...] = ("ds",)) -> None:
        """The database ``db`` (``live``) if missing, and ``<db>.<table>`` (x INT) PARTITIONED BY ``columns``
        (strings), as Parquet."""
        location = f"file://{self.warehouse}/{self.db}.db"
        if self.db not in self.catalog.call("listing the databases", "get_all_databases"):
            self.catalog.call(
                "creating the database",
                "create_database",
                Database(name=self.db, description="", locationUri=location, parameters={}),
            )
        keys = [FieldSchema(c, "string", None) for c in columns]
        for name in tables:
            table = parquet_table(self.db, name, f"{location}/{name}", keys)
            self.catalog.call(f"creating {self.db}.{name}", "create_table", table)

    def land(self, table: str, ds: str, *more: str) -> None:
        """Add partition ds=``ds`` (and the values ``more`` of the table's further columns, in order) to
        ``<db>.<table>``; it is visible to every reader once this returns."""
        db = self.db
        got = self.catalog.call(f"reading {db}.{table}", "get_table", db, table)
        values = [ds, *more]
        part_sd = copy.deepcopy(got.sd)
        part_sd.location = got.sd.location + "".join(
            f"/{key.name}={value}" for key, value in zip(got.partitionKeys, values, strict=True)
        )
        part = Partition(values=values, dbName=db, tableName=table, sd=part_sd, parameters={})
        request = AddPartitionsRequest(dbName=db, tblName=table, parts=[part], ifNotExists=True, needResult=False)
        self.catalog.call(f"landing on {db}.{table}", "add_partitions_req", request)

    def close(self) -> None:
        self.catalog.close()
