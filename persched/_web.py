"""``persched web``: a small dashboard of a persched database, served locally.

The stack is the standard library's (`wsgiref` with one thread per request,
HTML built here with every value escaped, charts drawn as inline SVG on the
server): no build step, no JavaScript, no dependency to keep up to date, and
so ``persched[web]`` installs nothing more. Pages:

- ``/``: the jobs, a page at a time (state, schedule in words, next run,
  last outcome), with counts by state;
- ``/job?id=ID``: one job, a chart of the lateness and duration of its latest
  runs over time with missed ranges marked, and its run history;
- ``/runs?outcome=OUTCOME``: every job's runs, filterable by outcome.

Reading: the database is opened as the CLI opens it (`cli.open_existing`:
never created, never migrated) and read in short read transactions by the
keyset-paginated queries of `_views`, so a scheduler may run or not.

Writing: the pause, resume, run-now and deschedule buttons exist only when
the server was given an access token (``--token`` or ``PERSCHED_WEB_TOKEN``)
and the browser signed in with it. Signing in sets a session cookie
(``HttpOnly; SameSite=Strict``) holding a random nonce and its HMAC under the
token; every form carries a CSRF token (an HMAC of the session nonce), and
a POST is refused (403) without a valid session, without the form's token,
or with an ``Origin`` other than this server. Actions call the store methods
of the CLI verbs and are logged at INFO (``persched._web``) with the client's
address.

Threads: `serve` answers each request on its own daemon thread
(``ThreadingMixIn``); a `Store` holds one engine whose pool gives each
thread its own connection. Nothing else is shared between requests.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import logging
import secrets
import socketserver
import threading
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from . import _realtime, _views
from ._instant import Instant, from_datetime, seconds, to_datetime
from ._signals import StopSignals
from ._store.records import RunNowVerdict
from .cli import human_duration, iso, job_state, open_existing, relative, run_outcome
from .clock import SystemClock
from .errors import PerschedError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from datetime import datetime

    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from ._models import Job, Run
    from ._store import Store

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ENV_TOKEN", "WebApp", "make_web_server", "serve"]

logger = logging.getLogger(__name__)

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
ENV_TOKEN: Final = "PERSCHED_WEB_TOKEN"
MIN_TOKEN_LENGTH: Final = 12  # characters; a short token is guessed quickly
PAGE_SIZE: Final = 50  # rows per page of jobs or runs
CHART_RUNS: Final = 200  # latest runs drawn on a job's chart
COOKIE: Final = "persched_session"
ACTIONS: Final = ("pause", "resume", "run-now", "deschedule")
MAX_FORM_BYTES: Final = 10_000
COUNTS_CACHE_NS: Final = 5_000_000_000  # the jobs page's counts by state are reused this long (real time)

_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header .db{margin-left:auto;color:#9aa;font-size:12px}
main{padding:1em 1.2em}h1{font-size:20px;margin:.2em 0 .6em}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border-bottom:1px solid #e3e6ea;padding:.35em .6em;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right}
.ok{color:#17803d}.error,.lost{color:#b3261e;font-weight:600}.missed{color:#9a6700}
.running{color:#1f5fbf}.paused,.finished{color:#667}
.counts span{display:inline-block;margin-right:1.2em}.pager{margin:.8em 0}
.pager a,.filters a{margin-right:1em}.filters a.on{font-weight:700;text-decoration:none;color:#1d2330}
.actions form{display:inline}.actions button{margin-right:.5em;padding:.3em .9em}
.note{background:#fff8c5;border:1px solid #e8d77a;padding:.5em .8em;margin:.6em 0}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;background:#fff;padding:.8em}
dt{color:#667}dd{margin:0}pre{white-space:pre-wrap;margin:0;font-size:12px}
svg{background:#fff;border:1px solid #e3e6ea}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _q(**params: object) -> str:
    return urllib.parse.urlencode({k: str(v) for k, v in params.items() if v is not None})


def _job_link(job_id: str) -> str:
    return f'<a href="/job?{_e(_q(id=job_id))}">{_e(job_id)}</a>'


def _outcome_class(run: Run) -> str:
    return run.outcome or "running"


@dataclass(frozen=True)
class _Response:
    status: HTTPStatus
    body: str
    headers: tuple[tuple[str, str], ...] = ()


class WebApp:
    """The dashboard as a WSGI application over one store.

    Args:
        store: Opened with `cli.open_existing` (read-only; never migrated).
        token: The access token that enables the action buttons; None: read-only.
        now: The wall clock (microseconds), for "in 3m" and for the actions' `now`.
    """

    def __init__(self, store: Store, token: str | None = None, now: Callable[[], int] | None = None) -> None:
        self.store = store
        self._token = None if token is None else token.encode()
        self._now = now or SystemClock().now_us
        self._counts_lock = threading.Lock()
        self._counts: tuple[int, dict[str, int]] | None = None  # (monotonic ns, jobs by state)

    # -- WSGI -------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        try:
            response = self._route(environ)
        except StoreError as exc:
            logger.warning("web: %s", exc)
            response = self._error(HTTPStatus.SERVICE_UNAVAILABLE, f"The database cannot be read: {exc}")
        body = response.body.encode()
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-Frame-Options", "DENY"),  # no clickjacking of the buttons
            ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"),
            ("Referrer-Policy", "same-origin"),
            *response.headers,
        ]
        start_response(f"{response.status.value} {response.status.phrase}", headers)
        return [body]

    def _route(self, environ: WSGIEnvironment) -> _Response:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))

        def arg(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        session = self._session(environ)
        if method in ("GET", "HEAD"):
            if path == "/":
                return self._jobs(arg("after"), session)
            if path == "/job":
                job_id = arg("id")
                if job_id is None:
                    return self._error(HTTPStatus.BAD_REQUEST, "Which job? /job?id=JOB_ID")
                return self._job(job_id, _int(arg("before")), arg("msg"), session)
            if path == "/runs":
                return self._runs(arg("outcome"), _int(arg("before")), session)
            if path == "/login":
                return self._login_form(session, None)
            return self._error(HTTPStatus.NOT_FOUND, f"No page {path}")
        if method == "POST":
            if not self._same_origin(environ):
                return self._refuse(environ, "the request came from another site")
            form = _read_form(environ)
            if path == "/login":
                return self._login(environ, form.get("token", ""))
            if path == "/logout":
                return _Response(HTTPStatus.SEE_OTHER, "", (("Location", "/"), ("Set-Cookie", _cookie("", 0))))
            if path == "/action":
                return self._action(environ, form, session)
            return self._error(HTTPStatus.NOT_FOUND, f"No form {path}")
        return self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not supported")

    # -- sessions and CSRF ------------------------------------------------------------

    def _sign(self, purpose: str, nonce: str) -> str:
        assert self._token is not None
        return hmac.new(self._token, f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()

    def _session(self, environ: WSGIEnvironment) -> str | None:
        """The signed-in session's nonce, or None."""
        if self._token is None:
            return None
        for part in environ.get("HTTP_COOKIE", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                nonce, _, mac = value.partition(".")
                if nonce and hmac.compare_digest(mac, self._sign("session", nonce)):
                    return str(nonce)
        return None

    def _csrf(self, session: str) -> str:
        return self._sign("csrf", session)

    @staticmethod
    def _same_origin(environ: WSGIEnvironment) -> bool:
        origin: str | None = environ.get("HTTP_ORIGIN")
        if origin is None or origin == "null":
            return origin is None  # an opaque origin ("null") is never ours
        return bool(urllib.parse.urlsplit(origin).netloc == environ.get("HTTP_HOST", ""))

    def _login(self, environ: WSGIEnvironment, token: str) -> _Response:
        if self._token is None:
            return self._refuse(environ, "this dashboard was started without an access token: it is read-only")
        if not hmac.compare_digest(token.encode(), self._token):
            logger.warning("web: sign-in refused (wrong token) from %s", _client(environ))
            return self._login_form(None, "That is not the access token.", HTTPStatus.FORBIDDEN)
        nonce = secrets.token_hex(16)
        logger.info("web: signed in from %s", _client(environ))
        value = f"{nonce}.{self._sign('session', nonce)}"
        return _Response(HTTPStatus.SEE_OTHER, "", (("Location", "/"), ("Set-Cookie", _cookie(value, None))))

    def _refuse(self, environ: WSGIEnvironment, why: str) -> _Response:
        logger.warning(
            "web: refused %s %s from %s: %s",
            environ.get("REQUEST_METHOD"),
            environ.get("PATH_INFO"),
            _client(environ),
            why,
        )
        return self._error(HTTPStatus.FORBIDDEN, f"Refused: {why}.")

    # -- actions ------------------------------------------------------------------------

    def _action(self, environ: WSGIEnvironment, form: dict[str, str], session: str | None) -> _Response:
        job_id, action = form.get("id", ""), form.get("action", "")
        if self._token is None:
            return self._refuse(environ, "this dashboard was started without an access token: it is read-only")
        if session is None:
            return self._refuse(environ, "sign in with the access token first")
        if not hmac.compare_digest(form.get("csrf", ""), self._csrf(session)):
            return self._refuse(environ, "the form's CSRF token is missing or stale; reload the page")
        if action not in ACTIONS:
            return self._error(HTTPStatus.BAD_REQUEST, f"Unknown action {action!r}; one of {', '.join(ACTIONS)}")
        now = Instant(self._now())
        message = self._apply(action, job_id, now)
        logger.info("web: %s of job %r from %s: %s", action, job_id, _client(environ), message)
        location = "/" if action == "deschedule" else f"/job?{_q(id=job_id, msg=message)}"
        return _Response(HTTPStatus.SEE_OTHER, "", (("Location", location),))

    def _apply(self, action: str, job_id: str, now: Instant) -> str:
        """Do `action` through the store methods of the CLI verbs; say what happened."""
        store = self.store
        if action == "pause":
            generation = store.pause_job(job_id, now)
            return (
                f"paused (generation {generation})" if generation is not None else "not paused: " + self._where(job_id)
            )
        if action == "resume":
            resumed = store.resume_job(job_id, now)
            return (
                f"resumed (generation {resumed[0]})" if resumed is not None else "not resumed: " + self._where(job_id)
            )
        if action == "run-now":
            verdict, generation = store.request_run_now(job_id, now)
            return {
                RunNowVerdict.REQUESTED: f"run-now requested (generation {generation})",
                RunNowVerdict.PENDING: "a run-now is already pending",
                RunNowVerdict.DROPPED: "run-now dropped: the job is running and its overlap policy is 'skip'",
                RunNowVerdict.PAUSED: "run-now refused: the job is paused",
                RunNowVerdict.FINISHED: "run-now refused: the job is finished",
                RunNowVerdict.UNKNOWN: "no such job",
            }[verdict]
        generation = store.deschedule_job(job_id, now)
        return f"descheduled {job_id!r} (generation {generation})" if generation is not None else "no such job"

    def _where(self, job_id: str) -> str:
        job = self.store.get_job(job_id)
        return "no such job" if job is None else f"it is {job_state(job)}"

    # -- pages --------------------------------------------------------------------------

    def _jobs(self, after: str | None, session: str | None) -> _Response:
        jobs = _views.jobs_page(self.store, after, PAGE_SIZE + 1)
        more, jobs = len(jobs) > PAGE_SIZE, jobs[:PAGE_SIZE]
        counts = self._job_counts()
        now = to_datetime(self._now())
        rows = "".join(
            "<tr>"
            f"<td>{_job_link(job.job_id)}</td>"
            f'<td class="{_e(job.state.value)}">{_e(job_state(job))}</td>'
            f"<td>{_e(job.schedule)}</td>"
            f"<td>{_next_run(job, now)}</td>"
            f'<td class="{_e(job.last_outcome or "")}">{_e(job.last_outcome or "-")}</td>'
            f'<td class="num">{job.run_count}</td><td class="num">{job.error_count}</td>'
            "</tr>"
            for job in jobs
        )
        summary = "".join(f"<span>{_e(state)}: <b>{count}</b></span>" for state, count in counts.items())
        pager = '<a href="/">first page</a>' if after is not None else ""
        if more:
            pager += f'<a href="/?{_e(_q(after=jobs[-1].job_id))}">next page &rarr;</a>'
        table = (
            "<table id=jobs><tr><th>Job</th><th>State</th><th>Schedule</th><th>Next run (UTC)</th>"
            f"<th>Last outcome</th><th>Runs</th><th>Errors</th></tr>{rows}</table>"
            if jobs
            else "<p>No jobs.</p>"
        )
        body = f'<h1>Jobs</h1><p class="counts">{summary}</p>{table}<p class="pager">{pager}</p>'
        return self._page("Jobs", body, session)

    def _job_counts(self) -> dict[str, int]:
        """Jobs by state, reused for COUNTS_CACHE_NS: the count scans the jobs table (about 90 ms at 100,000 jobs)."""
        now = _realtime.monotonic_ns()
        with self._counts_lock:
            cached = self._counts
        if cached is not None and now - cached[0] < COUNTS_CACHE_NS:
            return cached[1]
        counts = _views.job_counts(self.store)
        with self._counts_lock:
            self._counts = (now, counts)
        return counts

    def _job(self, job_id: str, before: int | None, msg: str | None, session: str | None) -> _Response:
        job = self.store.get_job(job_id)
        if job is None:
            return self._error(HTTPStatus.NOT_FOUND, f"No active job {job_id!r} (never scheduled, or descheduled).")
        history = _views.runs_page(self.store, job_id=job_id, before=before, limit=PAGE_SIZE + 1)
        more, history = len(history) > PAGE_SIZE, history[:PAGE_SIZE]
        latest = _views.runs_page(self.store, job_id=job_id, limit=CHART_RUNS)
        now = to_datetime(self._now())
        facts = [
            ("state", job_state(job) + (f" on {job.owner}" if job.owner else "")),
            ("schedule", job.schedule),
            (
                "next run",
                "-"
                if job.paused or job.state.value == "finished"
                else f"{iso(job.next_run_at)} ({relative(job.next_run_at, now)})",
            ),
            ("target", job.target),
            ("runs", f"{job.run_count} ({job.error_count} errors), last outcome {job.last_outcome or '-'}"),
            ("generation", str(job.generation)),
            ("updated", iso(job.updated_at)),
        ]
        details = (
            "<dl>"
            + "".join(f'<dt>{_e(k)}</dt><dd id="job-{_e(k.replace(" ", "-"))}">{_e(v)}</dd>' for k, v in facts)
            + "</dl>"
        )
        note = f'<p class="note" id="message">{_e(msg)}</p>' if msg else ""
        pager = f'<a href="/job?{_e(_q(id=job_id))}">newest</a>' if before is not None else ""
        if more:
            pager += f'<a href="/job?{_e(_q(id=job_id, before=history[-1].run_id))}">older &rarr;</a>'
        body = (
            f"<h1>Job {_e(job.job_id)}</h1>{note}{self._buttons(job, session)}{details}"
            f"<h2>Latest {len(latest)} runs</h2>{chart(latest)}"
            f'<h2>History</h2>{_runs_table(history, with_job=False)}<p class="pager">{pager}</p>'
        )
        return self._page(f"Job {job.job_id}", body, session)

    def _buttons(self, job: Job, session: str | None) -> str:
        if self._token is None:
            return ""
        if session is None:
            return '<p class="actions"><a href="/login">Sign in</a> to pause, resume, run now or deschedule.</p>'
        wanted = ["resume" if job.paused else "pause", "run-now", "deschedule"]
        forms = "".join(
            '<form method="post" action="/action">'
            f'<input type="hidden" name="id" value="{_e(job.job_id)}">'
            f'<input type="hidden" name="action" value="{action}">'
            f'<input type="hidden" name="csrf" value="{self._csrf(session)}">'
            f'<button type="submit" id="btn-{action}">{action.replace("-", " ").capitalize()}</button></form>'
            for action in wanted
        )
        return f'<div class="actions">{forms}</div>'

    def _runs(self, outcome: str | None, before: int | None, session: str | None) -> _Response:
        if outcome == "":
            outcome = None
        if outcome is not None and outcome not in _views.OUTCOMES:
            return self._error(HTTPStatus.BAD_REQUEST, f"outcome must be one of {', '.join(_views.OUTCOMES)}")
        runs = _views.runs_page(self.store, outcome=outcome, before=before, limit=PAGE_SIZE + 1)
        more, runs = len(runs) > PAGE_SIZE, runs[:PAGE_SIZE]
        filters = "".join(
            f'<a href="/runs{"?" + _e(_q(outcome=o)) if o else ""}" class="{"on" if o == outcome else ""}"'
            f' id="filter-{o or "all"}">{o or "all"}</a>'
            for o in (None, *_views.OUTCOMES)
        )
        pager = f'<a href="/runs?{_e(_q(outcome=outcome))}">newest</a>' if before is not None else ""
        if more:
            pager += f'<a href="/runs?{_e(_q(outcome=outcome, before=runs[-1].run_id))}">older &rarr;</a>'
        title = "Runs" + (f": {outcome}" if outcome else "")
        body = (
            f'<h1>{_e(title)}</h1><p class="filters">{filters}</p>'
            f'{_runs_table(runs, with_job=True)}<p class="pager">{pager}</p>'
        )
        return self._page(title, body, session)

    def _login_form(self, session: str | None, problem: str | None, status: HTTPStatus = HTTPStatus.OK) -> _Response:
        if self._token is None:
            body = "<h1>Read-only</h1><p>This dashboard was started without an access token, so it has no actions.</p>"
        elif session is not None:
            body = (
                '<h1>Signed in</h1><form method="post" action="/logout">'
                '<button id="btn-logout">Sign out</button></form>'
            )
        else:
            note = f'<p class="note">{_e(problem)}</p>' if problem else ""
            body = (
                f'<h1>Sign in</h1>{note}<form method="post" action="/login">'
                '<label>Access token <input type="password" name="token" id="token" autocomplete="off"></label> '
                '<button type="submit" id="btn-login">Sign in</button></form>'
            )
        response = self._page("Sign in", body, session)
        return _Response(status, response.body, response.headers)

    def _page(self, title: str, body: str, session: str | None) -> _Response:
        who = ""
        if self._token is not None:
            who = (
                '<a href="/login">signed in</a>' if session is not None else '<a href="/login" id="signin">sign in</a>'
            )
        page = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)} - persched</title>"
            f'<meta name=viewport content="width=device-width"><style>{_CSS}</style></head><body>'
            f'<header><b>persched</b><a href="/">Jobs</a><a href="/runs">Runs</a>{who}'
            f'<span class="db">{_e(self.store.url)}</span></header><main>{body}</main></body></html>'
        )
        return _Response(HTTPStatus.OK, page)

    def _error(self, status: HTTPStatus, message: str) -> _Response:
        page = self._page(status.phrase, f'<h1>{_e(status.phrase)}</h1><p id="problem">{_e(message)}</p>', None)
        return _Response(status, page.body)


