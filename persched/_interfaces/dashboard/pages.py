"""The pages that read: the jobs (``/``), one job (``/job?id=ID``) and the runs (``/runs``).

Each reads through the keyset-paginated queries of `persched._store.views`, and shows what
`persched check` would (`persched._store.health`): a banner when no scheduler is alive, a mark on
each job that is overdue or failing.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ..._model.instant import Instant, to_datetime
from ..._store import health as _health
from ..._store import views as _views
from ..present import COUNTS_NOTE, iso, job_state, pending_attempt, problem_words, relative, retry_policy, run_counts
from .actions import message_of
from .chart import chart
from .layout import e, next_run, note, runs_table
from .request import BadRequest, View, job_id_of, whole

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from ..._model.models import Job
    from ..._store.health import Problem
    from .auth import Access
    from .layout import Frame
    from .namespaces import Namespaces
    from .request import Request, Response

__all__ = ["Pages"]

PAGE_SIZE: Final = 50  # rows per page of jobs or runs
CHART_RUNS: Final = 200  # latest runs drawn on a job's chart


class Pages:
    """The pages that read, over the namespaces of one dashboard.

    Args:
        namespaces: The dashboard's store and the namespaces it shows.
        access: Who may act: a job page shows them its buttons.
        frame: The frame of the pages.
        now: The wall clock (microseconds), for "in 3m".
    """

    def __init__(self, namespaces: Namespaces, access: Access, frame: Frame, now: Callable[[], int]) -> None:
        self._namespaces = namespaces
        self._store = namespaces.store
        self._access = access
        self._frame = frame
        self._now = now

    def jobs(self, request: Request, query: dict[str, str]) -> Response:
        view = self._namespaces.view(query, all_allowed=True)
        after = job_id_of("after", query["after"]) if "after" in query else None
        msg = message_of(query.get("msg"))
        jobs = _views.jobs_page(self._store, after, PAGE_SIZE + 1, namespace=self._namespaces.scope(view))
        more, jobs = len(jobs) > PAGE_SIZE, jobs[:PAGE_SIZE]
        by_namespace = self._namespaces.counts()
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
        found = self._problems(view.namespace, [job.job_id for job in jobs])
        rows = "".join(
            "<tr>"
            f"<td>{self._job_link(request, job.job_id, job.namespace)}"
            f"{_marks(found, job.namespace, job.job_id)}</td>"
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
            f'<th>Last outcome</th><th title="{e(COUNTS_NOTE)}">Runs</th><th title="{e(COUNTS_NOTE)}">Errors</th>'
            f"</tr>{rows}</table>"
            if jobs
            else "<p>No jobs.</p>"
        )
        title = "Jobs" + ("" if view.namespace is None else f" of {view.namespace}")
        body = (
            f"<h1>{e(title)}</h1>{_banner(found)}{note(msg)}"
            f'<p class="counts">{summary}</p>{table}<p class="pager">{pager}</p>'
        )
        return self._frame.page(request, title, body, self._namespaces.nav(request, view, "/"))

    def _job_link(self, request: Request, job_id: str, namespace: str | None) -> str:
        params = View(namespace, self._namespaces.home).params() if namespace is not None else {}
        return f'<a href="{e(request.url("/job", id=job_id, **params))}">{e(job_id)}</a>'

    def job(self, request: Request, query: dict[str, str]) -> Response:
        if "id" not in query:
            raise BadRequest("Which job? /job?id=JOB_ID")
        job_id = job_id_of("id", query["id"])
        view = self._namespaces.view(query, all_allowed=False)
        assert view.namespace is not None  # all=1 refused above
        before = whole("before", query.get("before"))
        msg = message_of(query.get("msg"))
        nav = self._namespaces.nav(request, view, "/")
        job = self._namespaces.store_for(view.namespace).get_job(job_id)
        if job is None:
            elsewhere = _views.namespaces_of(self._store, [job_id]).get(job_id)
            hint = ""
            if elsewhere is not None and elsewhere != view.namespace and self._namespaces.serves(elsewhere):
                other = self._namespaces.store_for(elsewhere).get_job(job_id)
                if other is not None:
                    link = self._job_link(request, job_id, elsewhere)
                    hint = f'<p id="elsewhere">{link} is a job of namespace {e(elsewhere)}.</p>'
            why = f"No active job {job_id!r} in namespace {view.namespace!r} (never scheduled, or descheduled)."
            return self._frame.error(request, HTTPStatus.NOT_FOUND, why, nav, hint)
        found = self._problems(view.namespace, [job_id])
        history = _views.runs_page(self._store, job_id=job_id, before=before, limit=PAGE_SIZE + 1)
        more, history = len(history) > PAGE_SIZE, history[:PAGE_SIZE]
        latest = _views.runs_page(self._store, job_id=job_id, limit=CHART_RUNS)
        now = to_datetime(self._now())
        facts = [
            ("namespace", job.namespace),
            ("state", job_state(job) + (f" on {job.owner}" if job.owner else "")),
            ("schedule", job.schedule),
            *([("excluded dates", ", ".join(job.exclude))] if job.exclude else []),
            *([("retries", retries)] if (retries := retry_policy(job)) is not None else []),
            (
                "next run",
                "-"
                if job.paused or job.state.value == "finished"
                else f"{iso(job.next_run_at)} ({relative(job.next_run_at, now)})"
                + ("" if (pending := pending_attempt(job)) is None else f", {pending}"),
            ),
            ("target", job.target),
            ("runs", run_counts(job)),
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
            f"<h1>Job {e(job.job_id)}{_marks(found, job.namespace, job_id)}</h1>"
            f"{_banner(found)}{note(msg)}{self._buttons(request, job)}{details}"
            f"<h2>Latest {len(latest)} runs</h2>{chart(latest)}"
            f'<h2>History</h2>{runs_table(history, None)}<p class="pager">{pager}</p>'
        )
        return self._frame.page(request, f"Job {job.job_id}", body, nav)

    def _problems(self, namespace: str | None, job_ids: Collection[str]) -> list[Problem]:
        """What `persched check` finds for a namespace (None: every one), the jobs `job_ids` only."""
        store = self._store if namespace is None else self._namespaces.store_for(namespace)
        found = _health.problems(store, Instant(self._now()), all_namespaces=namespace is None, job_ids=job_ids)
        return [problem for problem in found if self._namespaces.serves(problem.namespace)]

    def _linker(self, request: Request, namespaces: Mapping[str, str]) -> Callable[[str], str]:
        return lambda job_id: self._job_link(request, job_id, namespaces.get(job_id))

    def _buttons(self, request: Request, job: Job) -> str:
        if self._access.read_only:
            return ""
        actor = request.actor
        if actor is None:
            if self._access.authorize is not None:
                return ""
            sign_in = e(request.url("/login"))
            verbs = "pause, resume, run now, cancel or deschedule"
            return f'<p class="actions"><a href="{sign_in}">Sign in</a> to {verbs}.</p>'
        wanted = [
            "resume" if job.paused else "pause",
            "run-now",
            *(["cancel"] if job.state.value == "running" else []),
            "deschedule",
        ]
        csrf = self._access.csrf(actor)
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

    def runs(self, request: Request, query: dict[str, str]) -> Response:
        view = self._namespaces.view(query, all_allowed=True)
        outcome = query.get("outcome") or None
        if outcome is not None and outcome not in _views.OUTCOMES:
            raise BadRequest(f"outcome must be one of {', '.join(_views.OUTCOMES)}")
        before = whole("before", query.get("before"))
        runs = _views.runs_page(
            self._store, outcome=outcome, before=before, limit=PAGE_SIZE + 1, namespace=self._namespaces.scope(view)
        )
        more, runs = len(runs) > PAGE_SIZE, runs[:PAGE_SIZE]
        if view.namespace is None:
            namespaces = _views.namespaces_of(self._store, {run.job_id for run in runs})
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
        return self._frame.page(request, title, body, self._namespaces.nav(request, view, "/runs"))


def _banner(found: list[Problem]) -> str:
    """The banner of each namespace with jobs waiting to run and no live scheduler, or nothing."""
    return "".join(
        f'<p class="alarm" id="no-scheduler-{e(p.namespace)}">'
        f"{e(problem_words(p))}: they do not run until a scheduler starts</p>"
        for p in found
        if p.kind == "no_scheduler"
    )


def _marks(found: list[Problem], namespace: str, job_id: str) -> str:
    """The marks of a job that is overdue or failing (each with its words in the title), or nothing."""
    return "".join(
        f' <span class="mark {e(p.kind)}" title="{e(problem_words(p))}">{e(p.kind)}</span>'
        for p in found
        if p.job_id == job_id and p.namespace == namespace
    )
