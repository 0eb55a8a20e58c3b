"""The ``PERSCHED`` setting of a Django project, read and checked (see the package docstring)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils.module_loading import import_string
from sqlalchemy.engine import URL

from ..._model.declare import JobSpec
from ..._model.models import DEFAULT_NAMESPACE
from ...errors import PerschedError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["authorize", "database", "jobs", "may_read", "namespace", "options", "start", "url"]

KEYS = frozenset({"URL", "NAMESPACE", "JOBS", "START", "OPTIONS", "AUTHORIZE", "MAY_READ", "DATABASE"})


def _setting() -> dict[str, Any]:
    value = getattr(settings, "PERSCHED", {})
    if not isinstance(value, dict):
        raise PerschedError(f"settings.PERSCHED: a dict, not {type(value).__name__}")
    unknown = sorted(set(value) - KEYS)
    if unknown:
        raise PerschedError(f"settings.PERSCHED: unknown keys {unknown}; the keys are {sorted(KEYS)}")
    return value


def url() -> str:
    """``PERSCHED["URL"]``, or Django's default database as a SQLAlchemy URL."""
    given = _setting().get("URL")
    if given:
        return str(given)
    database = settings.DATABASES.get("default", {})
    engine, name = str(database.get("ENGINE", "")), database.get("NAME")
    drivers = {"sqlite3": None, "postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
    backend = engine.rsplit(".", 1)[-1]
    if backend not in drivers or not name or str(name).startswith((":memory:", "file:")):
        raise PerschedError(
            f"settings.PERSCHED: no URL, and Django's default database ({engine or 'none'}) is not a file, "
            "PostgreSQL or MySQL database; set PERSCHED['URL'] to a SQLAlchemy URL"
        )
    driver = drivers[backend]
    if driver is None:
        return str(os.fspath(name))  # a SQLite file path
    port = database.get("PORT")
    return URL.create(
        driver,
        username=database.get("USER") or None,
        password=database.get("PASSWORD") or None,
        host=database.get("HOST") or None,
        port=int(port) if port else None,
        database=str(name),
    ).render_as_string(hide_password=False)


def database() -> str:
    """``PERSCHED["DATABASE"]``: the alias of Django's database that holds persched's tables (the admin reads it)."""
    return str(_setting().get("DATABASE", "default"))


def namespace() -> str:
    """``PERSCHED["NAMESPACE"]``."""
    return str(_setting().get("NAMESPACE", DEFAULT_NAMESPACE))


def start() -> bool:
    """``PERSCHED["START"]``: whether serving processes run the jobs."""
    return bool(_setting().get("START", True))


def options() -> dict[str, Any]:
    """``PERSCHED["OPTIONS"]``: keywords of `persched.JobScheduler`."""
    return dict(_setting().get("OPTIONS", {}))


def jobs() -> list[JobSpec]:
    """The jobs ``PERSCHED["JOBS"]`` names (a list of `persched.JobSpec`, or a callable returning one), or []."""
    path = _setting().get("JOBS")
    if path is None:
        return []
    found = import_string(path) if isinstance(path, str) else path
    specs = list(found() if callable(found) else found)
    wrong = [spec for spec in specs if not isinstance(spec, JobSpec)]
    if wrong:
        raise PerschedError(f"settings.PERSCHED['JOBS'] ({path!r}): not JobSpec values: {wrong[:3]!r}")
    return specs


def authorize() -> Callable[[Any], str | None] | None:
    """``PERSCHED["AUTHORIZE"]``, imported: who may act in the dashboard view, from the request."""
    path = _setting().get("AUTHORIZE")
    return None if path is None else import_string(path)


def may_read(request: Any) -> bool:  # noqa: ANN401 - Django's HttpRequest (Django ships no types)
    """Whether `request` may read the dashboard: ``PERSCHED["MAY_READ"]``, or else a staff user."""
    path = _setting().get("MAY_READ")
    if path is not None:
        return bool(import_string(path)(request))
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_staff)