# -- pieces -------------------------------------------------------------------------------


def _runs_table(runs: Sequence[Run], *, with_job: bool) -> str:
    if not runs:
        return "<p>No runs recorded.</p>"
    head = (
        "<tr><th>Run</th>"
        + ("<th>Job</th>" if with_job else "")
        + (
            "<th>Scheduled for (UTC)</th><th>Started</th><th>Lateness</th><th>Duration</th>"
            "<th>Outcome</th><th>Error</th></tr>"
        )
    )
    rows = []
    for run in runs:
        ran = run.outcome != "missed"
        late = _span(run.scheduled_for, run.started_at) if ran else "-"
        took = _span(run.started_at, run.finished_at) if ran and run.finished_at is not None else "-"
        error = (run.error or "").strip().splitlines()[-1:] or [""]
        rows.append(
            f"<tr><td class=num>{run.run_id}</td>"
            + (f"<td>{_job_link(run.job_id)}</td>" if with_job else "")
            + f"<td>{_e(iso(run.scheduled_for))}</td><td>{_e(iso(run.started_at))}</td>"
            f"<td class=num>{_e(late)}</td><td class=num>{_e(took)}</td>"
            f'<td class="{_e(_outcome_class(run))}">{_e(run_outcome(run))}</td>'
            f"<td><pre>{_e(error[0][:200])}</pre></td></tr>"
        )
    return f"<table id=runs>{head}{''.join(rows)}</table>"


