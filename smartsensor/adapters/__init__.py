"""Adapters: what talks to the outside (SQL store, signal transport, Spark, the local metastore, processes)."""
