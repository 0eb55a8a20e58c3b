"""Database URLs: a user's ``--db`` value parsed (`to_url`), and shown with its password hidden (`mask`)."""

from __future__ import annotations

import re
from typing import Final

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from persched.errors import InvalidJobError, StoreError

__all__ = ["MYSQL_BACKENDS", "mask", "to_url"]

MYSQL_BACKENDS: Final = ("mysql", "mariadb")
_PASSWORD_RE: Final = re.compile(r"(://[^/:@]*:)[^@/]*(@)")


def to_url(url_or_path: str) -> URL:
    """Parse a SQLAlchemy URL, or a plain SQLite file path; PostgreSQL maps to psycopg 3, MySQL to PyMySQL.

    Raises:
        InvalidJobError: `url_or_path` is not a str.
        StoreError: The URL cannot be parsed or names an unsupported database.
    """
    given: object = url_or_path  # callers may pass anything: refuse it cleanly
    if not isinstance(given, str):
        raise InvalidJobError("url", f"must be a str (a database URL or a file path), got {type(given).__name__}")
    if "\x00" in url_or_path:  # no file name or host can hold one
        raise StoreError(_mask_text(url_or_path.replace("\x00", "\\x00")), "the database URL or path contains NUL")
    if not url_or_path.strip():
        raise StoreError(repr(url_or_path), "empty database URL or path")
    if "://" not in url_or_path:
        # A plain path; "C:\\x.db" has a colon but no "://".
        return URL.create("sqlite", database=url_or_path)
    try:
        url = make_url(url_or_path)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(_mask_text(url_or_path), f"not a valid database URL: {exc}") from exc
    backend = url.get_backend_name()
    driver = url.drivername.partition("+")[2]
    if backend in ("postgresql", "postgres"):  # "postgres": Heroku-style alias
        if driver not in ("", "psycopg"):
            raise StoreError(
                mask(url),
                f"unsupported PostgreSQL driver {driver!r}; use postgresql+psycopg://",
            )
        url = url.set(drivername="postgresql+psycopg")
    elif backend in MYSQL_BACKENDS:
        if driver not in ("", "pymysql"):
            raise StoreError(mask(url), f"unsupported MySQL/MariaDB driver {driver!r}; use mysql+pymysql://")
        # One dialect name for both servers: the dialect finds out that the server is MariaDB.
        url = url.set(drivername="mysql+pymysql")
    elif backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreError(mask(url), f"unsupported SQLite driver {driver!r}; use sqlite:///PATH")
    else:
        raise StoreError(
            mask(url),
            f"unsupported database {backend!r}; persched supports sqlite:///PATH, postgresql+psycopg://USER@HOST/DB"
            " and mysql+pymysql://USER@HOST/DB (MySQL or MariaDB)",
        )
    try:
        url.get_dialect()
    except NoSuchModuleError as exc:
        raise StoreError(mask(url), f"unknown database driver: {exc}") from exc
    return url


def mask(url: URL | str) -> str:
    """Render a URL (or a string) for messages and logs, with its password replaced by ``***``."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    if "://" not in url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _mask_text(url)


def _mask_text(text_url: str) -> str:
    # For strings that make_url refuses: hide anything between "user:" and "@".
    return _PASSWORD_RE.sub(r"\1***\2", text_url)
