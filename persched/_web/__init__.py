"""The dashboard: ``persched web``, and the WSGI application that `persched.web.dashboard` mounts in an app.

`app` is the application; the other modules are its parts (each one's
docstring says what it owns). The bounded HTTP server (`server`) also serves
the metrics endpoint (`persched.metrics`), which is why this package imports
nothing at its top.
"""
