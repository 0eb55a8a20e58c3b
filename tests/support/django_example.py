"""Django set up in the test process with the example project's settings (examples/django_app), once per process.

Django's settings can be configured once per process, so every in-process
Django test shares these, and changes what it needs with
``override_settings`` (``PERSCHED`` with the test's own database). Web
processes run no jobs here (``START`` False): a test that wants a
scheduler starts one itself.
"""

from __future__ import annotations

from typing import Any

from tests.support.frameworks import require

__all__ = ["example_settings", "persched_setting"]


def example_settings() -> Any:  # noqa: ANN401 - django.conf.settings (Django ships no types)
    """``django.conf.settings``, configured with the example's values and set up (ready() run)."""
    require("django")
    import django
    from django.conf import settings

    from examples.django_app import settings as example

    if not settings.configured:
        values = {name: getattr(example, name) for name in dir(example) if name.isupper()}
        # Not the example's console handler: a handler bound to pytest's captured stderr outlives the test.
        values.update(LOGGING_CONFIG=None, LOGGING={}, PERSCHED={**example.PERSCHED, "START": False})
        settings.configure(**values)
        django.setup()
    return settings


def persched_setting(db: str, **changes: Any) -> dict[str, Any]:  # noqa: ANN401 - setting values
    """The example's ``PERSCHED`` on database `db`, with `changes`."""
    from examples.django_app import settings as example

    return {**example.PERSCHED, "URL": db, "START": False, **changes}
