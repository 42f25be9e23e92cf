"""GraphiQL on ``GET /graphql`` for browsers, from files vendored in the package (no CDN).

The page is a shell: HTML that loads React, ReactDOM and GraphiQL from
``service/web/static/graphiql/`` (``scripts/vendor-graphiql`` fetches them from the npm
registry against pinned checksums) plus ``ledger-graphiql.js``, which adds a *Bearer token*
field and sends its value as ``Authorization: Bearer …`` with every query (kept in the tab's
sessionStorage, never in localStorage or a cookie). The shell holds no data, so it is served
without a credential; every query it sends goes through the auth middleware like any other.

Which requests get the page (:func:`is_graphiql_page`) is decided once, here, for both the auth
middleware (which lets exactly these through) and the GraphQL view (which answers exactly these
with the page): a GET with ``text/html`` in ``Accept`` and no ``query`` parameter. A GET carrying
a query is a GraphQL request, whatever its ``Accept``, and needs a credential.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

#: The folder with the vendored files inside the package, and where the app serves it.
ASSET_DIR = Path(__file__).resolve().parents[1] / "web" / "static" / "graphiql"
ASSET_URL = "/static/graphiql"

# What the page may load: only this origin (scripts, styles, the API), plus the data: fonts and
# icons inside graphiql.min.css. GraphiQL sets inline style attributes, hence 'unsafe-inline' for
# styles (never for scripts).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "font-src 'self' data:; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def is_graphiql_page(scope: Scope) -> bool:
    """Whether ``scope`` asks ``/graphql`` for the GraphiQL page rather than an answer."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return False
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return "query" not in query and "text/html" in Headers(scope=scope).get("accept", "")


def is_graphiql_asset(path: str) -> bool:
    """Whether ``path`` is one of the page's files (public: vendored code, no data)."""
    return path.startswith(ASSET_URL + "/")


def graphiql_assets() -> Mount:
    """The route serving the page's files at :data:`ASSET_URL`."""
    return Mount(ASSET_URL, StaticFiles(directory=ASSET_DIR), name="graphiql-assets")


def graphiql_html(endpoint: str = "/graphql", asset_url: str = ASSET_URL) -> str:
    """The page's HTML; ``endpoint``: where queries go, ``asset_url``: where the files are served."""
    a, e = escape(asset_url), escape(endpoint)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU Ledger · GraphiQL</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{a}/graphiql.min.css">
<link rel="stylesheet" href="{a}/ledger-graphiql.css">
</head>
<body>
<header class="ledger-bar">
  <strong>GPU Ledger</strong><span class="ledger-endpoint">GraphQL API at {e}</span>
  <label for="ledger-token">Bearer token</label>
  <input id="ledger-token" type="password" autocomplete="off" spellcheck="false"
         placeholder="gpl_… or a JWT (empty: no Authorization header)">
  <button id="ledger-token-show" type="button" aria-controls="ledger-token">Show</button>
  <output id="ledger-status" role="status" aria-live="polite"></output>
</header>
<main id="graphiql">Loading GraphiQL…</main>
<noscript>GraphiQL needs JavaScript; without it, POST queries to {e} (see docs).</noscript>
<script src="{a}/react.production.min.js"></script>
<script src="{a}/react-dom.production.min.js"></script>
<script src="{a}/graphiql.min.js"></script>
<script src="{a}/ledger-graphiql.js" data-endpoint="{e}"></script>
</body>
</html>
"""


_PAGE = graphiql_html()


def graphiql_response() -> HTMLResponse:
    """The page, with a policy that keeps every request it makes on this origin."""
    headers = {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }
    return HTMLResponse(_PAGE, headers=headers)
