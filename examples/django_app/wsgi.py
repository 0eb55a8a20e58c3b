"""WSGI entry point: ``gunicorn -w 4 examples.django_app.wsgi`` (with or without ``--preload``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
application = get_wsgi_application()