def _span(start: datetime, end: datetime | None) -> str:
    if end is None:
        return "-"
    return human_duration(seconds(max(from_datetime(end) - from_datetime(start), 0)))


def _next_run(job: Job, now: datetime) -> str:
    if job.paused or job.state.value == "finished":
        return "-"
    return f"{_e(iso(job.next_run_at))} <small>({_e(relative(job.next_run_at, now))})</small>"


def _int(text: str | None) -> int | None:
    if text is None or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def _client(environ: WSGIEnvironment) -> str:
    return str(environ.get("REMOTE_ADDR", "?"))


def _cookie(value: str, max_age: int | None) -> str:
    age = "" if max_age is None else f"; Max-Age={max_age}"
    return f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict{age}"


def _read_form(environ: WSGIEnvironment) -> dict[str, str]:
    try:
        length = min(int(environ.get("CONTENT_LENGTH") or 0), MAX_FORM_BYTES)
    except ValueError:
        length = 0
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    fields = urllib.parse.parse_qs(raw.decode("utf-8", "replace"))
    return {name: values[0] for name, values in fields.items()}


# -- the chart ------------------------------------------------------------------------------

_W: Final = 900  # px
_H: Final = 130  # px per panel
_PAD: Final = 50  # px left margin for the axis labels


