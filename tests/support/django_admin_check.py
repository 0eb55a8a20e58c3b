"""Child process of the Django admin test: a project with django.contrib.admin and persched's app, on one SQLite file.

    python -m tests.support.django_admin_check DB_PATH

Django's settings are configured once per process, and the example project
has no admin, so this runs in a process of its own. It makes Django's
tables (``migrate``) and persched's (``manage.py persched migrate``) in
one database, two jobs (one with a run), three users (a viewer, an
operator, a superuser), then drives the admin with Django's test client,
and prints one JSON object of what it saw for the test to judge.
"""

from __future__ import annotations

import io
import json
import sqlite3
import sys
from contextlib import closing, redirect_stdout
from typing import Any

import django
from django.conf import settings
from django.urls import path

urlpatterns: list[Any] = []


def _configure(db_path: str) -> None:
    settings.configure(
        SECRET_KEY="a secret of the admin test",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "persched.integrations.django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        ROOT_URLCONF=__name__,
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db_path}},
        USE_TZ=True,
        PERSCHED={"START": False},  # the URL: Django's default database
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],  # fast, for a test
    )
    django.setup()
    from django.contrib import admin

    urlpatterns.append(path("admin/", admin.site.urls))


def _state(db_path: str, job_id: str) -> tuple[str, int]:
    with closing(sqlite3.connect(db_path)) as conn:
        state, paused = conn.execute("SELECT state, paused FROM persched_jobs WHERE job_id = ?", (job_id,)).fetchone()
        return str(state), int(paused)


def _actions(page: str) -> list[str]:
    """The actions the changelist offers."""
    return [
        name for name in ("pause", "resume", "run_now", "deschedule", "delete_selected") if f'value="{name}"' in page
    ]


def main(db_path: str) -> None:
    _configure(db_path)
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.test import Client

    from persched import JobScheduler
    from persched.testing import FakeClock

    call_command("migrate", verbosity=0)  # Django's own apps; persched's app has no Django migrations
    out = io.StringIO()
    with redirect_stdout(out):
        call_command("persched", "migrate")
    facts: dict[str, Any] = {"persched_migrate": out.getvalue()}
    with redirect_stdout(io.StringIO()):
        call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # exits 1 if it would write one
    sched = JobScheduler(db_path, clock=FakeClock(1_700_000_000.25), namespace="shop")
    sched.schedule("report", "tests.support.jobs:record", 60.0, args=("r",), start_in=0)
    sched.schedule("cleanup", "tests.support.jobs:record", 3600.0, args=("c",))
    sched.start()
    assert sched.wait_idle(10.0)
    sched.shutdown(wait=True, timeout=10.0)

    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "view_run"]))
    operator = User.objects.create_user("operator", password="pw", is_staff=True)
    operator.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "view_run", "operate_job"]))
    User.objects.create_superuser("root", password="pw")
    facts["permissions"] = sorted(
        Permission.objects.filter(content_type__app_label="persched").values_list("codename", flat=True)
    )

    def act(user: str, action: str, job_id: str) -> None:
        client = Client()
        assert client.login(username=user, password="pw")
        client.post("/admin/persched/job/", {"action": action, "_selected_action": [job_id], "index": 0})

    client = Client()
    assert client.login(username="viewer", password="pw")
    page = client.get("/admin/persched/job/")
    facts["viewer_list"] = [page.status_code, "report" in page.content.decode(), "cleanup" in page.content.decode()]
    facts["viewer_actions"] = _actions(page.content.decode())
    for outcome in ("ok", "error"):
        listed = client.get(f"/admin/persched/run/?outcome__exact={outcome}").content.decode()
        facts[f"runs_{outcome}"] = (
            listed.split('id="result_list"')[-1].count("<tr") - 1 if "result_list" in listed else 0
        )
    act("viewer", "pause", "report")
    facts["after_viewer_pause"] = _state(db_path, "report")
    act("operator", "pause", "report")
    facts["after_operator_pause"] = _state(db_path, "report")
    act("operator", "deschedule", "cleanup")
    facts["after_operator_deschedule"] = _state(db_path, "cleanup")
    root = Client()
    assert root.login(username="root", password="pw")
    facts["root_actions"] = _actions(root.get("/admin/persched/job/").content.decode())
    act("root", "deschedule", "cleanup")
    facts["after_root_deschedule"] = _state(db_path, "cleanup")
    facts["change_page"] = root.get("/admin/persched/job/report/change/").status_code
    print(json.dumps(facts))  # noqa: T201 - the test reads this line


if __name__ == "__main__":
    main(sys.argv[1])
