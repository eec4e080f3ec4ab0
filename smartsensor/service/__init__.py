"""The service core, below both doors (standalone, external): task rows, the round, the worker loop and the ranges
it serves, supervisor, leases, signals, status."""
