"""``persched web``: a small dashboard of a persched database, served locally or mounted in an app.

Standard library only: HTML with every value escaped, inline SVG charts, no JavaScript
(docs/explanation/interfaces.md, "The dashboard"). Modules, from the request in: `app` (the WSGI
application), `request` (parameters, parsed strictly), `auth` (who may act), `namespaces`, `pages`,
`chart`, `layout`, `signin`, `actions`, and `serve` (the ``persched web`` process on
`persched._interfaces.http`).
"""
