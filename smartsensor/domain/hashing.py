"""Canonical JSON and the stable 64-bit hash that identifies a check."""

from __future__ import annotations

import json
from typing import Any

import xxhash


def canonical_json(data: dict[str, Any]) -> str:
    """JSON with sorted keys and fixed separators: equal data gives equal text in every process."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def check_hashcode(classpath: str, attr_dict: str) -> int:
    """Signed 64-bit xxh64 over the sensor's class path and its canonical attr_dict.

    Never Python's ``hash()``: it is salted per process, so identical checks registered by
    different processes would land in different shards and never be deduplicated.
    """
    digest = xxhash.xxh64_intdigest((classpath + "\x00" + attr_dict).encode("utf-8"))
    return digest - (1 << 64) if digest >= (1 << 63) else digest


def shardcode_for(hashcode: int, limit: int) -> int:
    """hashcode mod limit, always in [0, limit) (Python's % is non-negative for limit > 0)."""
    return hashcode % limit
