"""The HTTP/1.x request head, parsed strictly, or a `Refusal` the reader answers itself and closes.

Only ``Content-Length`` frames a body (no chunked decoding, so no request smuggling). No I/O: the
reader owns the sockets.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["DIGITS", "HEAD_END", "Refusal", "content_length", "parse_head", "plain_response"]

HEAD_END: Final = re.compile(rb"\r?\n\r?\n")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: methods, header names
# RFC 9110 5.5: a field value holds no control character but HTAB (NUL and a bare CR are refused, 9112 2.2).
_CONTROL_IN_VALUE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
DIGITS: Final = re.compile(r"[0-9]{1,18}")
_MAX_HEADERS: Final = 100  # header lines in one request


class Refusal(Exception):
    """A request the reader answers itself: status and one line of text."""

    def __init__(self, status: int, phrase: str, why: str) -> None:
        super().__init__(why)
        self.status, self.phrase, self.why = status, phrase, why


def plain_response(status: int, phrase: str, why: str) -> bytes:
    body = f"{status} {phrase}: {why}\n".encode()
    head = (
        f"HTTP/1.0 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """Request line and headers; `Refusal` (400, 501, 505) for one that is malformed or not supported."""
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise Refusal(400, "Bad Request", "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refusal(505, "HTTP Version Not Supported", "only HTTP/1.0 and HTTP/1.1 are served")
    if not target.startswith("/") or any(ord(c) <= 32 or ord(c) == 127 for c in target):
        raise Refusal(400, "Bad Request", "the request target must be a path (/...)")
    if len(lines) - 1 > _MAX_HEADERS:
        raise Refusal(431, "Request Header Fields Too Large", f"more than {_MAX_HEADERS} header lines")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise Refusal(400, "Bad Request", "malformed header line")  # folded lines too (RFC 9112 5.2)
        if _CONTROL_IN_VALUE.search(value):
            raise Refusal(400, "Bad Request", f"a control character in the value of header {name[:40]}")
        headers.append((name, value.strip(" \t")))
    return method, target, version, headers


def content_length(headers: list[tuple[str, str]], limit: int) -> int:
    lengths = {value for name, value in headers if name.lower() == "content-length"}
    if any(name.lower() == "transfer-encoding" for name, _ in headers):
        # Only Content-Length frames a body here: no chunked decoding, no smuggling between the two.
        raise Refusal(501, "Not Implemented", "Transfer-Encoding is not supported; send Content-Length")
    if not lengths:
        return 0
    if len(lengths) > 1 or not DIGITS.fullmatch(value := lengths.pop()):
        raise Refusal(400, "Bad Request", "malformed Content-Length")
    if int(value) > limit:
        raise Refusal(413, "Content Too Large", f"the request body is over {limit} bytes")
    return int(value)
