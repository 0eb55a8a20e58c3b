"""Which ``Host`` a server answers (`HostRules`), and `HostCheck`, the middleware that answers 400 to others.

It stops DNS rebinding (docs/explanation/interfaces.md, "The request head and the Host").
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING, Final

from ... import _realtime
from ...errors import PerschedError
from .refusals import RefusalLog
from .wire import DIGITS

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["LOOPBACK_NAMES", "OWN_NAME", "HostCheck", "HostRules", "allow_every_host_warning", "split_host", "url_host"]

logger = logging.getLogger(__name__)

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")  # every local service answers to these
#: ``persched web``'s name of its own: browsers resolve every ``*.localhost`` to loopback (RFC 6761),
#: and a cookie set under it reaches no service that is reached as 127.0.0.1 or localhost.
OWN_NAME: Final = "persched.localhost"


def url_host(host: str) -> str:
    """`host` as it stands in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def split_host(value: str) -> tuple[str, str | None] | None:
    """("name", "port" or None) of a Host header value, lower case; None if it is malformed."""
    value = value.strip().lower()
    if not value or any(ord(c) <= 32 or ord(c) >= 127 or c in "/\\@?#" for c in value):
        return None
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        name, port = name + "]", (rest[1:] if rest else None)
    else:
        name, colon, port_text = value.rpartition(":")
        if not colon:
            name, port = value, None
        elif ":" in name:
            return None  # a bare IPv6 address: not a Host
        else:
            port = port_text
    if port is not None and not DIGITS.fullmatch(port):
        return None
    return (name, port) if name else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


class HostRules:
    """Which ``Host`` values a server answers.

    Allowed: the loopback names and `OWN_NAME` with the server's port; the bound address with the
    port; each of `extra` (``name`` at any port, ``name:port`` exactly, ``*`` anything); and, bound to
    every address, any IP address (only a name can be rebound). Mounted (no `bind_host` and `port`):
    the loopback names at any port, and `extra`.

    Args:
        bind_host: The address the server binds; None: mounted.
        port: Its port (the bound one, not 0); None: mounted.
        extra: More names (``--allowed-host``).
        option: Names `extra` in messages (``--allowed-host``, ``allowed_hosts=``).

    Raises:
        PerschedError: An entry of `extra` is not a host name or host:port.
    """

    def __init__(
        self, bind_host: str | None, port: int | None, extra: Iterable[str] = (), option: str = "--allowed-host"
    ) -> None:
        self.option = option
        self.exact: set[tuple[str, str]] = set()
        self.any_port: set[str] = set()
        self.anything = False
        self.any_ip = bind_host in WILDCARD_HOSTS
        if bind_host is None or port is None:
            self.any_port.update(LOOPBACK_NAMES)
        else:
            self.exact.update((name, str(port)) for name in (*LOOPBACK_NAMES, OWN_NAME))
            if not self.any_ip:
                self.exact.add((url_host(bind_host).lower(), str(port)))
        if isinstance(extra, str):
            raise PerschedError(f"{option}: must be a list of host names, got the string {extra!r}")
        for entry in extra:
            if not isinstance(entry, str):
                raise PerschedError(f"{option}: not a host name or host:port: {entry!r}")
            if entry.strip() == "*":
                self.anything = True
                continue
            split = split_host(entry)
            if split is None:
                raise PerschedError(f"{option}: not a host name or host:port: {entry!r}")
            name, entry_port = split
            if entry_port is None:
                self.any_port.add(name)
            else:
                self.exact.add((name, entry_port))

    def refusal(self, host: str | None) -> str | None:
        """Why a request with this Host is refused, or None if it is allowed."""
        if self.anything:
            return None
        if host is None:
            return "the request has no Host header"
        split = split_host(host)
        if split is None:
            return f"malformed Host header {host[:100]!r}"
        name, port = split
        if (name, port or "80") in self.exact or name in self.any_port or (self.any_ip and _is_ip(name)):
            return None
        if self.option.startswith("--"):
            return (
                f"Host {host[:100]!r} is not one of this server's names; start it with {self.option} NAME to allow it"
            )
        return f"Host {host[:100]!r} is not one of this dashboard's names; add it to {self.option}"


class HostCheck:
    """WSGI middleware: 400 with a one-line reason, logged (`RefusalLog`), for a Host that `rules` refuse.

    Args:
        app: The application behind it.
        rules: The allowed names.
        what: Names the server in the log line ("web", "metrics").
        monotonic: The clock of the log's intervals (seconds); tests pass their own.
    """

    def __init__(
        self,
        app: WSGIApplication,
        rules: HostRules,
        what: str,
        *,
        monotonic: Callable[[], float] = _realtime.monotonic,
    ) -> None:
        self.app = app
        self.rules = rules
        self.what = what
        self._refusals = RefusalLog(logger, monotonic)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Refuse or pass on one request."""
        why = self.rules.refusal(environ.get("HTTP_HOST"))
        if why is None:
            return self.app(environ, start_response)
        self._refusals.refused(
            "host",
            logging.WARNING,
            "%s: refused %s %s from %s: %s",
            self.what,
            environ.get("REQUEST_METHOD"),
            str(environ.get("PATH_INFO", ""))[:200],
            environ.get("REMOTE_ADDR", "?"),
            why,
        )
        body = f"400 Bad Request: {why}\n".encode()
        start_response(
            "400 Bad Request",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [body]


def allow_every_host_warning(what: str, allowed: Collection[str]) -> None:
    """Log the WARNING of ``--allowed-host '*'``."""
    if any(entry.strip() == "*" for entry in allowed):
        logger.warning(
            "%s: --allowed-host '*' answers every Host: a web page that re-points its name at this address"
            " (DNS rebinding) can read it",
            what,
        )
