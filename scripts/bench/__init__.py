"""The benchmarks: ``bench`` (the same workload checked several ways; ./scripts/bench.sh), its ``catalog`` side,
``workload`` set-up and ``sql``; ``api`` (load on ``smartsensor serve``; ./scripts/bench_api.sh); ``matching``,
``templates`` and ``install`` (``python -m scripts.bench.<name>``)."""
