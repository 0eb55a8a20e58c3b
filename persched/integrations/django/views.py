"""The dashboard as a Django view, behind the project's own sign-in (`persched.integrations.django.urls`).

Reading needs a staff user or ``PERSCHED["MAY_READ"]``; acting a superuser or ``PERSCHED["AUTHORIZE"]``.
Django checks the Host (``ALLOWED_HOSTS``) and decides who acts, in an environ key no client can set,
before the dashboard sees the request. Django's CSRF check is off: the dashboard checks its own token.
"""

from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from django.views.decorators.csrf import csrf_exempt

from ... import web
from .._dashboard import ProcessDashboard, whole_response
from . import conf

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = ["dashboard"]

ACTOR: Final = "persched.actor"  # the environ key of who acts, set here after Django's own authentication
_dashboards: dict[tuple[str, str], ProcessDashboard] = {}  # by database and namespace: settings may change


def _actor(request: HttpRequest) -> str | None:
    hook = conf.authorize()
    if hook is not None:
        return hook(request)
    user = getattr(request, "user", None)
    return user.get_username() if user is not None and user.is_superuser else None


def _app() -> ProcessDashboard:
    key = (conf.url(), conf.namespace())
    found = _dashboards.get(key)
    if found is None:
        # Every Host was checked against ALLOWED_HOSTS by Django (`dashboard` below) before it gets here.
        secret = str(settings.SECRET_KEY).encode()
        make = functools.partial(
            web.dashboard, key[0], namespace=key[1], authorize=_actor_of, secret=secret, allowed_hosts=["*"]
        )
        found = _dashboards.setdefault(key, ProcessDashboard(make))
    return found


def _actor_of(environ: dict[str, Any]) -> str | None:
    """The dashboard's hook: who the view decided acts (`ACTOR`, set after Django's authentication)."""
    actor: str | None = environ.get(ACTOR)
    return actor


@csrf_exempt
def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    """Answer one request of the dashboard mounted at this view's prefix."""
    request.get_host()  # Django's own Host check (ALLOWED_HOSTS): DisallowedHost, a 400, for any other
    actor = _actor(request)
    if actor is None and not conf.may_read(request):
        return HttpResponseForbidden("the persched dashboard is for staff users\n")
    prefix = request.path[: len(request.path) - len(path)].rstrip("/")
    environ: dict[str, Any] = {
        **request.environ,
        "SCRIPT_NAME": prefix,
        "PATH_INFO": "/" + path,
        "wsgi.input": io.BytesIO(request.body),
        ACTOR: actor,
    }
    status, headers, body = whole_response(_app(), environ)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        response.headers[name] = value
    return response
