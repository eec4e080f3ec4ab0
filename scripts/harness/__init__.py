"""What the benchmarks, the demos and tests/support share to set up and measure (one copy each): throwaway databases
on a PostgreSQL or MySQL server, a pipeline's Hive tables and landings over the metastore's thrift API, and what a
process costs, read from /proc. tests/support imports it; it imports nothing of tests/."""
