"""The bounded HTTP server that ``persched web`` and the metrics endpoint share.

`server` (listening, limits, the reader and the workers), `wire` (the request head, parsed strictly),
`hosts` (the Host check), `refusals` (their log). They import nothing of persched above the
foundation, so either endpoint loads them without the other's modules.
"""
