"""The bounded HTTP server of ``persched web`` and the metrics endpoint.

The rule: a client holds a thread only once its whole request has arrived. Threads:

- the reader (``{name}``, ``persched-web`` or ``persched-metrics``: the thread in `serve_forever`)
  owns the listening socket and every connection until its request is complete: non-blocking
  sockets on a selector, a buffer and a deadline each. It enforces `Limits`, answers refusals
  itself without blocking, and hands each complete request to the workers over a bounded queue.
  Nothing else touches those connections, so they need no lock.
- the workers (``{name}-{i}``, `Limits.workers`) each run the WSGI application on one
  complete request, write the response on the now blocking socket within `Limits.write_timeout`,
  and close it.

So a slow client costs a buffer, never a thread. Beyond `Limits.max_connections`, a new connection
evicts the one with the least to lose (`Server._make_room`). Why not wsgiref's threading server, and
the eviction order: docs/explanation/interfaces.md, "The bounded HTTP server".
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import selectors
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Final
from wsgiref.handlers import SimpleHandler

from ... import _realtime
from ...errors import PerschedError
from .refusals import RefusalLog
from .wire import HEAD_END, Refusal, content_length, parse_head, plain_response

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

    from _typeshed import OptExcInfo
    from _typeshed.wsgi import WSGIApplication

__all__ = ["Limits", "Server"]

logger = logging.getLogger(__name__)

_RECV_BYTES: Final = 65_536
_LINGER_SECONDS: Final = 2.0  # after a refusal, input is read and dropped this long so the client sees the answer


@dataclass(frozen=True)
class Limits:
    """What one client may take of a `Server`.

    Attributes:
        workers: Threads that run the application (requests served at once).
        max_connections: Connections being read at once; a new one beyond it closes one (`Server._make_room`).
        read_timeout: Seconds from a connection's accept to the end of its request (then 408 and closed).
        write_timeout: Seconds a client has to take its response.
        max_header_bytes: Request line and headers together (over it: 431).
        max_body_bytes: A request body (``Content-Length``; over it: 413).
        queue_size: Complete requests waiting for a worker (over it: 503).
    """

    workers: int = 8
    max_connections: int = 256
    read_timeout: float = 10.0
    write_timeout: float = 10.0
    max_header_bytes: int = 16_384
    max_body_bytes: int = 16_384
    queue_size: int = 64

    def __post_init__(self) -> None:
        for name in ("workers", "max_connections", "max_header_bytes", "queue_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PerschedError(f"{name}: must be a whole number >= 1, got {value!r}")
        body: object = self.max_body_bytes
        if isinstance(body, bool) or not isinstance(body, int) or body < 0:
            raise PerschedError(f"max_body_bytes: must be a whole number >= 0, got {body!r}")
        for name in ("read_timeout", "write_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86_400:
                raise PerschedError(f"{name}: must be seconds > 0 and < 86400, got {value!r}")


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes


class _Connection:
    """A connection the reader holds until its request is complete (the reader's alone: no lock)."""

    __slots__ = ("address", "buffer", "deadline", "draining", "head", "head_end", "length", "sock")

    def __init__(self, sock: socket.socket, address: str, deadline: float) -> None:
        self.sock = sock
        self.address = address
        self.deadline = deadline
        self.buffer = bytearray()
        self.head_end: int | None = None  # index of the body's first byte, once the head is complete
        self.length = 0  # the body's Content-Length
        self.head: tuple[str, str, str, list[tuple[str, str]]] | None = None  # method, target, version, headers
        self.draining = False  # refused: its input is read and dropped until EOF or the deadline


class Server:
    """An HTTP/1.0 server of one WSGI application within `limits`.

    `socketserver`'s interface: `serve_forever` on a thread of the caller's, then `shutdown` (from
    another thread) and `server_close`.

    Args:
        host: The address to bind ("127.0.0.1", "::1", "0.0.0.0", a name).
        port: The port (0: any free one; read `server_port`).
        app: The WSGI application; may be set later through `app` (before serving).
        limits: See `Limits`.
        name: Names the threads (``{name}``, ``{name}-{i}``) and the log lines.

    Raises:
        PerschedError: The address cannot be bound.
    """

    def __init__(
        self, host: str, port: int, app: WSGIApplication | None = None, *, limits: Limits | None = None, name: str
    ) -> None:
        self.app = app
        self.limits = limits or Limits()
        self.name = name
        try:
            family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            self.socket = socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN)
        except (OSError, UnicodeError) as exc:
            raise PerschedError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from exc
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self.server_port: int = self.server_address[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._queue: queue.Queue[tuple[_Connection, _Request] | None] = queue.Queue(self.limits.queue_size)
        self._stopping = threading.Event()
        self._running = threading.Event()
        self._done = threading.Event()
        self._done.set()
        # Connections being read, oldest first: deadlines come in this order (one read_timeout each).
        self._reading: collections.OrderedDict[int, _Connection] = collections.OrderedDict()
        self._refusals = RefusalLog(logger)  # the reader's: a flood of refused requests logs a line a minute

    # The socketserver interface.

    def serve_forever(self) -> None:
        """Accept and read on this thread, serve on the workers, until `shutdown`."""
        if self.app is None:
            raise PerschedError("Server.app is not set")
        self._done.clear()
        workers = [
            threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
            for i in range(self.limits.workers)
        ]
        for worker in workers:
            worker.start()
        selector = selectors.DefaultSelector()
        try:
            selector.register(self.socket, selectors.EVENT_READ, None)
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            self._running.set()
            while not self._stopping.is_set():
                for key, _ in selector.select(self._next_timeout()):
                    if key.fileobj is self.socket:
                        self._accept(selector)
                    elif key.fileobj is self._wake_r:
                        self._drain_wakeups()
                    else:
                        self._on_readable(selector, key.data)
                self._expire(selector)
        finally:
            for conn in list(self._reading.values()):
                self._forget(selector, conn)
            selector.close()
            for _ in workers:
                self._queue.put(None)  # each worker ends at its None, after the requests queued before it
            for worker in workers:
                worker.join(self.limits.write_timeout + 1.0)
            self._running.clear()
            self._done.set()

    def shutdown(self) -> None:
        """Stop `serve_forever` and wait until it has returned (its workers finished their responses)."""
        self._stopping.set()
        with contextlib.suppress(OSError):  # the wake-up pipe is full (a wake-up is pending already) or closed
            self._wake_w.send(b"x")
        self._done.wait()

    def wait_serving(self, timeout: float | None = None) -> bool:
        """Wait until `serve_forever` accepts connections, its workers started; False if `timeout` passed first."""
        return self._running.wait(timeout)

    def requests_waiting(self) -> int:
        """How many complete requests wait for a worker (at most `Limits.queue_size`; beyond it: 503)."""
        return self._queue.qsize()

    def server_close(self) -> None:
        """Close the listening socket (after `shutdown`)."""
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.server_close()

    # -- the reader --------------------------------------------------------------------------

    def _next_timeout(self) -> float | None:
        if not self._reading:
            return None
        oldest = next(iter(self._reading.values()))
        return max(oldest.deadline - _realtime.monotonic(), 0.0)

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(256):
                pass

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(64):  # a burst at a time, so the connections already held are read too
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: the others are still served
                logger.warning("%s: cannot accept a connection: %s", self.name, exc)
                return
            sock.setblocking(False)
            conn = _Connection(sock, str(address[0]), _realtime.monotonic() + self.limits.read_timeout)
            while len(self._reading) >= self.limits.max_connections:
                self._make_room(selector)
            self._reading[sock.fileno()] = conn
            selector.register(sock, selectors.EVENT_READ, conn)

    def _make_room(self, selector: selectors.BaseSelector) -> None:
        """Free a place among the connections being read: close the one that has the least to lose.

        Oldest first, each is read once more (a whole request may wait unread in its socket): one
        that completes goes to the workers. Else the first draining or silent one is closed; if
        every one has sent part of a request, the oldest.
        """
        for conn in list(self._reading.values()):
            before = len(self._reading)
            self._on_readable(selector, conn)
            if len(self._reading) < before:
                return  # it completed (handed to a worker) or hung up
            if conn.draining or not conn.buffer:
                break
        else:
            conn = next(iter(self._reading.values()))
        logger.debug("%s: %d connections being read: closing one from %s", self.name,
                     self.limits.max_connections, conn.address)  # fmt: skip
        self._forget(selector, conn)

    def _on_readable(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        if self._reading.get(conn.sock.fileno()) is not conn:
            return  # an event of this select() for a connection `_make_room` already closed or handed over
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._forget(selector, conn)
            return
        if conn.draining:
            return
        conn.buffer += data
        try:
            request = self._complete(conn)
        except Refusal as refusal:
            self._refuse(selector, conn, refusal)
            return
        if request is None:
            return
        self._forget(selector, conn, close=False)
        try:
            self._queue.put_nowait((conn, request))
        except queue.Full:
            self._reading[conn.sock.fileno()] = conn
            selector.register(conn.sock, selectors.EVENT_READ, conn)
            self._refuse(selector, conn, Refusal(503, "Service Unavailable", "the server is busy; try again"))

    def _complete(self, conn: _Connection) -> _Request | None:
        """The request once all of it has arrived, else None; `Refusal` for one that is refused."""
        limits = self.limits
        if conn.head_end is None:
            end = HEAD_END.search(conn.buffer)
            if (len(conn.buffer) if end is None else end.start()) > limits.max_header_bytes:
                raise Refusal(431, "Request Header Fields Too Large", "the request head is too large")
            if end is None:
                return None
            conn.head_end = end.end()
            conn.head = parse_head(bytes(conn.buffer[: end.start()]))
            conn.length = content_length(conn.head[3], limits.max_body_bytes)
        if len(conn.buffer) - conn.head_end < conn.length:
            return None
        assert conn.head is not None  # parsed with head_end
        method, target, version, headers = conn.head
        body = bytes(conn.buffer[conn.head_end : conn.head_end + conn.length])
        return _Request(method, target, version, headers, body)

    def _refuse(self, selector: selectors.BaseSelector, conn: _Connection, refusal: Refusal) -> None:
        self._refusals.refused(
            f"http {refusal.status}",
            logging.INFO,
            "%s: refused a request from %s: %s %s",
            self.name,
            conn.address,
            refusal.status,
            refusal.why,
        )
        _send_nowait(conn.sock, plain_response(refusal.status, refusal.phrase, refusal.why))
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._forget(selector, conn)
            return
        # Read and drop what the client still sends (a large body, the rest of a large head):
        # closing with unread input would reset the connection before the client reads the answer.
        conn.draining = True
        conn.buffer = bytearray()
        conn.deadline = min(conn.deadline, _realtime.monotonic() + _LINGER_SECONDS)  # closed then at the latest

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = _realtime.monotonic()
        while self._reading:
            conn = next(iter(self._reading.values()))
            if conn.deadline > now:
                return
            if conn.draining:
                self._forget(selector, conn)
                continue
            why = f"the request did not arrive within {self.limits.read_timeout:g} s"
            self._refuse(selector, conn, Refusal(408, "Request Timeout", why))
            self._forget(selector, conn)  # no linger for a client that sent too little

    def _forget(self, selector: selectors.BaseSelector, conn: _Connection, *, close: bool = True) -> None:
        """Stop reading `conn` (and close it, unless a worker takes it over)."""
        if conn.sock.fileno() < 0:
            return  # closed already
        self._reading.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn.sock)
        if close:
            conn.sock.close()

    # -- the workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            conn, request = item
            try:
                self._serve(conn, request)
            except Exception as exc:  # noqa: BLE001 - a worker never dies of one request
                logger.debug("%s: request from %s ended early: %s", self.name, conn.address, exc)
            finally:
                conn.sock.close()

    def _serve(self, conn: _Connection, request: _Request) -> None:
        assert self.app is not None  # serve_forever checked
        sock = conn.sock
        sock.setblocking(True)
        sock.settimeout(self.limits.write_timeout)  # sendall's whole duration (Python 3.5+)
        out = sock.makefile("wb")  # buffered: each write is whole (wsgiref warns of partial ones)
        try:
            handler = _Handler(BytesIO(request.body), out, _NoErrors(), _environ(self.server_address, conn, request))
            handler.run(self.app)
        finally:
            with contextlib.suppress(OSError):  # the client went away, or took too long
                out.close()
        status = str(getattr(handler, "status", None) or "-")  # set by start_response (not in typeshed)
        # The path only: a query string may hold what must not be logged.
        path = request.target.split("?", 1)[0][:200]
        logger.debug("%s: %s %s %s from %s", self.name, request.method, path, status.split(" ", 1)[0], conn.address)
        with contextlib.suppress(OSError):  # the client went away already
            sock.shutdown(socket.SHUT_WR)


class _Handler(SimpleHandler):
    server_software = "persched"
    os_environ: dict[str, str] = {}  # noqa: RUF012 - wsgiref copies the process environment (a token!) into every request

    def log_exception(self, exc_info: OptExcInfo) -> None:
        logger.error("web application error", exc_info=exc_info)


class _NoErrors:
    """wsgi.errors: what an application writes there goes to the log."""

    def write(self, text: str) -> int:
        if text.strip():
            logger.warning("web application: %s", text.strip())
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass


def _environ(server_address: tuple[str, int], conn: _Connection, request: _Request) -> dict[str, str]:
    """The CGI variables of `request` (PEP 3333); `_Handler` adds the ``wsgi.*`` keys."""
    path, _, query = request.target.partition("?")
    environ = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": urllib.parse.unquote(path, "iso-8859-1"),  # PEP 3333: bytes as latin-1
        "QUERY_STRING": query,
        "SERVER_NAME": str(server_address[0]),
        "SERVER_PORT": str(server_address[1]),
        "SERVER_PROTOCOL": request.version,
        "REMOTE_ADDR": conn.address,
        "CONTENT_LENGTH": str(len(request.body)) if request.body else "",
    }
    for name, value in request.headers:
        key = name.upper().replace("-", "_")
        if "_" in name:
            continue  # "X_User" would read as "X-User": dropped, as wsgiref does
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value
        elif key != "CONTENT_LENGTH":
            key = "HTTP_" + key
            separator = "; " if key == "HTTP_COOKIE" else ", "
            environ[key] = environ[key] + separator + value if key in environ else value
    return environ


def _send_nowait(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the client went away, or will not read: nothing more is owed to it
        sock.send(data)
