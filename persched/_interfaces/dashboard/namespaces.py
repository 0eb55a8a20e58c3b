"""The namespaces of one dashboard: the one a page shows (`view`), a store for each, the counts of their jobs.

A dashboard confined to some namespaces (`served`) treats any other as a 404, in `view` and in
`store_for`, through which every action goes. One lock guards the stores and the counts, which are
cached for `COUNTS_CACHE_NS`: the only state shared between requests here.
"""

from __future__ import annotations

import threading
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ... import _realtime
from ..._store import Store
from ..._store import views as _views
from .layout import e
from .request import BadRequest, View, namespace_of

if TYPE_CHECKING:
    from collections.abc import Collection

    from .request import Request

__all__ = ["Namespaces"]

MAX_NAMESPACE_LINKS: Final = 50  # namespaces linked in the header; others by ?ns=NAME
MAX_NAMESPACE_STORES: Final = 64  # stores of other namespaces kept for reuse
COUNTS_CACHE_NS: Final = 5_000_000_000  # the counts by namespace and state are reused this long (real time)


class Namespaces:
    """The namespaces of the dashboard over `store`, whose namespace is the one shown unless a page asks for another.

    Args:
        store: The dashboard's store; its namespace is the one shown first.
        served: The only namespaces shown and changed (with the store's); None: every one.
    """

    def __init__(self, store: Store, served: Collection[str] | None = None) -> None:
        self.store = store
        self.home = store.namespace
        self.served = None if served is None else frozenset(served) | {store.namespace}
        self._lock = threading.Lock()  # guards the two caches below
        self._counts: tuple[int, dict[str, dict[str, int]]] | None = None  # (monotonic ns, by namespace and state)
        self._stores: dict[str, Store] = {}

    def serves(self, namespace: str) -> bool:
        """Whether this dashboard shows and changes `namespace`."""
        return self.served is None or namespace in self.served

    def _check(self, namespace: str) -> str:
        if not self.serves(namespace):
            raise BadRequest(f"namespace {namespace[:100]!r} is not served here", HTTPStatus.NOT_FOUND)
        return namespace

    def scope(self, view: View) -> str | frozenset[str] | None:
        """What a page of `view` reads: one namespace, the served ones (all of a confined dashboard), or None: all."""
        return self.served if view.namespace is None else view.namespace

    def store_for(self, namespace: str) -> Store:
        """A store of `namespace` on the dashboard's engine: its methods read and change that namespace only.

        Raises:
            BadRequest: 404, the dashboard does not serve `namespace`.
        """
        self._check(namespace)
        if namespace == self.home:
            return self.store
        with self._lock:
            found = self._stores.get(namespace)
        if found is not None:
            return found
        store = Store(self.store.engine, self.store.url, namespace=namespace)
        with self._lock:
            if len(self._stores) < MAX_NAMESPACE_STORES:
                self._stores.setdefault(namespace, store)
        return store

    def view(self, query: dict[str, str], *, all_allowed: bool) -> View:
        """The namespace a page shows by its ``ns`` and ``all`` (`all_allowed`: all of them may be asked for)."""
        everything, namespace = query.get("all"), query.get("ns")
        if everything is not None:
            if not all_allowed:
                raise BadRequest("all: this page shows one job; give ns=NAME")
            if everything != "1":
                raise BadRequest(f"all: must be 1, got {everything[:40]!r}")
            if namespace is not None:
                raise BadRequest("give ns=NAME or all=1, not both")
            return View(None, self.home)
        return View(self._check(namespace_of("ns", namespace)) if namespace is not None else self.home, self.home)

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs by namespace and state, reused for COUNTS_CACHE_NS: the count scans the jobs table."""
        now = _realtime.monotonic_ns()
        with self._lock:
            cached = self._counts
        if cached is not None and now - cached[0] < COUNTS_CACHE_NS:
            return cached[1]
        counts = {ns: states for ns, states in _views.namespace_counts(self.store).items() if self.serves(ns)}
        with self._lock:
            self._counts = (now, counts)
        return counts

    def nav(self, request: Request, view: View, page: str) -> str:
        """Which namespace the page shows, and links to the others (and to all of them)."""
        known = list(self.counts())
        if self.home not in known:
            known.insert(0, self.home)
        if view.namespace is not None and view.namespace not in known:
            known.append(view.namespace)
        shown = known[:MAX_NAMESPACE_LINKS]
        links = []
        for namespace in shown:
            params = View(namespace, self.home).params()
            on = ' class="on"' if namespace == view.namespace else ""
            links.append(f'<a href="{e(request.url(page, **params))}"{on}>{e(namespace)}</a>')
        if len(known) > len(shown):
            links.append(f"<span>and {len(known) - len(shown)} more (?ns=NAME)</span>")
        if page != "/job":
            on = ' class="on"' if view.namespace is None else ""
            links.append(f'<a href="{e(request.url(page, all=1))}" id="ns-all"{on}>all namespaces</a>')
        serving = "all namespaces" if view.namespace is None else f"namespace <b>{e(view.namespace)}</b>"
        return f'<nav class="namespaces"><span id="namespace">{serving}</span>: {" ".join(links)}</nav>'
