"""A small threaded TCP proxy on loopback that can cut every connection on demand.

Used to put a network fault between one scheduler instance and PostgreSQL:
``cut()`` closes both ends of every open connection at once (a transaction in
flight sees its connection drop), and ``refuse_for(seconds)`` additionally
makes new connections fail for a while (a short outage). Only loopback
addresses are accepted, for both the listening and the upstream side.

Usage::

    with TcpProxy(upstream_port=5432) as proxy:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
        ...
        proxy.cut()
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["TcpProxy"]

CHUNK: Final = 65536
POLL_SECONDS: Final = 0.2  # how often idle threads look at the stop flag
CONNECT_TIMEOUT: Final = 5.0


def _check_loopback(host: str) -> None:
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"TcpProxy only talks to loopback addresses, not {host!r}")


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream_host:upstream_port`` (loopback only).

    Args:
        upstream_port: The port to forward to.
        upstream_host: The address to forward to; must be a loopback address.
        listen_host: The address to listen on; must be a loopback address.
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", listen_host: str = "127.0.0.1") -> None:
        _check_loopback(upstream_host)
        _check_loopback(listen_host)
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL_SECONDS)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._refuse_until = 0.0  # monotonic
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.accepted = 0  # connections accepted and forwarded, in all
        self.cuts = 0  # connections closed by cut()
        self._acceptor = threading.Thread(target=self._accept_loop, name="tcp-proxy-accept", daemon=True)

    def start(self) -> TcpProxy:
        """Start accepting connections."""
        self._acceptor.start()
        return self

    def open_connections(self) -> int:
        """How many proxied connections are open now."""
        with self._lock:
            return len(self._pairs)

    def cut(self) -> int:
        """Close both ends of every open connection now; return how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, set()
            self.cuts += len(pairs)
        for client, upstream in pairs:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
        return len(pairs)

    def refuse_for(self, seconds: float) -> int:
        """Cut every connection and close new ones at once for `seconds`; return how many were cut."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds
        return self.cut()

    def stop(self) -> None:
        """Stop accepting, cut everything and join the threads (bounded)."""
        self._stopping.set()
        self._acceptor.join(5.0)
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()
        for t in self._threads:
            t.join(5.0)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refusing = time.monotonic() < self._refuse_until
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=CONNECT_TIMEOUT)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
            t = threading.Thread(target=self._pump, args=(pair,), name="tcp-proxy-pump", daemon=True)
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
            t.start()

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        client, upstream = pair
        peers = {client: upstream, upstream: client}
        try:
            while not self._stopping.is_set():
                readable, _, _ = select.select(list(peers), [], [], POLL_SECONDS)
                for sock in readable:
                    data = sock.recv(CHUNK)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return  # cut (closed under us) or reset by a peer
        finally:
            with self._lock:
                self._pairs.discard(pair)
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.close()
