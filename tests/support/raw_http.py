"""Raw HTTP over a socket, for the tests of what clients send that http.client would not (a Host, a slow head)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from tests.support.helpers import TIMEOUT

__all__ = ["RawReply", "connect", "raw_request", "read_reply"]


@dataclass
class RawReply:
    """A response as read off the socket: status code, header lines (lower-case names) and body text."""

    status: int
    headers: dict[str, str]
    body: str


def connect(port: int, timeout: float = TIMEOUT) -> socket.socket:
    """A connection to 127.0.0.1:`port`; every read on it is bounded by `timeout`."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_reply(sock: socket.socket) -> RawReply:
    """Read until the server closes the connection (it serves one request each), then parse."""
    data = bytearray()
    while chunk := sock.recv(65_536):
        data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1."), lines[0]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawReply(int(lines[0].split(" ")[1]), headers, body.decode("utf-8", "replace"))


def raw_request(port: int, data: bytes, timeout: float = TIMEOUT) -> RawReply:
    """Send `data` as it is and read the reply."""
    with connect(port, timeout) as sock:
        sock.sendall(data)
        return read_reply(sock)


def get(port: int, path: str, host: str | None = None, headers: str = "", timeout: float = TIMEOUT) -> RawReply:
    """GET `path` with Host `host` (default 127.0.0.1:port; "" sends none) and extra header lines."""
    host_line = "" if host == "" else f"Host: {host or f'127.0.0.1:{port}'}\r\n"
    head = f"GET {path} HTTP/1.1\r\n{host_line}{headers}Connection: close\r\n\r\n"
    return raw_request(port, head.encode("latin-1"), timeout)