def _lateness(run: Run) -> int | None:
    return from_datetime(run.started_at) - from_datetime(run.scheduled_for)


def _duration(run: Run) -> int | None:
    return None if run.finished_at is None else from_datetime(run.finished_at) - from_datetime(run.started_at)


def chart(runs: Sequence[Run]) -> str:
    """Lateness and duration of `runs` over time as two SVG panels; missed ranges shaded, failures red."""
    if not runs:
        return "<p>No runs to chart yet.</p>"
    ran = [r for r in runs if r.outcome != "missed"]
    missed = [r for r in runs if r.outcome == "missed"]
    instants = [from_datetime(r.scheduled_for) for r in runs]
    instants += [from_datetime(r.missed_until) for r in missed if r.missed_until is not None]
    first, last = min(instants), max(instants)
    span = max(last - first, 1)

    def x(at: datetime) -> float:
        return _PAD + (from_datetime(at) - first) * (_W - _PAD - 10) / span

    bands = "".join(
        f'<rect class="missed-range" x="{x(r.scheduled_for):.1f}" y="4" height="{_H - 22}" fill="#f2c94c"'
        f' opacity=".45" width="{max(x(r.missed_until or r.scheduled_for) - x(r.scheduled_for), 2):.1f}">'
        f"<title>{_e(run_outcome(r))}</title></rect>"
        for r in missed
    )
    panels = []
    for name, measure in (("lateness", _lateness), ("duration", _duration)):
        points = sorted(
            ((r, v) for r in ran if (v := measure(r)) is not None), key=lambda p: from_datetime(p[0].scheduled_for)
        )
        top = max([v for _, v in points] + [1_000])  # at least 1 ms of scale

        def y(v: int, top: int = top) -> float:
            return _H - 18 - max(v, 0) * (_H - 30) / top

        line = " ".join(f"{x(r.scheduled_for):.1f},{y(v):.1f}" for r, v in points)
        dots = []
        for r, v in points:
            bad = r.outcome in ("error", "lost")
            tip = f"{iso(r.scheduled_for)} {name} {human_duration(seconds(max(v, 0)))} ({r.outcome or 'running'})"
            dots.append(
                f'<circle cx="{x(r.scheduled_for):.1f}" cy="{y(v):.1f}" r="{3 if bad else 2}"'
                f' fill="{"#b3261e" if bad else "#1f5fbf"}"><title>{_e(tip)}</title></circle>'
            )
        panels.append(
            f'<svg id="chart-{name}" role="img" aria-label="{name} of the latest runs" width="{_W}" height="{_H}"'
            f' viewBox="0 0 {_W} {_H}" xmlns="http://www.w3.org/2000/svg">{bands}'
            f'<line x1="{_PAD}" y1="{_H - 18}" x2="{_W - 10}" y2="{_H - 18}" stroke="#999"/>'
            f'<text x="4" y="14" font-size="11">{_e(human_duration(seconds(top)))}</text>'
            f'<text x="4" y="{_H - 20}" font-size="11">0</text>'
            f'<text x="{_PAD}" y="{_H - 4}" font-size="11">{_e(iso(to_datetime(first)))}</text>'
            f'<text x="{_W - 10}" y="{_H - 4}" font-size="11" text-anchor="end">{_e(iso(to_datetime(last)))}</text>'
            f'<text x="{_W // 2}" y="14" font-size="12" text-anchor="middle">{name}</text>'
            f'<polyline points="{line}" fill="none" stroke="#1f5fbf" stroke-width="1"/>{"".join(dots)}</svg>'
        )
    return "<div class=chart>" + "<br>".join(panels) + "</div>"


