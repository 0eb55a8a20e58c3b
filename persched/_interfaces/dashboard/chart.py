"""The chart of a job's page: the lateness and the duration of its latest runs over time, as inline SVG."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..._model.instant import from_datetime, seconds, to_datetime
from ..present import human_duration, iso, run_outcome
from .layout import e

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from ..._model.models import Run

__all__ = ["chart"]

_W: Final = 900  # px
_H: Final = 130  # px per panel
_PAD: Final = 50  # px left margin for the axis labels


def _lateness(run: Run) -> int | None:
    if run.attempt > 1:
        return None  # a retry starts after its slot on purpose: not late
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
            bad = r.outcome in ("error", "stopped", "lost")
            outcome = (r.outcome or "running") + (f", attempt {r.attempt}" if r.attempt > 1 else "")
            tip = f"{iso(r.scheduled_for)} {name} {human_duration(seconds(max(v, 0)))} ({outcome})"
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
