"""The bounded HTTP server that ``persched web`` and the metrics endpoint share.

Each endpoint puts its WSGI application behind `hosts.HostCheck` and serves it
on a `server.Server`; what the application does is its own (the dashboard's
pages, auth and actions live in `persched._interfaces.dashboard`, the metrics
in `persched.metrics`). The modules, from the socket in:

- `server`: `Server` and its `Limits`: listening, connection limits, reading
  whole requests off the workers' threads, eviction, the worker pool;
- `wire`: the request head, parsed strictly, or a `wire.Refusal`;
- `hosts`: which ``Host`` a server answers (`HostRules`) and the middleware that
  applies them (`HostCheck`);
- `refusals`: the log of refused requests, a line a minute for each kind.

They import nothing of persched above the foundation, so either endpoint
loads them without the other's modules.
"""
