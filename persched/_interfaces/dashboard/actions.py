"""The actions posted by a job page's buttons (``/action``): pause, resume, run-now, cancel, deschedule.

A POST is carried out only with the form's CSRF token, through a store of the form's namespace, and
logged at INFO with who and the client's address. The redirect names the outcome as ``msg=CODE``,
a text of `MESSAGES`, never text from the URL.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ... import _loggers
from ..._model.instant import Instant
from ..._store.records import RunNowVerdict
from .request import BadRequest, Response, View, job_id_of, namespace_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..._store import Store
    from ..http.refusals import RefusalLog
    from .auth import Access
    from .layout import Frame
    from .namespaces import Namespaces
    from .request import Request

__all__ = ["ACTIONS", "MESSAGES", "Actions", "Refuse", "message_of"]

logger = logging.getLogger(_loggers.WEB)

ACTIONS: Final = ("pause", "resume", "run-now", "cancel", "deschedule")

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
    "cancel": "Cancel requested: the scheduler that runs it stops its run within its pickup interval.",
    "not-running": "Nothing to cancel: the job has no run in flight.",
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


def message_of(code: str | None) -> str | None:
    """The status note of ``msg=CODE``: only a text of `MESSAGES`."""
    if code is None:
        return None
    if code not in MESSAGES:
        raise BadRequest(f"msg: not a message of this dashboard: {code[:40]!r}")
    return MESSAGES[code]


class Refuse:
    """The 403 of a refused POST, with its reason, logged through `log`.

    For a POST from another site, without a valid CSRF token, or from someone who may not act.
    """

    def __init__(self, frame: Frame, log: RefusalLog) -> None:
        self._frame = frame
        self.log = log

    def __call__(self, request: Request, why: str) -> Response:
        """The refusal page of `request`, logged."""
        self.log.refused(
            "forbidden",
            logging.WARNING,
            "web: refused %s %s from %s: %s",
            request.method,
            request.path[:200],
            request.client,
            why,
        )
        return self._frame.error(request, HTTPStatus.FORBIDDEN, f"Refused: {why}.")


class Actions:
    """The actions of one dashboard.

    Args:
        namespaces: The stores that carry out an action, one per namespace.
        access: Who may act.
        now: The wall clock (microseconds): the actions' `now`.
        refuse: Answers a refused form.
    """

    def __init__(self, namespaces: Namespaces, access: Access, now: Callable[[], int], refuse: Refuse) -> None:
        self._namespaces = namespaces
        self._access = access
        self._now = now
        self._refuse = refuse

    def act(self, request: Request, form: dict[str, str]) -> Response:
        """Carry out the posted action, or refuse it; redirect to the page that shows its outcome."""
        actor = request.actor
        if actor is None:
            if self._access.read_only:
                return self._refuse(request, "this dashboard was started without an access token: it is read-only")
            return self._refuse(request, "sign in first" if self._access.authorize is None else "you may not act here")
        if not self._access.csrf_matches(actor, form.get("csrf", "")):
            return self._refuse(request, "the form's CSRF token is missing or stale; reload the page")
        action = form.get("action", "")
        if action not in ACTIONS:
            raise BadRequest(f"Unknown action {action[:40]!r}; one of {', '.join(ACTIONS)}")
        job_id = job_id_of("id", form.get("id"))
        namespace = namespace_of("ns", form.get("ns", self._namespaces.home))
        code, said = self._apply(self._namespaces.store_for(namespace), action, job_id, Instant(self._now()))
        logger.info(
            "web: %s of job %r (namespace %r) by %s from %s: %s",
            action,
            job_id,
            namespace,
            actor.name,
            request.client,
            said,
        )
        view = View(namespace, self._namespaces.home).params()
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
        if action == "cancel":
            running = store.request_cancel(job_id, now)
            if running is None:
                return "no-job", "no such job"
            return ("cancel", "stop requested") if running else ("not-running", "no run in flight")
        generation = store.deschedule_job(job_id, now)
        if generation is None:
            return "no-job", "no such job"
        return "descheduled", f"descheduled (generation {generation})"
