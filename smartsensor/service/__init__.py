"""Service: registration, the round, the worker loop and the ranges it serves, supervisor, scheduler, classic mode,
leases, status."""
