"""persched inside a web framework: Flask (`flask`), FastAPI and Starlette (`asgi`), Django (`django`).

Each module imports its framework, so each is imported on its own
(``from persched.integrations.flask import Persched``); importing
``persched`` imports none of them. Install the framework with the extra:
``pip install 'persched[flask]'``, ``'persched[fastapi]'`` or ``'persched[django]'``.
"""
