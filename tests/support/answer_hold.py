"""A TCP proxy between smartsensor's workers and Airflow's api-server that can hold Airflow's answers to posted
asset events: the request goes through, Airflow commits the event and answers, and the answer never reaches the
worker (a black hole for answers). With it a test kills a worker exactly while its post is in flight, after Airflow
committed, without any fault-injection setting in smartsensor itself (tests/airflow/test_landings_in_airflow.py).

``via(url)`` points the proxy at Airflow's ``url`` and returns the proxy's own URL (what the workers are given);
``hold()`` makes every connection on which a ``POST /api/v2/assets/events`` is sent from then on hold all that
Airflow sends back on it (counted in ``held``); ``forward()`` ends that for new requests (a connection already
holding keeps holding: its worker is dead). ``close()`` stops it and closes every connection.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

POSTED_EVENT = b"POST /api/v2/assets/events "


class AnswerHold:
    """The proxy, listening on 127.0.0.1 (``url``) from construction until ``close()``."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.target: tuple[str, int] | None = None
        self.holding = False
        self.held = 0  # answers Airflow gave to posts that the proxy kept from the worker
        self.posts = 0  # posts of asset events that went through
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="answer-hold", daemon=True)
        self._thread.start()

    def via(self, url: str) -> str:
        """Forward to Airflow at ``url`` (``http://host:port``); the proxy's URL."""
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        return self.url

    def hold(self) -> None:
        self.holding = True

    def forward(self) -> None:
        self.holding = False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.server.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def __enter__(self) -> AnswerHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            if self.target is None:
                _close(client)  # Airflow not up yet: refused, as a down api-server would
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            state = {"holding": False}
            threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, state), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        """Worker → Airflow: everything, marking the connection as holding once it carries a post while ``hold``."""
        try:
            while data := client.recv(65536):
                if POSTED_EVENT in data:
                    with self._lock:
                        self.posts += 1
                    if self.holding:
                        state["holding"] = True
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        """Airflow → worker: everything, but nothing at all once the connection holds (the answer is counted)."""
        counted = False
        try:
            while data := upstream.recv(65536):
                if state["holding"]:
                    if not counted:
                        with self._lock:
                            self.held += 1
                        counted = True
                    continue
                client.sendall(data)
        except OSError:
            pass
        finally:
            if not state["holding"]:
                _close(client)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
