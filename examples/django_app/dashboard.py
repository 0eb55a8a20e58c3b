"""persched's dashboard in the Django project at ``/persched/``, behind Django's own authentication.

A view passes the request on to the dashboard (a WSGI application,
`persched.web.dashboard`) under the prefix, after Django decided who is
acting: here the user of a cookie signed with the project's SECRET_KEY
(`request.get_signed_cookie`); with ``django.contrib.auth`` it would be
``request.user.get_username() if request.user.is_staff else None``. The
dashboard checks its own CSRF token, so the view is exempt from Django's.
"""

from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from persched.web import AwaitingDatabase, WebApp, dashboard

if TYPE_CHECKING:
    from django.http import HttpRequest

PREFIX: Final = "/persched"
OPERATORS: Final = {"alice"}  # stands for the project's staff users
ACTOR: Final = "persched.actor"  # the environ key the view sets and the hook reads (a client cannot set it)


@functools.cache
def _dashboard() -> WebApp | AwaitingDatabase:
    # Made on the first request, in the process that serves it (never at import, before a fork).
    return dashboard(
        settings.PERSCHED_DB,
        namespace=settings.PERSCHED_NAMESPACE,
        authorize=lambda environ: environ.get(ACTOR),
        secret=settings.SECRET_KEY.encode(),
    )


def who_may_act(request: HttpRequest) -> str | None:
    """The project's decision: a signed-in operator, else None (read-only)."""
    user = request.get_signed_cookie("user", default=None)
    return user if user in OPERATORS else None


@csrf_exempt  # the dashboard's forms carry its own CSRF token, checked by it
def persched_dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    """Answer ``/persched/<path>`` with the dashboard."""
    environ: dict[str, Any] = {
        **request.environ,
        "SCRIPT_NAME": request.environ.get("SCRIPT_NAME", "").rstrip("/") + PREFIX,
        "PATH_INFO": "/" + path,
        "wsgi.input": io.BytesIO(request.body),  # Django may have read the stream already
        ACTOR: who_may_act(request),
    }
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
        answer["status"], answer["headers"] = int(status.split(" ", 1)[0]), headers

    body = b"".join(_dashboard()(environ, start_response))  # type: ignore[arg-type]  # a WSGI callable
    response = HttpResponse(body, status=answer["status"])
    for name, value in answer["headers"]:
        response[name] = value
    return response
