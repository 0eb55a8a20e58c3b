"""``persched web``: a small dashboard of a persched database, served locally or mounted in an app.

The stack is the standard library's (HTML built here with every value
escaped, charts drawn as inline SVG on the server, served by a bounded
server of its own): no build step, no JavaScript, no dependency to keep up
to date, and so ``persched[web]`` installs nothing more. Pages:

- ``/``: the jobs of one namespace (or of all, with a namespace column), a
  page at a time (state, schedule in words, next run, last outcome), with
  counts by state;
- ``/job?id=ID``: one job, a chart of the lateness and duration of its latest
  runs over time with missed ranges marked, and its run history;
- ``/runs?outcome=OUTCOME``: the runs of one namespace (or all), filterable
  by outcome.

Reading: the database is opened as the CLI opens it (`persched._interfaces.existing`:
never created, never migrated) and read in short read transactions by the
keyset-paginated queries of `persched._store.views`, so a scheduler may run or not.
Writing: the pause, resume, run-now, cancel and deschedule buttons exist only for
someone who may act: a browser signed in with the access token (``persched
web``), or whoever the application's `authorize` hook names (the dashboard
mounted in an app, `persched.web.dashboard`). Mounted under a prefix
(``SCRIPT_NAME``, set by the framework), every link, form and redirect
starts with it, and the session cookie's path is it.

The modules, from the request in:

- `app`: `WebApp`, the WSGI application: who acts, the route, the headers;
- `request`: one request and its parameters, parsed strictly (400 with the reason);
- `auth`: who may act (`Access`): the token's sessions, device cookies, the sign-in limit, CSRF tokens;
- `namespaces`: the namespace a page shows, a store for each, the counts of their jobs;
- `pages`: the pages that read; `chart`: their SVG; `layout`: the frame and the shared HTML;
- `signin`: ``/login`` and ``/logout``; `actions`: the buttons' POSTs and the notes they leave;
- `serve`: the ``persched web`` process, on the bounded HTTP server that the
  metrics endpoint shares (`persched._interfaces.http`: the server, the request
  head, the Host check and the log of refused requests).
"""
