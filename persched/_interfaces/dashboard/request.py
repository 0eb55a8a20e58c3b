"""One request to the dashboard, its parameters parsed strictly: anything unexpected is a `BadRequest` saying why."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ..._model.models import validate_job_id, validate_namespace
from ...errors import PerschedError

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

__all__ = [
    "COOKIE",
    "DEVICE_COOKIE",
    "Actor",
    "BadRequest",
    "Request",
    "Response",
    "View",
    "cookie",
    "cross_site",
    "job_id_of",
    "namespace_of",
    "q",
    "query_of",
    "read_form",
    "request_of",
    "whole",
]

COOKIE: Final = "persched_session"  # + "_" + the server's port: cookies are not scoped to a port
DEVICE_COOKIE: Final = "persched_device"  # + "_" + the port: a browser that signed in before (auth.Devices)
MAX_FORM_BYTES: Final = 10_000
MAX_QUERY_CHARS: Final = 2_000
MAX_PARAMETERS: Final = 10
WHOLE: Final = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit() takes "²"


class BadRequest(Exception):
    """A parameter or form field that is refused: 400 (or `status`) with this reason."""

    def __init__(self, why: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(why)
        self.status = status


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    body: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Actor:
    """Who may act in this request: `name` for the log, `key` what its CSRF token is bound to."""

    name: str
    key: str


@dataclass(frozen=True)
class View:
    """The namespace a page shows; None: every namespace (a NAMESPACE column)."""

    namespace: str | None
    home: str

    def params(self) -> dict[str, str]:
        """The query parameters that keep this view on a link."""
        if self.namespace is None:
            return {"all": "1"}
        return {} if self.namespace == self.home else {"ns": self.namespace}


@dataclass
class Request:
    """One request as the pages see it."""

    environ: WSGIEnvironment
    method: str
    path: str
    base: str  # SCRIPT_NAME: the prefix the dashboard is mounted under ("" stand-alone)
    client: str
    host: str  # the Host header, lower case ("" without one)
    port_suffix: str  # "_PORT" of the cookie names ("" without a port)
    cookie: str | None  # the session cookie's value, if sent
    device: str | None  # the device cookie's value, if sent
    actor: Actor | None = None
    query: dict[str, str] = field(default_factory=dict)

    def url(self, path: str, **params: object) -> str:
        """A link to `path` of this dashboard (under its prefix), with `params` (None left out)."""
        query = q(**params)
        return self.base + path + ("?" + query if query else "")


def q(**params: object) -> str:
    """A query string of `params` (None left out)."""
    return urllib.parse.urlencode({k: str(v) for k, v in params.items() if v is not None})


def request_of(environ: WSGIEnvironment) -> Request:
    """The request of a WSGI environ: its path, the prefix it is mounted under, its session cookie."""
    port = str(environ.get("SERVER_PORT", ""))
    suffix = f"_{port}" if WHOLE.fullmatch(port) else ""
    cookies: dict[str, str] = {}
    for part in str(environ.get("HTTP_COOKIE", "")).split(";"):
        name, _, value = part.strip().partition("=")
        cookies[name] = value
    return Request(
        environ=environ,
        method=str(environ.get("REQUEST_METHOD", "GET")),
        path=str(environ.get("PATH_INFO", "/") or "/"),
        base=str(environ.get("SCRIPT_NAME", "")).rstrip("/"),
        client=str(environ.get("REMOTE_ADDR", "?")),
        host=str(environ.get("HTTP_HOST", "")).strip().lower(),
        port_suffix=suffix,
        cookie=cookies.get(COOKIE + suffix),
        device=cookies.get(DEVICE_COOKIE + suffix),
    )


# -- parsing ------------------------------------------------------------------------


def query_of(request: Request, allowed: set[str]) -> dict[str, str]:
    """The query parameters, each at most once and each one this page takes; `BadRequest` otherwise."""
    raw = str(request.environ.get("QUERY_STRING", ""))
    request.query = _fields(raw, allowed, "parameter", MAX_QUERY_CHARS)
    return request.query


def _fields(raw: str, allowed: set[str], what: str, limit: int) -> dict[str, str]:
    if len(raw) > limit:
        raise BadRequest(f"the {what}s are longer than {limit} characters")
    try:
        text = raw.encode("latin-1").decode("utf-8")  # PEP 3333: the bytes as latin-1
    except UnicodeEncodeError:
        text = raw  # a framework that passed real text
    except UnicodeDecodeError:
        raise BadRequest(f"the {what}s are not UTF-8") from None
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=MAX_PARAMETERS)
    except ValueError:  # UnicodeDecodeError of a %-escape, or too many fields
        raise BadRequest(f"the {what}s are malformed (not UTF-8, or more than {MAX_PARAMETERS})") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise BadRequest(f"unknown {what} {name[:40]!r} (this page takes: {takes})")
        if name in found:
            raise BadRequest(f"{what} {name!r} given twice")
        found[name] = value
    return found


def whole(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not WHOLE.fullmatch(text):
        raise BadRequest(f"{name}: must be a run number (1 to 18 ASCII digits), got {text[:40]!r}")
    return int(text)


def job_id_of(name: str, text: str | None) -> str:
    try:
        return validate_job_id(text)
    except PerschedError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def namespace_of(name: str, text: str | None) -> str:
    try:
        return validate_namespace(text, name)
    except PerschedError as exc:
        raise BadRequest(str(exc)) from None


def cross_site(environ: WSGIEnvironment) -> str | None:
    """Why a POST is refused as coming from another site, or None."""
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return "the request came from another site"
    origin: str | None = environ.get("HTTP_ORIGIN")
    if origin is None:
        return None  # not a browser's cross-site form (browsers send Origin with every POST)
    if origin == "null" or urllib.parse.urlsplit(origin).netloc != environ.get("HTTP_HOST", ""):
        return "the request came from another site"  # an opaque origin ("null") is never ours
    return None


def cookie(request: Request, name: str, value: str, max_age: int) -> str:
    """The Set-Cookie value of cookie `name` (`COOKIE`, `DEVICE_COOKIE`) of this dashboard's port and path."""
    secure = "; Secure" if request.environ.get("wsgi.url_scheme") == "https" else ""
    path = request.base + "/"
    return f"{name}{request.port_suffix}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"


def read_form(environ: WSGIEnvironment) -> dict[str, str]:
    length_text = str(environ.get("CONTENT_LENGTH") or "0")
    if not WHOLE.fullmatch(length_text):
        raise BadRequest("malformed Content-Length")
    length = int(length_text)
    if length > MAX_FORM_BYTES:
        raise BadRequest(f"the form is larger than {MAX_FORM_BYTES} bytes", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        text = raw.decode("ascii")  # an urlencoded form is ASCII; its %-escapes are UTF-8
    except UnicodeDecodeError:
        raise BadRequest("the form is not application/x-www-form-urlencoded") from None
    return _fields(text, {"token", "id", "ns", "action", "csrf"}, "form field", MAX_FORM_BYTES)
