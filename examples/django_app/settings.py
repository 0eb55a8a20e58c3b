"""Settings of the example project (environment variables for what the tests change)."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["examples.django_app.apps.PerschedExampleConfig"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "examples.django_app.urls"
WSGI_APPLICATION = "examples.django_app.wsgi.application"
DATABASES: dict[str, dict[str, str]] = {}  # the example's jobs use no Django model; persched has its own database
USE_TZ = True
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"persched": {"handlers": ["console"], "level": "INFO"}},  # a failing job's traceback, with a level
}

# persched: its database (a SQLAlchemy URL; the same for every process of the project), the
# namespace of this project's jobs, and whether web processes run jobs too (see __init__.py).
PERSCHED_DB = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
PERSCHED_NAMESPACE = os.environ.get("EXAMPLE_NAMESPACE", "django-example")
PERSCHED_IN_WEB_PROCESSES = os.environ.get("EXAMPLE_IN_WEB_PROCESSES") == "1"
PERSCHED_WORKERS = 4
EXAMPLE_INTERVAL = float(os.environ.get("EXAMPLE_INTERVAL", "60"))  # seconds between runs of `cleanup`
EXAMPLE_LOG = os.environ.get("EXAMPLE_LOG")  # if set, every run appends one line to this file
