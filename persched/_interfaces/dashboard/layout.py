"""The HTML the dashboard's pages share: the frame (`Frame`), escaping (`e`), the runs table."""

from __future__ import annotations

import html
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ..._model.instant import from_datetime, seconds
from ..present import human_duration, iso, relative, run_attempt, run_outcome
from .request import Response

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime

    from ..._model.models import Job, Run
    from .auth import Access
    from .request import Request

__all__ = ["CSS", "Frame", "e", "next_run", "note", "runs_table"]

CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center;flex-wrap:wrap}
header a{color:#cfe0ff;text-decoration:none}header .db{margin-left:auto;color:#9aa;font-size:12px}
nav.namespaces{padding:.4em 1.2em;background:#e8ecf2}nav.namespaces a{margin-right:.9em}
nav.namespaces a.on{font-weight:700;color:#1d2330;text-decoration:none}
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
.alarm{background:#fde7e9;border:1px solid #e8a0a6;color:#8c1d18;padding:.5em .8em;margin:.6em 0;font-weight:600}
.mark{font-size:11px;padding:0 .4em;border-radius:3px;background:#fde7e9;color:#8c1d18;margin-left:.4em}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;background:#fff;padding:.8em}
dt{color:#667}dd{margin:0}pre{white-space:pre-wrap;margin:0;font-size:12px}
svg{background:#fff;border:1px solid #e3e6ea}
"""


TRY_NOTE: Final = "the attempt of its slot: a job with retries tries a failed run again within its slot"


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


class Frame:
    """The frame of every page: the header (its links, who is signed in, the database) around a page's body.

    Args:
        access: Who may act here: the header links to the sign-in, or names who is signed in.
        db_url: The database's URL (password masked), shown in the header.
    """

    def __init__(self, access: Access, db_url: str) -> None:
        self._access = access
        self._db_url = db_url

    def page(self, request: Request, title: str, body: str, nav: str = "") -> Response:
        """A whole page (200): `body` under the header and the namespace bar `nav`."""
        who = ""
        if self._access.authorize is not None:
            who = f"<span>signed in as {e(request.actor.name)}</span>" if request.actor is not None else ""
        elif self._access.token is not None:
            login = e(request.url("/login"))
            who = f'<a href="{login}">signed in</a>' if request.actor else f'<a href="{login}" id="signin">sign in</a>'
        page = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)} - persched</title>"
            f'<meta name=viewport content="width=device-width"><style>{CSS}</style></head><body>'
            f'<header><b>persched</b><a href="{e(request.url("/"))}">Jobs</a>'
            f'<a href="{e(request.url("/runs"))}">Runs</a>{who}'
            f'<span class="db">{e(self._db_url)}</span></header>{nav}<main>{body}</main></body></html>'
        )
        return Response(HTTPStatus.OK, page)

    def error(self, request: Request, status: HTTPStatus, message: str, nav: str = "", more_html: str = "") -> Response:
        """An error page: `status` with `message` (escaped) and `more_html`."""
        body = f'<h1>{e(status.phrase)}</h1><p id="problem">{e(message)}</p>{more_html}'
        return Response(status, self.page(request, status.phrase, body, nav).body)


# -- tables -------------------------------------------------------------------------------


def note(text: str | None) -> str:
    """The status note of a page (a text of the server's own), or nothing."""
    return f'<p class="note" id="message">{e(text)}</p>' if text else ""


def runs_table(
    runs: Sequence[Run], link: Callable[[str], str] | None, namespaces: Mapping[str, str] | None = None
) -> str:
    """The runs table; with `link`, a JOB column (linked by it); with `namespaces`, a NAMESPACE column too.

    A Try column (the attempt of its slot) is there when a run of the table is a
    retry, as in `persched runs`; a retry has no lateness (its slot was due long before, on purpose).
    """
    if not runs:
        return "<p>No runs recorded.</p>"
    tries = any(run.attempt > 1 for run in runs)
    head = (
        "<tr><th>Run</th>"
        + ("<th>Job</th>" if link else "")
        + ("<th>Namespace</th>" if namespaces is not None else "")
        + "<th>Scheduled for (UTC)</th><th>Started</th><th>Lateness</th><th>Duration</th>"
        + (f'<th title="{e(TRY_NOTE)}">Try</th>' if tries else "")
        + "<th>Outcome</th><th>Error</th></tr>"
    )
    rows = []
    for run in runs:
        ran = run.outcome != "missed"
        late = span(run.scheduled_for, run.started_at) if ran and run.attempt == 1 else "-"
        took = span(run.started_at, run.finished_at) if ran and run.finished_at is not None else "-"
        error = (run.error or "").strip().splitlines()[-1:] or [""]
        rows.append(
            f"<tr><td class=num>{run.run_id}</td>"
            + (f"<td>{link(run.job_id)}</td>" if link else "")
            + (f'<td class="ns">{e(namespaces.get(run.job_id, "-"))}</td>' if namespaces is not None else "")
            + f"<td>{e(iso(run.scheduled_for))}</td><td>{e(iso(run.started_at))}</td>"
            f"<td class=num>{e(late)}</td><td class=num>{e(took)}</td>"
            + (f'<td class="num try">{e(run_attempt(run))}</td>' if tries else "")
            + f'<td class="{e(run.outcome or "running")}">{e(run_outcome(run))}</td>'
            f"<td><pre>{e(error[0][:200])}</pre></td></tr>"
        )
    return f"<table id=runs>{head}{''.join(rows)}</table>"


def span(start: datetime, end: datetime | None) -> str:
    if end is None:
        return "-"
    return human_duration(seconds(max(from_datetime(end) - from_datetime(start), 0)))


def next_run(job: Job, now: datetime) -> str:
    if job.paused or job.state.value == "finished":
        return "-"
    return f"{e(iso(job.next_run_at))} <small>({e(relative(job.next_run_at, now))})</small>"
