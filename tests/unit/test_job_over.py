"""`job_over`: a declaration's jobs copied from their shape's Job are the Jobs ``model_copy`` makes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Final

import pydantic
import pytest

from persched import Job, JobState
from persched._model.public_models import job_over

AT: Final = datetime(2026, 3, 1, 4, 5, 6, 123456, tzinfo=timezone.utc)


def template() -> Job:
    return Job(
        job_id="every-0",
        target="tests.support.jobs:record",
        args=(0,),
        kwargs={},
        interval_seconds=60.0,
        next_run_at=AT,
        generation=1,
        state=JobState.SCHEDULED,
        created_at=AT,
        updated_at=AT,
        schedule="every 60 s",
        declared=True,
    )


def own_fields() -> dict[str, Any]:
    return {
        "job_id": "every-1",
        "args": (1, "é"),
        "kwargs": {"to": "ops"},
        "next_run_at": AT + timedelta(seconds=60),
        "generation": 4,
        "state": JobState.PAUSED,
        "run_count": 7,
        "paused": True,
        "pause_note": "by an operator",
        "pending_attempt": 2,
    }


def test_a_job_over_its_template_is_the_job_model_copy_makes() -> None:
    made, copied = job_over(template(), own_fields()), template().model_copy(update=own_fields())
    assert type(made) is Job
    assert made == copied
    assert made.model_dump() == copied.model_dump()
    assert made.model_fields_set == copied.model_fields_set
    assert repr(made) == repr(copied)
    assert made.model_copy(update={"run_count": 8}) == copied.model_copy(update={"run_count": 8})


def test_a_job_over_its_template_is_frozen_and_leaves_the_template_as_it_was() -> None:
    shape = template()
    made = job_over(shape, own_fields())
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        made.run_count = 3  # type: ignore[misc]
    assert shape == template()
    assert shape.model_fields_set == template().model_fields_set
    assert made.__dict__ is not shape.__dict__
