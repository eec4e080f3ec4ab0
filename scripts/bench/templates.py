"""Rendering persist-field templates at registration: the bounded, cached renderer vs a sandbox compile per value.

Pure Python. Each value is rendered N times, as a file registering N tasks with the same template does;
both strategies run in the same process, one after the other, and give the same strings.
    python -m scripts.bench.templates --renders 20000
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime

from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from smartsensor.sensors.templating import render_value, template_context

TEMPLATES = ("demo.events/ds={{ ds }}/hr=00", "{{ macros.ds_add(ds, -1) }}", "/data/{{ ds_nodash }}/_SUCCESS")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=20_000, help="Renders per template.")
    args = parser.parse_args()
    context = template_context(datetime(2026, 11, 22))
    plain = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    print(f"{'template':<34} {'renders':>8} {'compile each (s)':>17} {'bounded+cached (s)':>19} {'ratio':>6}")
    for template in TEMPLATES:
        started = time.perf_counter()
        before = [plain.from_string(template).render(context) for _ in range(args.renders)]
        t_plain = time.perf_counter() - started
        started = time.perf_counter()
        ours = [render_value("f", template, context) for _ in range(args.renders)]
        t_ours = time.perf_counter() - started
        assert before == ours
        print(f"{template:<34} {args.renders:>8,} {t_plain:>17.2f} {t_ours:>19.2f} {t_plain / t_ours:>5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
