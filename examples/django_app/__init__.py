"""A small Django project that runs persched (needs ``persched[examples]``); docs/frameworks.md explains it.

Who starts the scheduler: **one dedicated process**, the management command
``python -m examples.django_app.manage persched_run`` (``manage.py
persched_run`` in a real project), run next to the web server as a service
of its own. Web processes (``runserver`` and its autoreloader, gunicorn's
master and its N workers, with or without ``--preload``) and every other
management command (``migrate``, ``shell``, ``test``) start none.
`apps.PerschedExampleConfig.ready` starts nothing either: it only connects a
``request_started`` receiver that, with ``PERSCHED_IN_WEB_PROCESSES = True``
(the one-process alternative, off by default), makes the serving process's
scheduler on its first request.

Files: settings.py (the settings; tests configure the same values in code),
jobs.py (the job callables and the declared set), scheduler.py (the
per-process scheduler of web processes), apps.py (the ready() hook),
management/commands/persched_run.py (the dedicated process), views.py and
urls.py (``GET /jobs/``), wsgi.py, manage.py.
"""
