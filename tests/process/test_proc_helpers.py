"""The process helpers' own promises, on a stand-in that prints round objects as `worker --json` does."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.common import wait_until
from tests.support.proc_helpers import CliProcess

# Two rounds printed; then, once `committed` exists, a round that marked, printed a while after its commit (a loaded
# machine: the round still records its status), then timer rounds until stopped.
ROUNDS = """
import json, os, sys, time
def round(marked):
    print(json.dumps({"marked": marked, "ranges": [[0, 10000]], "partial": False}), flush=True)
round({}); round({})
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
time.sleep(0.5)
round({"success": 3})
while True:
    time.sleep(0.05)
    round({})
"""


def test_settle_waits_for_the_round_that_committed_before_it(tmp_path: Path) -> None:
    """`settle` after a commit must see that round's marks, even when older rounds' lines are still queued: it waited
    for two lines, took the two queued ones at once, and the marks of the round that had just committed were missed
    (CI's kill -9 [postgres] counted 11 of 24)."""
    committed = tmp_path / "committed"
    proc = CliProcess([str(committed)], dict(os.environ), program=[sys.executable, "-c", ROUNDS])
    try:
        wait_until(lambda: proc.lines.qsize() == 2, timeout=30)  # printed, not yet waited for
        committed.touch()  # the round commits; its line comes later
        proc.settle(timeout=30)
        assert proc.marked() == 3, [json.loads(line)["marked"] for line in proc.seen]
    finally:
        proc.kill()
