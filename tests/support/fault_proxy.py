"""A TCP fault proxy of the tests' own (this kernel has no ``netem``): it listens on an address of the test process
and forwards each connection to one target, with faults switched at run time:

- ``latency``: each chunk (what one ``recv`` returned, up to 64 KiB) forwarded that many seconds late, in both
  directions; a direction's chunks wait in turn, so a request of several chunks, or a chunk that arrives while the
  one before is delayed, waits longer (closer to a slow link's per-segment delay than to a fixed round-trip time);
- ``drop``: each chunk dropped with that probability (the stream breaks as a lossy middlebox breaks it: the
  connection is then closed, as TCP would after the retries a lost segment costs);
- ``stall()``: every open connection, and every new one, stops forwarding for good: nothing is read or written,
  nothing closed: no RST, no FIN. The proxy's kernel still acknowledges what is sent to it, so the client's TCP
  sees a live peer that never answers (a hung middlebox, a frozen server process): keepalives and
  ``tcp_user_timeout`` cannot notice it, only a client's own deadline can;
- ``heal()``: new connections are forwarded again; those stalled stay stalled (open, silent) until ``close``;
- ``cut_at_commit(armed_by, forward_commit)``: one shot, a path lost mid-transaction. The first connection whose
  client sends ``armed_by`` (a statement of the transaction to cut) is armed; when its client then sends COMMIT
  (PostgreSQL's simple Query message, what psycopg2's ``commit()`` sends), the proxy stalls, as ``stall()``, every
  connection, open and new, and either forwards that COMMIT first (``forward_commit``: the server commits, and its
  answer is never forwarded: the client cannot know it committed) or never forwards it (the server never sees it,
  and ends the session at its ``idle_in_transaction_session_timeout``, rolling it back). ``commit_cut`` records
  when it fired and the UPDATE counts the server answered in the cut transaction.

Threads of the test process, bounded: each pump waits at most ``TICK`` seconds per call and ends with ``close``.
"""

from __future__ import annotations

import random
import re
import select
import socket
import threading
import time
from dataclasses import dataclass, field

TICK = 0.2  # seconds a pump waits on a socket before looking at the switches again
# PostgreSQL's wire protocol: a simple Query message ('Q', its length, the text, NUL) of COMMIT or ROLLBACK, and the
# CommandComplete message ('C', its length, the tag) of an UPDATE, whose tag carries the rows it changed
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
ROLLBACK = b"Q\x00\x00\x00\x0dROLLBACK\x00"
UPDATED = re.compile(rb"C\x00\x00\x00.UPDATE (\d+)\x00", re.DOTALL)


@dataclass
class CommitCut:
    """``cut_at_commit``'s one shot: what arms it, whether the COMMIT is forwarded, and once it fired, when
    (``time.monotonic``) and the rows each UPDATE of the cut transaction changed (the server's answers, forwarded
    before the COMMIT)."""

    armed_by: bytes
    forward_commit: bool
    fired_at: float | None = None
    updated: list[int] = field(default_factory=list)


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket | None
    stalled: bool = False
    armed: bool = False  # its client sent ``CommitCut.armed_by`` in the transaction under way
    updated: list[int] = field(default_factory=list)  # the rows each UPDATE changed since it was armed


class FaultProxy:
    """Forwards ``listen`` (address, port 0: any) to ``target``; ``address`` is where clients connect."""

    def __init__(self, listen: str, target: tuple[str, int]) -> None:
        self.target = target
        self.latency = 0.0
        self.drop = 0.0
        self._stalling = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._rng = random.Random(57)
        self._listener = socket.create_server((listen, 0))
        self._listener.settimeout(TICK)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self.connections = 0  # accepted so far
        self.dropped = 0  # connections broken by a dropped chunk so far
        self.commit_cut: CommitCut | None = None
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def stall(self) -> None:
        """Stop forwarding on every connection, open and new, without closing any."""
        with self._lock:
            self._stalling = True
            for pair in self._pairs:
                pair.stalled = True

    def cut_at_commit(self, armed_by: bytes, forward_commit: bool) -> CommitCut:
        """Arm the one-shot cut at the COMMIT of the first transaction that sends ``armed_by`` (module docstring)."""
        with self._lock:
            self.commit_cut = CommitCut(armed_by, forward_commit)
            return self.commit_cut

    def heal(self) -> None:
        """Forward new connections again (the stalled ones stay silent)."""
        with self._lock:
            self._stalling = False

    def stalled_connections(self) -> int:
        with self._lock:
            return sum(p.stalled for p in self._pairs)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            with self._lock:
                pair = _Pair(client, None, stalled=self._stalling)
                self._pairs.append(pair)
            if pair.stalled:
                continue  # accepted by the kernel, never answered, never closed
            try:
                pair.server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            for src, dst in ((client, pair.server), (pair.server, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if pair.stalled:
                    self._closed.wait(TICK)
                    continue
                ready, _, _ = select.select([src], [], [], TICK)
                if not ready or pair.stalled:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if self.drop and self._rng.random() < self.drop:
                    self.dropped += 1
                    break  # a lost segment the stream cannot recover here: the connection breaks
                if self.latency:
                    time.sleep(self.latency)
                self._forward(pair, src is pair.client, data, dst)
        except OSError:
            pass
        if not pair.stalled:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _forward(self, pair: _Pair, from_client: bool, data: bytes, dst: socket.socket) -> None:
        """Send ``data`` on, unless the pair stalled (a chunk read as the stall began is never forwarded after it);
        ``cut_at_commit``'s watch sees it first."""
        with self._lock:
            if pair.stalled:
                return
            cut = self.commit_cut
            if cut is not None and cut.fired_at is None:
                self._watch_commit(pair, from_client, data, cut)
                if pair.stalled and not cut.forward_commit:  # it fired on this chunk, its COMMIT: never sent
                    return
            dst.sendall(data)

    def _watch_commit(self, pair: _Pair, from_client: bool, data: bytes, cut: CommitCut) -> None:
        """``cut_at_commit``'s watch of one chunk (under the lock): arm, disarm, count an UPDATE's rows, or fire
        (every connection stalled, this one first)."""
        if not from_client:
            if pair.armed:
                pair.updated += [int(n) for n in UPDATED.findall(data)]
            return
        if pair.armed and COMMIT in data:
            cut.fired_at, cut.updated = time.monotonic(), list(pair.updated)
            self._stalling = True
            for each in self._pairs:
                each.stalled = True
        elif pair.armed and ROLLBACK in data:
            pair.armed, pair.updated = False, []
        elif not pair.armed and cut.armed_by in data:
            pair.armed, pair.updated = True, []

    def close(self) -> None:
        """Stop everything and close every socket (stalled ones too)."""
        self._closed.set()
        self._listener.close()
        with self._lock:
            for pair in self._pairs:
                for sock in (pair.client, pair.server):
                    if sock is not None:
                        sock.close()
            self._pairs.clear()
