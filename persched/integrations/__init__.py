"""persched inside a web framework: Flask (`flask`), FastAPI and Starlette (`asgi`), Django (`django`).

Each module imports its framework, so each is imported on its own; importing ``persched`` imports none.
"""
