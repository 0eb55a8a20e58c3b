"""The dashboard's server under hostile clients, through raw sockets: the Host check, size limits, slow clients.

Each slow-client test proves that a well-behaved client is served within a
second (its socket timeout: a longer wait fails the test) while the slow
ones are connected, and that they cost no thread: the server's thread count
is the same with sixty slow sockets as with none (wsgiref's threading server
had one thread per connection).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import pytest

from persched._interfaces.http.hosts import HostRules
from persched._interfaces.http.server import Limits, Server
from persched.metrics import METRICS_LIMITS
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.raw_http import connect, get, raw_request, read_reply
from tests.web.conftest import serve_app

if TYPE_CHECKING:
    import socket
    from collections.abc import Iterable, Iterator

    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from tests.web.conftest import Dashboard


def _threads(dashboard: Dashboard) -> int:
    assert dashboard.server.wait_serving(TIMEOUT)  # its workers have started
    return threading.active_count()


def _slow_sockets(port: int, count: int) -> list[socket.socket]:
    """`count` connections that each sent half a request head and then nothing (slowloris)."""
    sockets = []
    for _ in range(count):
        sock = connect(port)
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
        sockets.append(sock)
    return sockets


def _closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server still sends before it closes `sock` (bounded by the socket's TIMEOUT)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.fixture
def limited(db: str) -> Iterator[Dashboard]:
    """The dashboard with small limits: 2 workers, 20 connections read at once, 1 s to send a request."""
    limits = Limits(workers=2, max_connections=20, read_timeout=1.0, max_header_bytes=4096)
    yield from serve_app(db, None, limits=limits)


@pytest.fixture
def patient(db: str) -> Iterator[Dashboard]:
    """As `limited`, but a connection has 3 x TIMEOUT to send its request: longer than any wait of the
    tests, so what lets a client in beside slow ones is the cap on connections, never their timeout."""
    limits = Limits(workers=2, max_connections=20, read_timeout=3 * TIMEOUT, max_header_bytes=4096)
    yield from serve_app(db, None, limits=limits)


# -- the Host check (DNS rebinding) ------------------------------------------------------------


def test_only_the_servers_own_names_are_answered(readonly: Dashboard, caplog: pytest.LogCaptureFixture) -> None:
    port = readonly.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        reply = get(port, "/", host)
        assert reply.status == 200, (host, reply.body)
        assert ">good</a>" in reply.body
    with caplog.at_level(logging.WARNING, logger="persched"):
        for host in ("evil.example", f"evil.example:{port}", f"localhost:{port + 1}", "127.0.0.1", f"a b:{port}"):
            reply = get(port, "/job?id=good", host)
            assert reply.status == 400, host
            assert len(reply.body.strip().splitlines()) == 1  # one line: the reason
            assert "good" not in reply.body  # no job data
        missing = get(port, "/", "")
        assert missing.status == 400
        assert "no Host header" in missing.body
    refused = [r.getMessage() for r in caplog.records if "refused GET" in r.getMessage()]
    assert len(refused) == 1, refused  # the first; the others are counted (tests/web/test_refusal_logs.py)
    assert "'evil.example'" in refused[0]
    assert "--allowed-host" in refused[0]


def test_allowed_hosts_add_names(db: str) -> None:
    for dashboard in serve_app(db, None, allowed_hosts=["dash.example", "exact.example:8443"]):
        port = dashboard.port
        assert get(port, "/", f"dash.example:{port}").status == 200
        assert get(port, "/", "dash.example").status == 200  # no port: any port (behind a proxy)
        assert get(port, "/", "exact.example:8443").status == 200
        assert get(port, "/", "exact.example:8444").status == 400
        assert get(port, "/", "other.example").status == 400
    for dashboard in serve_app(db, None, allowed_hosts=["*"]):
        assert get(dashboard.port, "/", "evil.example").status == 200  # the explicit choice


def test_host_rules_of_a_server_bound_to_every_address() -> None:
    rules = HostRules("0.0.0.0", 8765, ["dash.example"])
    assert rules.refusal("10.1.2.3:9000") is None  # an IP address cannot be re-pointed (rebound)
    assert rules.refusal("[fd00::1]:8765") is None
    assert rules.refusal("dash.example") is None
    assert rules.refusal("evil.example:8765") is not None
    assert rules.refusal("127.0.0.1.evil.example:8765") is not None
    bound = HostRules("10.1.2.3", 8765)
    assert bound.refusal("10.1.2.3:8765") is None
    assert bound.refusal("10.9.9.9:8765") is not None  # bound to one address: only that one


# -- size limits ---------------------------------------------------------------------------------


def test_a_head_over_the_limit_is_431(limited: Dashboard) -> None:
    port = limited.port
    big = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Big: %s\r\n\r\n" % (port, b"a" * 8000)
    reply = raw_request(port, big)
    assert reply.status == 431
    many = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + b"X-A: b\r\n" * 101 + b"\r\n"
    assert raw_request(port, many).status == 431  # headers counted, not only bytes
    assert get(port, "/").status == 200


def test_a_body_over_the_limit_is_413_before_it_is_sent(dashboard: Dashboard) -> None:
    port = dashboard.port
    with connect(port) as sock:  # the head only: the server answers without waiting for the megabyte
        sock.sendall(
            f"POST /action HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000000\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode()
        )
        reply = read_reply(sock)
    assert reply.status == 413
    # Under the server's limit but over the dashboard's form limit: the application says 413 too.
    form = b"id=good&action=pause&csrf=" + b"a" * 12_000
    head = f"POST /action HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(form)}\r\n\r\n".encode()
    assert raw_request(port, head + form).status == 413


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"POST /action HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /action HTTP/1.1\r\nHost: {host}\r\nContent-Length: \xc2\xb2\r\n\r\n", 400),
        (b"GET http://evil.example/ HTTP/1.1\r\nHost: {host}\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: {host}\r\n\r\n", 505),
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: {host}\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nX-Note: a\x00b\r\n\r\n", 400),  # a NUL in a header value
        (b"GET / HTTP/1.1\r\nHost: {host}\x00\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nX-Note: a\rb\r\n\r\n", 400),  # a bare CR
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nX-Note: a\x1b[2Jb\r\n\r\n", 400),
    ],
)
def test_malformed_requests_are_refused_in_one_line(limited: Dashboard, head: bytes, status: int) -> None:
    port = limited.port
    reply = raw_request(port, head.replace(b"{host}", b"127.0.0.1:%d" % port))
    assert reply.status == status
    assert len(reply.body.strip().splitlines()) == 1


# -- slow and idle clients ---------------------------------------------------------------------------


def test_sixty_slow_clients_cost_no_thread_and_a_normal_client_is_served(patient: Dashboard) -> None:
    port = patient.port
    before = _threads(patient)
    slow = _slow_sockets(port, 60)  # three times max_connections
    try:
        assert get(port, "/").status == 200
        assert get(port, "/runs").status == 200
        assert _threads(patient) == before  # 60 slow sockets, no new thread
    finally:
        for sock in slow:
            sock.close()


def test_beyond_max_connections_the_oldest_unfinished_one_is_closed(patient: Dashboard) -> None:
    port = patient.port
    slow = _slow_sockets(port, 20)  # max_connections
    try:
        newer = _slow_sockets(port, 1)
        assert _closed_by_server(slow[0]) == b""  # the oldest, closed without an answer
        assert get(port, "/").status == 200
        newer[0].close()
    finally:
        for sock in slow:
            sock.close()


def _ok_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"scraped"]


@pytest.mark.parametrize("idle_before", [0, 10, 70])
def test_a_complete_request_outlives_a_flood_of_idle_connections(idle_before: int) -> None:
    """A scraper sent its request; a flood of connections that send nothing arrives before the server reads it.

    Every connection is made before the server starts serving, so its first accept burst meets them all
    at once, the scraper among them: the connections beyond the cap evict the idle ones, never a
    connection whose request has arrived. (It evicted the oldest: 35 of 57 scrapes were reset.)
    """
    server = Server("127.0.0.1", 0, _ok_app, limits=METRICS_LIMITS, name="persched-metrics-test")
    port = server.server_port
    idle = [connect(port) for _ in range(idle_before)]
    scraper = connect(port)
    scraper.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    idle += [connect(port) for _ in range(3 * METRICS_LIMITS.max_connections)]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        reply = read_reply(scraper)
        assert reply.status == 200
        assert reply.body == "scraped"
    finally:
        scraper.close()
        for sock in idle:
            sock.close()
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


def test_an_idle_connection_is_closed_after_the_read_timeout(limited: Dashboard) -> None:
    with connect(limited.port) as sock:
        started = time.monotonic()
        answer = _closed_by_server(sock)  # it sends nothing
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.0 408 ")
    assert 0.9 <= waited < TIMEOUT  # read_timeout is 1 s


def test_a_client_that_trickles_its_head_is_closed_at_the_deadline_too(limited: Dashboard) -> None:
    """The read timeout is one deadline for the whole request, not a timeout per byte."""
    port = limited.port
    with connect(port) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        started = time.monotonic()
        sock.settimeout(0.05)
        answer = b""
        while time.monotonic() - started < TIMEOUT:
            try:
                sock.sendall(b"X: y\r\n")  # one header line every 50 ms: never idle for long
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not chunk:
                break
            answer += chunk
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.0 408 "), answer
    assert waited < TIMEOUT / 2  # closed at its 1 s deadline, not kept alive by the trickle


def test_when_every_worker_is_busy_and_the_queue_is_full_it_answers_503() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        entered.set()
        release.wait(TIMEOUT)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]

    server = Server("127.0.0.1", 0, slow_app, limits=Limits(workers=1, queue_size=1), name="persched-web-test")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_port
    busy = connect(port)
    queued = connect(port)
    try:
        busy.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert entered.wait(TIMEOUT)
        queued.sendall(b"GET / HTTP/1.0\r\n\r\n")
        wait_until(lambda: server.requests_waiting() == 1, message="the second request queued")
        refused = raw_request(port, b"GET / HTTP/1.0\r\n\r\n")
        assert refused.status == 503
        release.set()
        assert read_reply(busy).body == "done"
        assert read_reply(queued).body == "done"
    finally:
        release.set()
        busy.close()
        queued.close()
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


def test_shutdown_is_prompt_with_slow_clients_connected(db: str) -> None:
    limits = Limits(workers=2, max_connections=50, read_timeout=TIMEOUT)
    for dashboard in serve_app(db, None, limits=limits):
        slow = _slow_sockets(dashboard.port, 30)
    # serve_app has shut the server down (bounded by TIMEOUT): every slow socket is closed by it.
    try:
        for sock in slow:
            assert _closed_by_server(sock) == b""
    finally:
        for sock in slow:
            sock.close()


def test_limits_are_checked() -> None:
    with pytest.raises(Exception, match="workers"):
        Limits(workers=0)
    with pytest.raises(Exception, match="read_timeout"):
        Limits(read_timeout=float("nan"))
