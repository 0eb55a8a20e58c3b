"""A small Django project that runs persched through its Django app (needs ``persched[examples]``).

``settings.py`` adds ``"persched.integrations.django"`` to ``INSTALLED_APPS``
and names the project's jobs in ``PERSCHED``. Each process that serves
(``runserver``'s child, every gunicorn worker, with or without
``--preload``) starts its scheduler as the project starts; the autoreloader's
parent and the other management commands start none.
``python -m examples.django_app.manage persched ARGS`` (``manage.py persched``
in a real project) is the persched command line on these settings;
``persched run`` there is a dedicated scheduler process, for a deployment
whose web processes run no jobs (``EXAMPLE_START=0``).

Files: settings.py, jobs.py (the job and the declared set), auth.py (who may
read and act in the dashboard), views.py and urls.py (``GET /jobs/``, the
dashboard at ``/persched/``), wsgi.py, manage.py.
"""
