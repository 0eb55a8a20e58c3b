"""Who may read and act in the dashboard (``PERSCHED["AUTHORIZE"]`` and ``["MAY_READ"]``).

The example project has no ``django.contrib.auth``: a cookie signed with
``SECRET_KEY`` stands for its sign-in. With auth installed, leave both
settings out: staff users read, superusers act.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from django.core import signing

if TYPE_CHECKING:
    from django.http import HttpRequest

OPERATORS: Final = {"alice"}  # stands for the project's staff users


def who_may_act(request: HttpRequest) -> str | None:
    """The signed-in operator, or None (that request may only read)."""
    try:
        user = signing.get_cookie_signer(salt="user").unsign(request.COOKIES.get("user", ""))
    except signing.BadSignature:
        return None
    return user if user in OPERATORS else None


def may_read(request: HttpRequest) -> bool:
    """Everyone who reaches the project may read the dashboard (it is behind the project's own network)."""
    return True
