"""The dashboard as a WSGI application, to mount in a web application that already serves pages.

``persched web`` serves the dashboard on its own. An application with its own users and sign-in
mounts it under a prefix instead, and its authentication decides who may act::

    from persched.web import dashboard

    app = dashboard("postgresql+psycopg://app@db/app", namespaces=["web"],
                    authorize=lambda environ: user_name_or_none(environ),
                    secret=SECRET_KEY, allowed_hosts=["app.example.com"])

Flask, Django and FastAPI have their own recipes (`persched.integrations`, docs/frameworks.md).
The dashboard checks the Host itself: the application's own check may never see the mount
(Flask's ``TRUSTED_HOSTS`` behind ``DispatcherMiddleware``, Django's ``ALLOWED_HOSTS`` without
middleware).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._interfaces.dashboard.actions import MESSAGES
from ._interfaces.dashboard.app import WebApp
from ._interfaces.dashboard.pending import AwaitingDatabase, until_the_database_exists
from ._interfaces.existing import open_existing
from ._interfaces.http.hosts import HostRules
from ._model.models import DEFAULT_NAMESPACE, validate_namespace
from .errors import PerschedError

if TYPE_CHECKING:
    from collections.abc import Collection

    from ._interfaces.dashboard.auth import Authorize

__all__ = ["MESSAGES", "AwaitingDatabase", "WebApp", "dashboard"]


@until_the_database_exists
def dashboard(
    db: str,
    *,
    namespace: str | None = None,
    authorize: Authorize | None = None,
    secret: bytes | None = None,
    allowed_hosts: Collection[str] = (),
    namespaces: Collection[str] | None = None,
) -> WebApp:
    """Open database `db` (never created, never migrated) and return its dashboard as a WSGI application.

    Args:
        db: A SQLAlchemy URL or SQLite file path, at the current schema (`persched migrate`).
        namespace: The namespace the pages show first (``?ns=NAME`` shows another, ``?all=1`` all);
            default: the first of `namespaces`, else ``"default"``.
        authorize: Called with each request's WSGI environ: the name of who acts (logged with each
            action), or None (that request may only read). Without it the dashboard is read-only.
        secret: Keys the forms' CSRF tokens; pass the application's own secret (the same in every
            process that serves it).
        allowed_hosts: The ``Host`` names it answers besides ``127.0.0.1``, ``localhost`` and
            ``[::1]`` (at any port): ``"app.example.com"`` (any port) or ``"app.example.com:8443"``;
            ``["*"]`` answers every Host (only where the application checks it before the mount).
            Any other Host is a 400 (DNS rebinding).
        namespaces: The only namespaces it shows and changes; any other is a 404, and "all
            namespaces" means these. Default: every namespace.

    A database that does not exist yet, has no current schema yet, or cannot be reached does not
    fail the application's start: each request is answered 503 with the reason until it can be
    opened.

    Raises:
        PerschedError: `allowed_hosts` or `namespaces` is malformed, or `namespace` is not one of
            `namespaces`.
        SchemaVersionError: The database was made by a newer persched.
    """
    rules = HostRules(None, None, allowed_hosts, "allowed_hosts=")
    served = None if namespaces is None else _namespaces(namespaces)
    if namespace is None:
        namespace = DEFAULT_NAMESPACE if served is None else served[0]
    elif served is not None and namespace not in served:
        raise PerschedError(f"dashboard: namespace {namespace!r} is not one of namespaces={list(served)!r}")
    return WebApp(open_existing(db, namespace), authorize=authorize, secret=secret, hosts=rules, namespaces=served)


def _namespaces(namespaces: object) -> list[str]:
    """Return `namespaces` as a list of valid namespaces, in order, or raise PerschedError."""
    if isinstance(namespaces, str) or not isinstance(namespaces, Iterable):
        raise PerschedError(f"namespaces=: must be a list of namespaces such as ['web'], got {namespaces!r}")
    served = [validate_namespace(namespace, "namespaces") for namespace in namespaces]
    if not served:
        raise PerschedError("namespaces=: must hold at least one namespace (None: every namespace)")
    return served
