"""The dashboard as a WSGI application, to mount in a web application that already serves pages.

``persched web`` serves the dashboard on its own. An application that
already has users and a sign-in mounts it under a prefix instead, and its
own authentication decides who may act::

    from persched.web import dashboard

    app = dashboard("postgresql+psycopg://app@db/app", namespace="web",
                    authorize=lambda environ: user_name_or_none(environ),
                    secret=SECRET_KEY)

- Flask: ``Persched(dashboard_path="/persched", authorize=...)`` (`persched.integrations.flask`);
- Django: ``include("persched.integrations.django.urls")``;
- FastAPI / Starlette: ``app.mount("/persched", persched.integrations.asgi.dashboard(url, ...))``;
- any other WSGI framework: this function, under a prefix.

Everyone who reaches the mount may read the pages; `authorize` returns the
name of whoever may also pause, resume, run now and deschedule (it is
logged with each action), or None. The application's own Host check
(Django's ``ALLOWED_HOSTS``, Flask's ``TRUSTED_HOSTS``, Starlette's
``TrustedHostMiddleware``) guards the mount; docs/frameworks.md has each recipe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._interfaces.dashboard.actions import MESSAGES
from ._interfaces.dashboard.app import WebApp
from ._interfaces.dashboard.pending import AwaitingDatabase, until_the_database_exists
from ._interfaces.existing import open_existing
from ._model.models import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from ._interfaces.dashboard.auth import Authorize

__all__ = ["MESSAGES", "AwaitingDatabase", "WebApp", "dashboard"]


@until_the_database_exists
def dashboard(
    db: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    authorize: Authorize | None = None,
    secret: bytes | None = None,
) -> WebApp:
    """Open database `db` (never created, never migrated) and return its dashboard as a WSGI application.

    Args:
        db: A SQLAlchemy URL or SQLite file path, at the current schema (`persched migrate`).
        namespace: The namespace the pages show first (``?ns=NAME`` shows another, ``?all=1`` all).
        authorize: Called with each request's WSGI environ: the name of who
            is acting, or None (that request may only read). Without it the
            dashboard is read-only.
        secret: Keys the forms' CSRF tokens; pass the application's own
            secret (the same in every process that serves it).

    A database that does not exist yet, or has no current schema yet, or
    cannot be reached, does not fail the application's start: until it can
    be opened each request is answered 503 with the reason (a scheduler
    makes the database when it starts, or ``persched migrate`` does).

    Raises:
        SchemaVersionError: The database was made by a newer persched.
    """
    return WebApp(open_existing(db, namespace), authorize=authorize, secret=secret)
