"""The HTML of the dashboard (`persched._web`): escaping, tables, the chart as inline SVG; no I/O."""

from __future__ import annotations

import html
import urllib.parse
from typing import TYPE_CHECKING, Final

from .._instant import from_datetime, seconds, to_datetime
from .._present import human_duration, iso, relative, run_outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime

    from .._models import Job, Run

__all__ = ["CSS", "chart", "e", "next_run", "note", "q", "runs_table"]

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
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;background:#fff;padding:.8em}
dt{color:#667}dd{margin:0}pre{white-space:pre-wrap;margin:0;font-size:12px}
svg{background:#fff;border:1px solid #e3e6ea}
"""


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def q(**params: object) -> str:
    return urllib.parse.urlencode({k: str(v) for k, v in params.items() if v is not None})


def _outcome_class(run: Run) -> str:
    return run.outcome or "running"


# -- tables -------------------------------------------------------------------------------


def note(text: str | None) -> str:
    """The status note of a page (a text of the server's own), or nothing."""
    return f'<p class="note" id="message">{e(text)}</p>' if text else ""


def runs_table(
    runs: Sequence[Run], link: Callable[[str], str] | None, namespaces: Mapping[str, str] | None = None
) -> str:
    """The runs table; with `link`, a JOB column (linked by it); with `namespaces`, a NAMESPACE column too."""
    if not runs:
        return "<p>No runs recorded.</p>"
    head = (
        "<tr><th>Run</th>"
        + ("<th>Job</th>" if link else "")
        + ("<th>Namespace</th>" if namespaces is not None else "")
        + (
            "<th>Scheduled for (UTC)</th><th>Started</th><th>Lateness</th><th>Duration</th>"
            "<th>Outcome</th><th>Error</th></tr>"
        )
    )
    rows = []
    for run in runs:
        ran = run.outcome != "missed"
        late = span(run.scheduled_for, run.started_at) if ran else "-"
        took = span(run.started_at, run.finished_at) if ran and run.finished_at is not None else "-"
        error = (run.error or "").strip().splitlines()[-1:] or [""]
        rows.append(
            f"<tr><td class=num>{run.run_id}</td>"
            + (f"<td>{link(run.job_id)}</td>" if link else "")
            + (f'<td class="ns">{e(namespaces.get(run.job_id, "-"))}</td>' if namespaces is not None else "")
            + f"<td>{e(iso(run.scheduled_for))}</td><td>{e(iso(run.started_at))}</td>"
            f"<td class=num>{e(late)}</td><td class=num>{e(took)}</td>"
            f'<td class="{e(_outcome_class(run))}">{e(run_outcome(run))}</td>'
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
        f"<title>{e(run_outcome(r))}</title></rect>"
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
                f' fill="{"#b3261e" if bad else "#1f5fbf"}"><title>{e(tip)}</title></circle>'
            )
        panels.append(
            f'<svg id="chart-{name}" role="img" aria-label="{name} of the latest runs" width="{_W}" height="{_H}"'
            f' viewBox="0 0 {_W} {_H}" xmlns="http://www.w3.org/2000/svg">{bands}'
            f'<line x1="{_PAD}" y1="{_H - 18}" x2="{_W - 10}" y2="{_H - 18}" stroke="#999"/>'
            f'<text x="4" y="14" font-size="11">{e(human_duration(seconds(top)))}</text>'
            f'<text x="4" y="{_H - 20}" font-size="11">0</text>'
            f'<text x="{_PAD}" y="{_H - 4}" font-size="11">{e(iso(to_datetime(first)))}</text>'
            f'<text x="{_W - 10}" y="{_H - 4}" font-size="11" text-anchor="end">{e(iso(to_datetime(last)))}</text>'
            f'<text x="{_W // 2}" y="14" font-size="12" text-anchor="middle">{name}</text>'
            f'<polyline points="{line}" fill="none" stroke="#1f5fbf" stroke-width="1"/>{"".join(dots)}</svg>'
        )
    return "<div class=chart>" + "<br>".join(panels) + "</div>"
