"""The engine's cursor listeners see the statements of the driver's cursor (`DriverCursor`) as they see
SQLAlchemy's own: with an execution context to keep their state on from before a statement to after it.

Tracing and timing listeners do so (OpenTelemetry's SQLAlchemy instrumentation sets
``context._otel_span`` in ``before_cursor_execute`` and ends that span in ``after_cursor_execute``), and
they are registered on every engine an application makes once it is instrumented, persched's too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import event

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion
from tests.support import race_jobs
from tests.support.helpers import EPOCH
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(EPOCH + 0.1234567))
LEASE: Final = Micros(30_000_000)


def test_cursor_listeners_keep_their_state_on_each_statements_context(store: Store) -> None:
    open_spans: list[object] = []
    ended: list[str] = []

    def before(conn: object, cursor: object, statement: str, params: object, context: Any, many: bool) -> None:  # noqa: ANN401
        context.span = statement  # as a tracer keeps its span
        open_spans.append(context)

    def after(conn: object, cursor: object, statement: str, params: object, context: Any, many: bool) -> None:  # noqa: ANN401
        ended.append(context.span)
        open_spans.remove(context)

    event.listen(store.engine, "before_cursor_execute", before)
    event.listen(store.engine, "after_cursor_execute", after)
    try:
        definition = validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
        job, _, _ = store.upsert_job(definition, T)  # schedule(): Dialect.execute (and SQLite's BEGIN IMMEDIATE)
        slot = from_datetime(job.next_run_at)
        claim = claim_one(store, "a", job.generation, slot, slot, "me", LEASE)  # the dispatch path
        assert isinstance(claim, Claim)
        store.finish_runs([Completion(claim, "ok", None, Instant(slot + 1))], "me")
        store.deschedule_job("a", Instant(slot + 2))
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
        event.remove(store.engine, "after_cursor_execute", after)
    assert open_spans == []
    assert any(statement.lstrip().upper().startswith("UPDATE") for statement in ended)
