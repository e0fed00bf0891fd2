"""What a saved view may store: a known page and a query string of that page's own parameters.

Pure (no Django) so the rules are tested without a database. The parameters are the ones the web
UI's pages write into their URLs (frontend/src/lib/urlState.ts and the pages): a saved view is a
URL someone could have shared, so anything else (another page's parameter, a typo, a parameter
given twice) is refused rather than stored and silently ignored when opened (docs/portal-api.md,
"Saved views").
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

# page → the query parameters its URL carries.
PAGE_PARAMS: dict[str, frozenset[str]] = {
    "runs": frozenset({"q", "team", "project", "status", "gpu", "tag", "from", "to", "launched_by", "sort", "page"}),
    "leaderboards": frozenset({"kind", "period", "sort", "all", "page"}),
    "finance": frozenset({"month", "sort"}),
}
# The path each page is served at, as the sidebar links to it.
PAGE_PATHS = {"runs": "/runs", "leaderboards": "/leaderboards", "finance": "/finance"}
MAX_QUERY_CHARS = 1000  # a filter URL is well under this; a longer one is not a filter
MAX_VALUE_CHARS = 200


class QueryError(ValueError):
    """A query string a saved view may not hold; `field` is the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def query_clean(page: str, query: str) -> str:
    """The query string as stored: its parameters, in the order given, re-encoded (no leading '?').

    Raises QueryError naming "page" or "query"."""
    if page not in PAGE_PARAMS:
        raise QueryError("page", f"unknown page {page[:40]!r}; one of {', '.join(sorted(PAGE_PARAMS))}")
    text = query[1:] if query.startswith("?") else query
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError("query", f"longer than {MAX_QUERY_CHARS} characters")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=len(PAGE_PARAMS[page]))
    except ValueError as exc:
        raise QueryError("query", f"not a query string ({exc})") from None
    seen: set[str] = set()
    for key, value in pairs:
        if key not in PAGE_PARAMS[page]:
            known = ", ".join(sorted(PAGE_PARAMS[page]))
            raise QueryError("query", f"{key[:40]!r} is not a parameter of the {page} page; it takes {known}")
        if key in seen:
            raise QueryError("query", f"{key!r} is given more than once")
        if len(value) > MAX_VALUE_CHARS:
            raise QueryError("query", f"{key!r} is longer than {MAX_VALUE_CHARS} characters")
        if any(ord(c) < 32 for c in value):
            raise QueryError("query", f"{key!r} holds a control character")
        seen.add(key)
    return urlencode([(k, v) for k, v in pairs if v != ""])


def view_url(page: str, query: str) -> str:
    """The URL that opens the view: the page's path and its query, the shareable form."""
    return PAGE_PATHS[page] + (f"?{query}" if query else "")
