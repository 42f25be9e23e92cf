"""The dashboard's routes: ``GET /`` (the page) and its files under ``/static/dashboard/`` and
``/static/vendor/`` (uPlot, vendored by ``scripts/vendor-assets``: no CDN, works offline).

The page and its files are code without data, so the auth middleware lets them through
(:func:`is_dashboard_shell`); the page asks ``/graphql`` for every number with the token the user
typed (``Authorization: Bearer``), and those requests are checked like any other. The only thing
the page learns from the server before that is whether a caller without a token may read
(``serve --demo`` on loopback, or ``[auth] anonymous_read``), so it knows whether to ask for one
first — something any tokenless request would tell as well.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

WEB_DIR = Path(__file__).resolve().parent
STATIC_DIR = WEB_DIR / "static"
DASHBOARD_URL = "/static/dashboard"
VENDOR_URL = "/static/vendor"
PUBLIC_PREFIXES = (DASHBOARD_URL + "/", VENDOR_URL + "/")
ANONYMOUS_MARK = "{{anonymous_read}}"

# Everything the page loads comes from this origin; uPlot sizes its canvas through element.style
# (CSSOM, which style-src does not govern), so no inline style or script is needed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def is_dashboard_shell(scope: Scope) -> bool:
    """Whether ``scope`` asks for the page or one of its files (public: no data)."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
        return False
    path: str = scope["path"]
    return path == "/" or path.startswith(PUBLIC_PREFIXES)


def _page(anonymous_read: bool) -> str:
    html = (WEB_DIR / "index.html").read_text(encoding="utf-8")
    return html.replace(ANONYMOUS_MARK, "true" if anonymous_read else "false")


_PAGES = {flag: _page(flag) for flag in (False, True)}


async def index(request: Request) -> Response:
    authenticator = getattr(request.app.state, "authenticator", None)
    anonymous = getattr(authenticator, "anonymous", None) is not None
    return HTMLResponse(_PAGES[anonymous], headers=HEADERS)


def dashboard_routes() -> list[Route | Mount]:
    """``/`` and the two static folders."""
    return [
        Route("/", index, methods=["GET", "HEAD"]),
        Mount(DASHBOARD_URL, StaticFiles(directory=STATIC_DIR / "dashboard"), name="dashboard"),
        Mount(VENDOR_URL, StaticFiles(directory=STATIC_DIR / "vendor"), name="vendor"),
    ]
