"""``persched web``: a small dashboard of a persched database, served locally or mounted in an app.

The stack is the standard library's (HTML built here with every value
escaped, charts drawn as inline SVG on the server, served by
`persched._web.server`): no build step, no JavaScript, no dependency to keep
up to date, and so ``persched[web]`` installs nothing more. Pages:

- ``/``: the jobs of one namespace (or of all, with a namespace column), a
  page at a time (state, schedule in words, next run, last outcome), with
  counts by state;
- ``/job?id=ID``: one job, a chart of the lateness and duration of its latest
  runs over time with missed ranges marked, and its run history;
- ``/runs?outcome=OUTCOME``: the runs of one namespace (or all), filterable
  by outcome.

Namespaces: the dashboard serves the namespace it was given (``--namespace``
or ``PERSCHED_NAMESPACE``, as the CLI; `Store.namespace`), and every page
takes ``ns=NAME`` for another one, or ``all=1`` (jobs, runs) for all of
them. A job page and its buttons look for the job in its page's namespace
only, as ``persched --namespace NAME show`` does, and an action is carried
out by a store of the form's namespace, whose methods touch only that
namespace's rows.

Reading: the database is opened as the CLI opens it (`_existing.open_existing`:
never created, never migrated) and read in short read transactions by the
keyset-paginated queries of `_views`, so a scheduler may run or not.

Parameters are parsed strictly: an unknown or repeated parameter, a number
that is not ASCII digits (at most 18), an id or namespace that the API
would refuse, a query that is not UTF-8: each is a 400 with the reason. The
status note after an action shows only texts of the server's own
(``msg=CODE``, one of `MESSAGES`), never text from the URL.

Writing: the pause, resume, run-now and deschedule buttons exist only for
someone who may act (`persched._web.auth`): a browser signed in with the
access token (``persched web``), or whoever the application's `authorize`
hook names (the dashboard mounted in an app). Every form carries a CSRF
token (an HMAC of who acts), and a POST is refused (403) without it, or with
an ``Origin`` (or ``Sec-Fetch-Site``) of another site. Actions call the
store methods of the CLI verbs and are logged at INFO (``persched._web``)
with who and the client's address.

Mounted under a prefix (``SCRIPT_NAME``, set by the framework), every link,
form and redirect starts with it, and the session cookie's path is it.

Threads: the server runs the application on a fixed pool of worker threads;
a `Store` holds one engine whose pool gives each thread its own connection.
The counts cache, the stores of other namespaces and the sessions are
guarded by their own locks; nothing else is shared between requests.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import secrets
import threading
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from .. import _realtime, _views
from .._existing import open_existing
from .._instant import Instant, to_datetime
from .._present import iso, job_state, relative
from .._signals import StopSignals
from .._store import Store
from .._store.records import RunNowVerdict
from ..clock import SystemClock
from ..errors import PerschedError, StoreError
from .auth import SESSION_SECONDS, Sessions, SignInLimiter, csrf_token, same_secret
from .hosts import HostCheck, HostRules, allow_every_host_warning, url_host
from .layout import CSS, chart, e, next_run, note, runs_table
from .request import (
    COOKIE,
    WHOLE,
    Actor,
    BadRequest,
    Request,
    Response,
    View,
    cookie,
    cross_site,
    job_id_of,
    namespace_of,
    query_of,
    read_form,
    same_text,
    whole,
)
from .server import Limits, Server

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import TypeAlias

    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from .._models import Job

    #: The hook of an application that mounts the dashboard: who acts (a name for the log), or None: may only read.
    Authorize: TypeAlias = Callable[[WSGIEnvironment], str | None]

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ENV_TOKEN",
    "MESSAGES",
    "WebApp",
    "make_web_server",
    "serve",
]

logger = logging.getLogger("persched._web")  # the name the docs give its log lines (docs/observability.md)

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
ENV_TOKEN: Final = "PERSCHED_WEB_TOKEN"
MIN_TOKEN_LENGTH: Final = 12  # characters; a short token is guessed quickly
PAGE_SIZE: Final = 50  # rows per page of jobs or runs
CHART_RUNS: Final = 200  # latest runs drawn on a job's chart
ACTIONS: Final = ("pause", "resume", "run-now", "deschedule")
MAX_NAMESPACE_LINKS: Final = 50  # namespaces linked in the header; others by ?ns=NAME
MAX_NAMESPACE_STORES: Final = 64  # stores of other namespaces kept for reuse
COUNTS_CACHE_NS: Final = 5_000_000_000  # the counts by namespace and state are reused this long (real time)

#: The status notes the pages show after an action (``msg=CODE``); no other text is ever shown there.
MESSAGES: Final = {
    "paused": "Paused: no run of it starts until it is resumed.",
    "not-paused": "Nothing changed: the job was not scheduled or running (see its state).",
    "resumed": "Resumed on its schedule from now.",
    "not-resumed": "Nothing changed: the job was not paused.",
    "run-now": "Run now requested: it runs as soon as a worker is free.",
    "run-now-pending": "A run-now is already pending.",
    "run-now-dropped": "Run now dropped: the job is running and its overlap policy is 'skip'.",
    "run-now-paused": "Run now refused: the job is paused.",
    "run-now-finished": "Run now refused: the job is finished.",
    "descheduled": "Descheduled: its current definition never starts again.",
    "no-job": "No such job in this namespace (descheduled meanwhile?).",
}
_RUN_NOW_CODES: Final = {
    RunNowVerdict.REQUESTED: "run-now",
    RunNowVerdict.PENDING: "run-now-pending",
    RunNowVerdict.DROPPED: "run-now-dropped",
    RunNowVerdict.PAUSED: "run-now-paused",
    RunNowVerdict.FINISHED: "run-now-finished",
    RunNowVerdict.UNKNOWN: "no-job",
}


class WebApp:
    """The dashboard as a WSGI application over one database.

    Args:
        store: Opened with `open_existing` (never migrated); its
            namespace is the one the pages show unless they ask for another.
        token: The access token that enables the action buttons after a
            sign-in (``persched web``); None: read-only, unless `authorize`.
        now: The wall clock (microseconds), for "in 3m" and for the actions' `now`.
        authorize: For an application that mounts the dashboard behind its
            own authentication: called with each request's WSGI environ, it
            returns who is acting (a name, logged with each action) or None
            (that request may only read). Not with `token`.
        secret: Keys the CSRF tokens of forms. Default: random per process,
            right for ``persched web``; an application served by several
            processes passes its own secret (the same in each) with `authorize`.
        session_seconds: How long a sign-in with the token lasts.
        monotonic: The clock of session expiry and the sign-in limit (seconds); tests pass their own.

    Raises:
        PerschedError: Both `token` and `authorize` given.
    """

    def __init__(
        self,
        store: Store,
        token: str | None = None,
        now: Callable[[], int] | None = None,
        *,
        authorize: Authorize | None = None,
        secret: bytes | None = None,
        session_seconds: float = SESSION_SECONDS,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        if token is not None and authorize is not None:
            raise PerschedError("WebApp: pass token (its own sign-in) or authorize (the application's), not both")
        self.store = store
        self.namespace = store.namespace
        self._token = None if token is None else token.encode()
        self._authorize = authorize
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._now = now or SystemClock().now_us
        clock = monotonic or _realtime.monotonic
        self._sessions = Sessions(session_seconds, clock)
        self._sign_ins = SignInLimiter(clock)
        self._lock = threading.Lock()  # guards the two caches below
        self._counts: tuple[int, dict[str, dict[str, int]]] | None = None  # (monotonic ns, by namespace and state)
        self._stores: dict[str, Store] = {}

    def close(self) -> None:
        """Close the database connections (the dashboard answers no request after it)."""
        self.store.engine.dispose()

    # -- WSGI -------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        request = self._request(environ)
        try:
            response = self._route(request)
        except BadRequest as exc:
            logger.info("web: %s %s from %s: %s", request.method, request.path[:200], request.client, exc)
            response = self._error(request, exc.status, str(exc))
        except StoreError as exc:
            logger.warning("web: %s", exc)
            response = self._error(request, HTTPStatus.SERVICE_UNAVAILABLE, f"The database cannot be read: {exc}")
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

    def _request(self, environ: WSGIEnvironment) -> Request:
        port = str(environ.get("SERVER_PORT", ""))
        cookie_name = f"{COOKIE}_{port}" if WHOLE.fullmatch(port) else COOKIE
        cookie = None
        for part in str(environ.get("HTTP_COOKIE", "")).split(";"):
            name, _, value = part.strip().partition("=")
            if name == cookie_name:
                cookie = value
        request = Request(
            environ=environ,
            method=str(environ.get("REQUEST_METHOD", "GET")),
            path=str(environ.get("PATH_INFO", "/") or "/"),
            base=str(environ.get("SCRIPT_NAME", "")).rstrip("/"),
            client=str(environ.get("REMOTE_ADDR", "?")),
            cookie_name=cookie_name,
            cookie=cookie,
        )
        request.actor = self._actor(request)
        return request

    def _actor(self, request: Request) -> Actor | None:
        if self._authorize is not None:
            name = self._authorize(request.environ)
            return None if not name else Actor(str(name), f"user:{name}")
        if self._token is None or request.cookie is None:
            return None
        session = self._sessions.check(request.cookie)
        return None if session is None else Actor("a token session", f"session:{session}")

    def _route(self, request: Request) -> Response:
        method, path = request.method, request.path
        if method in ("GET", "HEAD"):
            if path == "/":
                return self._jobs(request, query_of(request, {"ns", "all", "after", "msg"}))
            if path == "/job":
                return self._job(request, query_of(request, {"id", "ns", "before", "msg"}))
            if path == "/runs":
                return self._runs(request, query_of(request, {"ns", "all", "outcome", "before"}))
            if path == "/login":
                query_of(request, set())
                return self._login_form(request, None)
            return self._error(request, HTTPStatus.NOT_FOUND, f"No page {path[:200]}")
        if method == "POST":
            why = cross_site(request.environ)
            if why is not None:
                return self._refuse(request, why)
            form = read_form(request.environ)
            if path == "/login":
                return self._login(request, form)
            if path == "/logout":
                return self._logout(request)
            if path == "/action":
                return self._action(request, form)
            return self._error(request, HTTPStatus.NOT_FOUND, f"No form {path[:200]}")
        return self._error(request, HTTPStatus.METHOD_NOT_ALLOWED, f"{method[:20]} is not supported")

    # -- sign-in (the access token) -------------------------------------------------------

    def _login(self, request: Request, form: dict[str, str]) -> Response:
        if self._authorize is not None:
            return self._error(request, HTTPStatus.NOT_FOUND, "Sign in through the application.")
        if self._token is None:
            return self._refuse(request, "this dashboard was started without an access token: it is read-only")
        wait = self._sign_ins.retry_after(request.client)
        if wait is not None:
            logger.warning("web: sign-in refused from %s: too many failed sign-ins", request.client)
            seconds_left = max(1, math.ceil(wait))
            page = self._login_form(
                request, f"Too many failed sign-ins: try again in {seconds_left} s.", HTTPStatus.TOO_MANY_REQUESTS
            )
            return Response(page.status, page.body, (("Retry-After", str(seconds_left)),))
        if not same_secret(form.get("token", ""), self._token):
            self._sign_ins.failed(request.client)
            logger.warning("web: sign-in refused (wrong token) from %s", request.client)
            return self._login_form(request, "That is not the access token.", HTTPStatus.FORBIDDEN)
        value = self._sessions.create()
        logger.info("web: signed in from %s", request.client)
        session_cookie = cookie(request, value, round(self._sessions.lifetime))
        # Always this dashboard's own jobs page: no redirect target is ever taken from the request.
        return Response(HTTPStatus.SEE_OTHER, "", (("Location", request.url("/")), ("Set-Cookie", session_cookie)))

    def _logout(self, request: Request) -> Response:
        if request.cookie is not None and self._sessions.revoke(request.cookie):
            logger.info("web: signed out from %s", request.client)
        headers = (("Location", request.url("/")), ("Set-Cookie", cookie(request, "", 0)))
        return Response(HTTPStatus.SEE_OTHER, "", headers)

    def _refuse(self, request: Request, why: str) -> Response:
        logger.warning("web: refused %s %s from %s: %s", request.method, request.path[:200], request.client, why)
        return self._error(request, HTTPStatus.FORBIDDEN, f"Refused: {why}.")

    # -- actions ------------------------------------------------------------------------

    def _action(self, request: Request, form: dict[str, str]) -> Response:
        actor = request.actor
        if actor is None:
            if self._token is None and self._authorize is None:
                return self._refuse(request, "this dashboard was started without an access token: it is read-only")
            return self._refuse(request, "sign in first" if self._authorize is None else "you may not act here")
        if not same_text(form.get("csrf", ""), csrf_token(self._secret, actor.key)):
            return self._refuse(request, "the form's CSRF token is missing or stale; reload the page")
        action = form.get("action", "")
        if action not in ACTIONS:
            raise BadRequest(f"Unknown action {action[:40]!r}; one of {', '.join(ACTIONS)}")
        job_id = job_id_of("id", form.get("id"))
        namespace = namespace_of("ns", form.get("ns", self.namespace))
        code, said = self._apply(self._store_for(namespace), action, job_id, Instant(self._now()))
        logger.info(
            "web: %s of job %r (namespace %r) by %s from %s: %s",
            action,
            job_id,
            namespace,
            actor.name,
            request.client,
            said,
        )
        view = View(namespace, self.namespace).params()
        if code in ("descheduled", "no-job"):
            location = request.url("/", **view, msg=code)
        else:
            location = request.url("/job", id=job_id, **view, msg=code)
        return Response(HTTPStatus.SEE_OTHER, "", (("Location", location),))

    @staticmethod
    def _apply(store: Store, action: str, job_id: str, now: Instant) -> tuple[str, str]:
        """Do `action` through the store methods of the CLI verbs: (message code, what happened for the log)."""
        if action == "pause":
            generation = store.pause_job(job_id, now)
            if generation is None:
                return ("not-paused" if store.get_job(job_id) else "no-job"), "nothing changed"
            return "paused", f"paused (generation {generation})"
        if action == "resume":
            resumed = store.resume_job(job_id, now)
            if resumed is None:
                return ("not-resumed" if store.get_job(job_id) else "no-job"), "nothing changed"
            return "resumed", f"resumed (generation {resumed[0]})"
        if action == "run-now":
            verdict, generation = store.request_run_now(job_id, now)
            return _RUN_NOW_CODES[verdict], f"{verdict.value} (generation {generation})"
        generation = store.deschedule_job(job_id, now)
        if generation is None:
            return "no-job", "no such job"
        return "descheduled", f"descheduled (generation {generation})"

    # -- namespaces ----------------------------------------------------------------------

    def _store_for(self, namespace: str) -> Store:
        """A store of `namespace` on the dashboard's engine: its methods read and change that namespace only."""
        if namespace == self.namespace:
            return self.store
        with self._lock:
            found = self._stores.get(namespace)
        if found is not None:
            return found
        store = Store(self.store.engine, self.store.url, namespace=namespace)
        with self._lock:
            if len(self._stores) < MAX_NAMESPACE_STORES:
                self._stores.setdefault(namespace, store)
        return store

    def _view(self, query: dict[str, str], *, all_allowed: bool) -> View:
        everything, namespace = query.get("all"), query.get("ns")
        if everything is not None:
            if not all_allowed:
                raise BadRequest("all: this page shows one job; give ns=NAME")
            if everything != "1":
                raise BadRequest(f"all: must be 1, got {everything[:40]!r}")
            if namespace is not None:
                raise BadRequest("give ns=NAME or all=1, not both")
            return View(None, self.namespace)
        return View(namespace_of("ns", namespace) if namespace is not None else self.namespace, self.namespace)

    def _counts_bynamespace_of(self) -> dict[str, dict[str, int]]:
        """Jobs by namespace and state, reused for COUNTS_CACHE_NS: the count scans the jobs table."""
        now = _realtime.monotonic_ns()
        with self._lock:
            cached = self._counts
        if cached is not None and now - cached[0] < COUNTS_CACHE_NS:
            return cached[1]
        counts = _views.namespace_counts(self.store)
        with self._lock:
            self._counts = (now, counts)
        return counts

    def _namespace_nav(self, request: Request, view: View, page: str) -> str:
        """Which namespace the page shows, and links to the others (and to all of them)."""
        known = list(self._counts_bynamespace_of())
        if self.namespace not in known:
            known.insert(0, self.namespace)
        if view.namespace is not None and view.namespace not in known:
            known.append(view.namespace)
        shown = known[:MAX_NAMESPACE_LINKS]
        links = []
        for namespace in shown:
            params = View(namespace, self.namespace).params()
            on = ' class="on"' if namespace == view.namespace else ""
            links.append(f'<a href="{e(request.url(page, **params))}"{on}>{e(namespace)}</a>')
        if len(known) > len(shown):
            links.append(f"<span>and {len(known) - len(shown)} more (?ns=NAME)</span>")
        if page != "/job":
            on = ' class="on"' if view.namespace is None else ""
            links.append(f'<a href="{e(request.url(page, all=1))}" id="ns-all"{on}>all namespaces</a>')
        serving = "all namespaces" if view.namespace is None else f"namespace <b>{e(view.namespace)}</b>"
        return f'<nav class="namespaces"><span id="namespace">{serving}</span>: {" ".join(links)}</nav>'

    # -- pages --------------------------------------------------------------------------

    def _jobs(self, request: Request, query: dict[str, str]) -> Response:
        view = self._view(query, all_allowed=True)
        after = job_id_of("after", query["after"]) if "after" in query else None
        msg = message_of(query.get("msg"))
        jobs = _views.jobs_page(self.store, after, PAGE_SIZE + 1, namespace=view.namespace)
        more, jobs = len(jobs) > PAGE_SIZE, jobs[:PAGE_SIZE]
        by_namespace = self._counts_bynamespace_of()
        if view.namespace is None:
            counts: dict[str, int] = {}
            for states in by_namespace.values():
                for state, count in states.items():
                    counts[state] = counts.get(state, 0) + count
        else:
            counts = by_namespace.get(view.namespace) or dict.fromkeys(
                ("scheduled", "running", "paused", "finished"), 0
            )
        now = to_datetime(self._now())
        everything = view.namespace is None
        rows = "".join(
            "<tr>"
            f"<td>{self._job_link(request, job.job_id, job.namespace)}</td>"
            + (f'<td class="ns">{e(job.namespace)}</td>' if everything else "")
            + f'<td class="{e(job.state.value)}">{e(job_state(job))}</td>'
            f"<td>{e(job.schedule)}</td>"
            f"<td>{next_run(job, now)}</td>"
            f'<td class="{e(job.last_outcome or "")}">{e(job.last_outcome or "-")}</td>'
            f'<td class="num">{job.run_count}</td><td class="num">{job.error_count}</td>'
            "</tr>"
            for job in jobs
        )
        summary = "".join(f"<span>{e(state)}: <b>{count}</b></span>" for state, count in counts.items())
        pager = f'<a href="{e(request.url("/", **view.params()))}">first page</a>' if after is not None else ""
        if more:
            next_page = request.url("/", **view.params(), after=jobs[-1].job_id)
            pager += f'<a href="{e(next_page)}">next page &rarr;</a>'
        table = (
            "<table id=jobs><tr><th>Job</th>"
            + ("<th>Namespace</th>" if everything else "")
            + "<th>State</th><th>Schedule</th><th>Next run (UTC)</th>"
            f"<th>Last outcome</th><th>Runs</th><th>Errors</th></tr>{rows}</table>"
            if jobs
            else "<p>No jobs.</p>"
        )
        title = "Jobs" + ("" if view.namespace is None else f" of {view.namespace}")
        body = f'<h1>{e(title)}</h1>{note(msg)}<p class="counts">{summary}</p>{table}<p class="pager">{pager}</p>'
        return self._page(request, title, body, self._namespace_nav(request, view, "/"))

    def _job_link(self, request: Request, job_id: str, namespace: str | None) -> str:
        params = View(namespace, self.namespace).params() if namespace is not None else {}
        return f'<a href="{e(request.url("/job", id=job_id, **params))}">{e(job_id)}</a>'

    def _job(self, request: Request, query: dict[str, str]) -> Response:
        if "id" not in query:
            raise BadRequest("Which job? /job?id=JOB_ID")
        job_id = job_id_of("id", query["id"])
        view = self._view(query, all_allowed=False)
        assert view.namespace is not None  # all=1 refused above
        before = whole("before", query.get("before"))
        msg = message_of(query.get("msg"))
        nav = self._namespace_nav(request, view, "/")
        job = self._store_for(view.namespace).get_job(job_id)
        if job is None:
            elsewhere = _views.namespaces_of(self.store, [job_id]).get(job_id)
            hint = ""
            if elsewhere is not None and elsewhere != view.namespace:
                other = self._store_for(elsewhere).get_job(job_id)
                if other is not None:
                    link = self._job_link(request, job_id, elsewhere)
                    hint = f'<p id="elsewhere">{link} is a job of namespace {e(elsewhere)}.</p>'
            why = f"No active job {job_id!r} in namespace {view.namespace!r} (never scheduled, or descheduled)."
            return self._error(request, HTTPStatus.NOT_FOUND, why, nav, hint)
        history = _views.runs_page(self.store, job_id=job_id, before=before, limit=PAGE_SIZE + 1)
        more, history = len(history) > PAGE_SIZE, history[:PAGE_SIZE]
        latest = _views.runs_page(self.store, job_id=job_id, limit=CHART_RUNS)
        now = to_datetime(self._now())
        facts = [
            ("namespace", job.namespace),
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
            + "".join(f'<dt>{e(k)}</dt><dd id="job-{e(k.replace(" ", "-"))}">{e(v)}</dd>' for k, v in facts)
            + "</dl>"
        )
        params = view.params()
        pager = f'<a href="{e(request.url("/job", id=job_id, **params))}">newest</a>' if before is not None else ""
        if more:
            older = request.url("/job", id=job_id, **params, before=history[-1].run_id)
            pager += f'<a href="{e(older)}">older &rarr;</a>'
        body = (
            f"<h1>Job {e(job.job_id)}</h1>{note(msg)}{self._buttons(request, job)}{details}"
            f"<h2>Latest {len(latest)} runs</h2>{chart(latest)}"
            f'<h2>History</h2>{runs_table(history, None)}<p class="pager">{pager}</p>'
        )
        return self._page(request, f"Job {job.job_id}", body, nav)

    def _linker(self, request: Request, namespaces: Mapping[str, str]) -> Callable[[str], str]:
        return lambda job_id: self._job_link(request, job_id, namespaces.get(job_id))

    def _buttons(self, request: Request, job: Job) -> str:
        if self._token is None and self._authorize is None:
            return ""
        actor = request.actor
        if actor is None:
            if self._authorize is not None:
                return ""
            sign_in = e(request.url("/login"))
            return f'<p class="actions"><a href="{sign_in}">Sign in</a> to pause, resume, run now or deschedule.</p>'
        wanted = ["resume" if job.paused else "pause", "run-now", "deschedule"]
        csrf = csrf_token(self._secret, actor.key)
        forms = "".join(
            f'<form method="post" action="{e(request.url("/action"))}">'
            f'<input type="hidden" name="id" value="{e(job.job_id)}">'
            f'<input type="hidden" name="ns" value="{e(job.namespace)}">'
            f'<input type="hidden" name="action" value="{action}">'
            f'<input type="hidden" name="csrf" value="{csrf}">'
            f'<button type="submit" id="btn-{action}">{action.replace("-", " ").capitalize()}</button></form>'
            for action in wanted
        )
        return f'<div class="actions">{forms}</div>'

    def _runs(self, request: Request, query: dict[str, str]) -> Response:
        view = self._view(query, all_allowed=True)
        outcome = query.get("outcome") or None
        if outcome is not None and outcome not in _views.OUTCOMES:
            raise BadRequest(f"outcome must be one of {', '.join(_views.OUTCOMES)}")
        before = whole("before", query.get("before"))
        runs = _views.runs_page(
            self.store, outcome=outcome, before=before, limit=PAGE_SIZE + 1, namespace=view.namespace
        )
        more, runs = len(runs) > PAGE_SIZE, runs[:PAGE_SIZE]
        if view.namespace is None:
            namespaces = _views.namespaces_of(self.store, {run.job_id for run in runs})
        else:
            namespaces = {run.job_id: view.namespace for run in runs}
        params = view.params()
        filters = "".join(
            f'<a href="{e(request.url("/runs", **params, outcome=o))}" class="{"on" if o == outcome else ""}"'
            f' id="filter-{o or "all"}">{o or "all"}</a>'
            for o in (None, *_views.OUTCOMES)
        )
        newest = request.url("/runs", **params, outcome=outcome)
        pager = f'<a href="{e(newest)}">newest</a>' if before is not None else ""
        if more:
            older = request.url("/runs", **params, outcome=outcome, before=runs[-1].run_id)
            pager += f'<a href="{e(older)}">older &rarr;</a>'
        title = "Runs" + (f": {outcome}" if outcome else "")
        table = runs_table(runs, self._linker(request, namespaces), namespaces if view.namespace is None else None)
        body = f'<h1>{e(title)}</h1><p class="filters">{filters}</p>{table}<p class="pager">{pager}</p>'
        return self._page(request, title, body, self._namespace_nav(request, view, "/runs"))

    def _login_form(self, request: Request, problem: str | None, status: HTTPStatus = HTTPStatus.OK) -> Response:
        if self._authorize is not None:
            return self._error(request, HTTPStatus.NOT_FOUND, "Sign in through the application.")
        if self._token is None:
            body = "<h1>Read-only</h1><p>This dashboard was started without an access token, so it has no actions.</p>"
        elif request.actor is not None:
            body = (
                f'<h1>Signed in</h1><form method="post" action="{e(request.url("/logout"))}">'
                '<button id="btn-logout">Sign out</button></form>'
            )
        else:
            note = f'<p class="note">{e(problem)}</p>' if problem else ""
            body = (
                f'<h1>Sign in</h1>{note}<form method="post" action="{e(request.url("/login"))}">'
                '<label>Access token <input type="password" name="token" id="token" autocomplete="off"></label> '
                '<button type="submit" id="btn-login">Sign in</button></form>'
            )
        response = self._page(request, "Sign in", body)
        return Response(status, response.body, response.headers)

    def _page(self, request: Request, title: str, body: str, nav: str = "") -> Response:
        who = ""
        if self._authorize is not None:
            who = f"<span>signed in as {e(request.actor.name)}</span>" if request.actor is not None else ""
        elif self._token is not None:
            login = e(request.url("/login"))
            who = f'<a href="{login}">signed in</a>' if request.actor else f'<a href="{login}" id="signin">sign in</a>'
        page = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)} - persched</title>"
            f'<meta name=viewport content="width=device-width"><style>{CSS}</style></head><body>'
            f'<header><b>persched</b><a href="{e(request.url("/"))}">Jobs</a>'
            f'<a href="{e(request.url("/runs"))}">Runs</a>{who}'
            f'<span class="db">{e(self.store.url)}</span></header>{nav}<main>{body}</main></body></html>'
        )
        return Response(HTTPStatus.OK, page)

    def _error(
        self, request: Request, status: HTTPStatus, message: str, nav: str = "", more_html: str = ""
    ) -> Response:
        body = f'<h1>{e(status.phrase)}</h1><p id="problem">{e(message)}</p>{more_html}'
        return Response(status, self._page(request, status.phrase, body, nav).body)