# -- the server -------------------------------------------------------------------------------


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow browser never holds up shutdown


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        logger.debug("web: %s %s", self.address_string(), format % args)


def make_web_server(app: WebApp, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> WSGIServer:
    """A threading WSGI server for `app` (port 0: any free port; read it from ``server_port``).

    Raises:
        PerschedError: The address cannot be bound.
    """
    try:
        return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise PerschedError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def serve(db: str, host: str, port: int, token: str | None, ready: Callable[[str], None]) -> None:
    """Serve the dashboard of database `db` until SIGINT or SIGTERM (the ``persched web`` command).

    `ready` is called with the URL once the server listens. Never creates
    or migrates the database: `cli.open_existing` refuses one that is not at
    the head revision.

    Raises:
        PerschedError: The token is too short, the database cannot be used, the address cannot be bound.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise PerschedError(f"--token: use at least {MIN_TOKEN_LENGTH} characters (e.g. `openssl rand -hex 16`)")
    store = open_existing(db)
    try:
        server = make_web_server(WebApp(store, token), host, port)
        stop = StopSignals()  # its handler takes no lock (persched._signals); the main thread stops the server
        thread = threading.Thread(target=server.serve_forever, name="persched-web", daemon=True)
        try:
            with stop.installed():
                thread.start()
                url = f"http://{_url_host(host)}:{server.server_port}/"
                if not ipaddress_is_loopback(host):
                    logger.warning(
                        "web: listening on %s, reachable from other machines: job data is visible there", host
                    )
                logger.info("web: serving %s on %s (%s)", store.url, url, "actions on" if token else "read-only")
                ready(url)
                while not stop.wait(1.0):  # a timed wait keeps the main thread responsive to signals
                    pass
                logger.info("web: stopping")
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5.0)
    finally:
        store.engine.dispose()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def ipaddress_is_loopback(host: str) -> bool:
    """True for a loopback address or "localhost"."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
