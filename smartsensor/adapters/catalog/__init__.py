"""Catalog backends: ``batch.BatchChecker`` answers partition and path checks over a ``ports.PartitionLister``,
either ``spark_catalog`` (the SparkSession's external catalog) or ``thrift_catalog`` (the metastore's thrift API,
no JVM), with the partition column types of ``partition_types`` cast by Spark or by ``python_casts``."""
