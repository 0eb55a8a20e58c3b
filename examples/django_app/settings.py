"""Settings of the example project (environment variables for what the tests change)."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["persched.integrations.django", "examples.django_app"]
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

PERSCHED = {
    "URL": os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db"),  # default: Django's default database
    "NAMESPACE": os.environ.get("EXAMPLE_NAMESPACE", "django-example"),
    "JOBS": "examples.django_app.jobs.declared_jobs",
    "START": os.environ.get("EXAMPLE_START", "1") == "1",  # 0: only `manage.py persched run` runs the jobs
    "OPTIONS": {"workers": 4},
    "AUTHORIZE": "examples.django_app.auth.who_may_act",
    "MAY_READ": "examples.django_app.auth.may_read",
}
EXAMPLE_INTERVAL = float(os.environ.get("EXAMPLE_INTERVAL", "60"))  # seconds between runs of `cleanup`
EXAMPLE_LOG = os.environ.get("EXAMPLE_LOG")  # if set, every run appends one line to this file
