"""`Dialect.execute` runs on the driver's cursor (`DriverCursor`): a pooled connection that the server
closed meanwhile fails its first statement there, is invalidated as SQLAlchemy would invalidate it,
and the store's transaction is tried again on a new connection (`Dialect.is_transient`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from persched._model.instant import Instant, micros
from persched._model.models import validate_definition, validate_policies
from tests.support import race_jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(EPOCH + 0.1234567))


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"], indirect=True)
def test_schedule_on_a_connection_the_server_closed_is_tried_again_on_a_new_one(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    own_id = "SELECT pg_backend_pid()" if store.dialect.name == "postgresql" else "SELECT CONNECTION_ID()"
    with store.engine.connect() as pooled:
        (pid,) = pooled.execute(text(own_id)).one()
        pooled.rollback()
    kill = "SELECT pg_terminate_backend(:pid)" if store.dialect.name == "postgresql" else "KILL :pid"
    admin = create_engine(store.engine.url, poolclass=NullPool)  # not the pool's: its one connection waits there
    try:
        with admin.begin() as other:
            other.execute(text(kill), {"pid": pid})
    finally:
        admin.dispose()
    definition = validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
    job, _, _ = store.upsert_job(definition, T)
    assert job.generation == 1
    assert store.get_job("a") == job
    assert any("attempt 1 of" in record.getMessage() for record in caplog.records), "the dead connection was used"
