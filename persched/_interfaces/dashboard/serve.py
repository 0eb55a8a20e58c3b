"""``persched web``: the dashboard of one database on a server of its own, until SIGINT or SIGTERM."""

from __future__ import annotations

import ipaddress
import logging
import threading
from typing import TYPE_CHECKING, Final

from ... import _loggers
from ...errors import PerschedError
from ..existing import open_existing
from ..http.hosts import OWN_NAME, HostCheck, HostRules, allow_every_host_warning, url_host
from ..http.server import Limits, Server
from ..signals import StopSignals
from .app import WebApp

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ENV_TOKEN", "make_web_server", "serve"]

logger = logging.getLogger(_loggers.WEB)

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
ENV_TOKEN: Final = "PERSCHED_WEB_TOKEN"
MIN_TOKEN_LENGTH: Final = 12  # characters; a short token is guessed quickly


def make_web_server(
    app: WebApp,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    allowed_hosts: Sequence[str] = (),
    limits: Limits | None = None,
) -> Server:
    """The dashboard's server for `app` (port 0: any free port; read it from ``server_port``).

    Requests pass `HostCheck` first: only the server's own names and `allowed_hosts` reach the pages.

    Raises:
        PerschedError: The address cannot be bound, or an allowed host is malformed.
    """
    server = Server(host, port, limits=limits, name="persched-web")
    try:
        server.app = HostCheck(app, HostRules(host, server.server_port, allowed_hosts), "web")
    except BaseException:
        server.server_close()
        raise
    return server


def serve(
    db: str,
    host: str,
    port: int,
    token: str | None,
    ready: Callable[[str], None],
    *,
    namespace: str | None = None,
    allowed_hosts: Sequence[str] = (),
    limits: Limits | None = None,
) -> None:
    """Serve the dashboard of database `db` until SIGINT or SIGTERM (the ``persched web`` command).

    `ready` is called with the URL once the server listens. The database is never created or migrated.

    Raises:
        PerschedError: The token is too short, the database cannot be used, the address cannot be bound.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise PerschedError(f"--token: use at least {MIN_TOKEN_LENGTH} characters (e.g. `openssl rand -hex 16`)")
    store = open_existing(db) if namespace is None else open_existing(db, namespace)
    try:
        server = make_web_server(WebApp(store, token), host, port, allowed_hosts=allowed_hosts, limits=limits)
        # Its handler takes no lock (persched._interfaces.signals); the main thread stops the server.
        stop = StopSignals()
        thread = threading.Thread(target=server.serve_forever, name="persched-web", daemon=True)
        try:
            with stop.installed():
                thread.start()
                # On loopback, the dashboard's name of its own: a session cookie set under 127.0.0.1 or
                # localhost would reach every local service (docs/observability.md: sessions).
                name = OWN_NAME if host in ("127.0.0.1", "localhost", "::1") else url_host(host)
                url = f"http://{name}:{server.server_port}/"
                if not ipaddress_is_loopback(host):
                    logger.warning(
                        "web: listening on %s, reachable from other machines: job data is visible there", host
                    )
                allow_every_host_warning("web", allowed_hosts)
                logger.info(
                    "web: serving %s (namespace %r) on %s (%s)",
                    store.url,
                    store.namespace,
                    url,
                    "actions on" if token else "read-only",
                )
                ready(url)
                while not stop.wait(1.0):  # a timed wait keeps the main thread responsive to signals
                    pass
                logger.info("web: stopping")
        finally:
            if thread.is_alive():
                server.shutdown()
            server.server_close()
            thread.join(5.0)
    finally:
        store.engine.dispose()


def ipaddress_is_loopback(host: str) -> bool:
    """True for a loopback address or "localhost"."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
