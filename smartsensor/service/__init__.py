"""Service: registration, the shard round, the worker runner and supervisor, scheduler, classic mode, leases, status."""
