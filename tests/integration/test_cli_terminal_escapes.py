"""Text from the database or from user code reaches an operator's terminal with its control characters escaped.

A job's exception text, or an id edited by hand into the database, may hold
terminal escapes: ESC and BEL sequences retitle the window, clear the
screen, or (OSC 52) write the clipboard; C1 controls such as U+009B (CSI)
do the same on many terminals. Every human output of the command line
shows them as ``\\x1b``-style escapes (docs/operations.md#terminal-output);
``--json`` keeps every value exact, its control characters JSON escapes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
from typing import TYPE_CHECKING, Final

import pytest

from persched.cli import main as cli_main
from persched.cli.entry import TerminalFormatter
from tests.support import jobs
from tests.support.helpers import finished_runs, sql, wait_until

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

#: Retitle the window, clear the screen, write the clipboard (OSC 52), a C1 CSI, a carriage return, DEL.
HOSTILE: Final = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m\rfake\x7f"
HAND_EDITED_ID: Final = "edited\x1b[2J\x07"
RAW_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (tab, newline kept)


@pytest.fixture(autouse=True)
def _full_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables are never cut to a width here: the escaped cells are shown whole (pytest-xdist sets COLUMNS)."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def hostile_db(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> str:
    """A job whose runs failed with HOSTILE text, and a job whose id was edited by hand to hold escapes."""
    sched = make_scheduler(start=True, workers=2)
    sched.schedule("loud", jobs.fail, 10.0, args=("loud", HOSTILE), start_in=0)
    sched.schedule("quiet", jobs.record, 10.0, args=("quiet",), start_in=0)
    fake_clock.advance(0.25)
    wait_until(lambda: len(finished_runs(sched, "loud")) == 1 and len(finished_runs(sched, "quiet")) == 1)
    sched.shutdown(wait=True)
    for table in ("persched_jobs", "persched_runs"):
        sql(make_scheduler.url, f"UPDATE {table} SET job_id = ? WHERE job_id = 'quiet'", (HAND_EDITED_ID,))  # noqa: S608 - test data
    return make_scheduler.url


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [("jobs",), ("jobs", "--all-namespaces"), ("runs",), ("runs", "--all-namespaces"), ("show", "loud")],
    ids=" ".join,
)
def test_human_output_shows_control_characters_escaped(hostile_db: str, argv: tuple[str, ...]) -> None:
    code, out, err = _cli("--db", hostile_db, *argv)
    assert code == 0, err
    assert not RAW_CONTROLS.search(out + err), repr(out + err)
    if argv[0] != "show":
        assert r"edited\x1b[2J\x07" in out  # the hand-edited id, readable
    if argv[0] != "jobs":
        assert r"fake\x7f" in out  # the error text's last line (a carriage return ends a line)


@pytest.mark.parametrize("argv", [("jobs", "--json"), ("runs", "--json"), ("show", "loud", "--json")], ids=" ".join)
def test_json_output_keeps_every_value_exact(hostile_db: str, argv: tuple[str, ...]) -> None:
    code, out, _ = _cli("--db", hostile_db, *argv)
    assert code == 0
    assert not RAW_CONTROLS.search(out), repr(out)  # JSON escapes (\u001b, \u009b), never the raw characters
    parsed = json.loads(out)
    items = parsed["runs"] if argv[0] == "show" else parsed
    text = json.dumps(items, ensure_ascii=False)
    if argv[0] != "show":
        assert HAND_EDITED_ID in {item["job_id"] for item in items}
    if argv[0] != "jobs":
        assert any(HOSTILE in (item.get("error") or "") for item in items), text


def test_an_error_line_escapes_what_it_quotes(hostile_db: str) -> None:
    code, _, err = _cli("--db", hostile_db, "runs", "no\x1b[2Jsuch")
    assert code != 0
    assert not RAW_CONTROLS.search(err), repr(err)


def test_the_log_of_persched_run_escapes_messages_and_tracebacks() -> None:
    formatter = TerminalFormatter("%(levelname)s %(message)s")
    try:
        raise RuntimeError(HOSTILE)
    except RuntimeError:
        record = logging.LogRecord("persched", logging.ERROR, __file__, 1, "job %r: %s", ("x", HOSTILE), sys.exc_info())
    line = formatter.format(record)
    assert not RAW_CONTROLS.search(line), repr(line)
    assert r"\x1b]52;c;ZXZpbA==\x07" in line
    assert "\nTraceback (most recent call last):\n" in line  # the traceback keeps its lines


def _hand_edited_instance(url: str, instance_id: str) -> None:
    """A live instance row (its lease far ahead of the real clock) whose id was edited by hand."""
    sql(
        url,
        "INSERT INTO persched_instances (namespace, instance_id, started_at, renewed_at, beats, lease_until, shares)"
        " VALUES ('default', ?, '2023-11-14 22:13:20.250000', '2023-11-14 22:13:20.250000', 3,"
        " '2999-01-01 00:00:00.250000', 1)",
        (instance_id,),
    )


def test_instances_escape_an_edited_id_and_json_keeps_it_exact(hostile_db: str) -> None:
    _hand_edited_instance(hostile_db, HOSTILE)
    code, out, err = _cli("--db", hostile_db, "instances")
    assert code == 0, err
    assert not RAW_CONTROLS.search(out), repr(out)
    assert r"\x1b]52;c;ZXZpbA==\x07" in out
    code, out, _ = _cli("--db", hostile_db, "instances", "--json")
    assert code == 0
    assert not RAW_CONTROLS.search(out), repr(out)  # JSON escapes, never the raw characters
    assert [row["instance_id"] for row in json.loads(out)] == [HOSTILE]


def test_a_long_instance_id_stands_on_a_line_of_its_own(hostile_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    long_id = "worker-" + "x" * 70
    _hand_edited_instance(hostile_db, long_id)
    monkeypatch.setenv("COLUMNS", "60")
    code, out, err = _cli("--db", hostile_db, "instances")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == long_id  # whole, never cut
    assert lines[2].split()[:2] == ["-", "-"]  # the row goes on: no host, no pid for a custom id