def message_of(code: str | None) -> str | None:
    """The status note of ``msg=CODE``: only a text of `MESSAGES`."""
    if code is None:
        return None
    if code not in MESSAGES:
        raise BadRequest(f"msg: not a message of this dashboard: {code[:40]!r}")
    return MESSAGES[code]


# -- the server -------------------------------------------------------------------------------


def make_web_server(
    app: WebApp,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    allowed_hosts: Sequence[str] = (),
    limits: Limits | None = None,
) -> Server:
    """The dashboard's server for `app` (port 0: any free port; read it from ``server_port``).

    Requests pass `HostCheck` first: only the server's own names (`HostRules`
    and `allowed_hosts`) reach the pages.

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

    `ready` is called with the URL once the server listens. Never creates
    or migrates the database: `open_existing` refuses one that is not at
    the head revision.

    Raises:
        PerschedError: The token is too short, the database cannot be used, the address cannot be bound.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise PerschedError(f"--token: use at least {MIN_TOKEN_LENGTH} characters (e.g. `openssl rand -hex 16`)")
    store = open_existing(db) if namespace is None else open_existing(db, namespace)
    try:
        server = make_web_server(WebApp(store, token), host, port, allowed_hosts=allowed_hosts, limits=limits)
        stop = StopSignals()  # its handler takes no lock (persched._signals); the main thread stops the server
        thread = threading.Thread(target=server.serve_forever, name="persched-web", daemon=True)
        try:
            with stop.installed():
                thread.start()
                url = f"http://{url_host(host)}:{server.server_port}/"
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
