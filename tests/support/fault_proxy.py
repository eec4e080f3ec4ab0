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
- ``heal()``: new connections are forwarded again; those stalled stay stalled (open, silent) until ``close``.

Threads of the test process, bounded: each pump waits at most ``TICK`` seconds per call and ends with ``close``.
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from dataclasses import dataclass

TICK = 0.2  # seconds a pump waits on a socket before looking at the switches again


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket | None
    stalled: bool = False


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
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def stall(self) -> None:
        """Stop forwarding on every connection, open and new, without closing any."""
        with self._lock:
            self._stalling = True
            for pair in self._pairs:
                pair.stalled = True

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
                dst.sendall(data)
        except OSError:
            pass
        if not pair.stalled:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

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
