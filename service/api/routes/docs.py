"""GET /docs (Swagger UI) and /redoc (ReDoc), served from assets vendored in the package.

FastAPI's own pages load their JavaScript and CSS from a CDN, which an air-gapped cluster
cannot reach; these load `service/web/vendor/` through /static (sources and licences in
`service/web/vendor/SOURCES.txt`). Both answer 404 when the `docs_enabled` setting is off.

A Content-Security-Policy keeps both pages on this origin: ReDoc's sidebar always shows
"API docs by Redocly" with a logo from redoc.ly's CDN; the policy stops the browser asking for
it (the image then hides itself), so an air-gapped browser makes no outside request at all.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from service.api.deps import settings_of

router = APIRouter(include_in_schema=False)

FAVICON = "/static/favicon.svg"
SWAGGER_JS = "/static/vendor/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = "/static/vendor/swagger-ui/swagger-ui.css"
REDOC_JS = "/static/vendor/redoc/redoc.standalone.js"

# Swagger UI starts from an inline script; ReDoc injects styles and runs a search worker from a
# blob. Everything they fetch (spec, assets, "Try it out" calls) is on this origin.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
    "worker-src 'self' blob:; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def _openapi_url(request: Request) -> str:
    if not settings_of(request).docs_enabled or not request.app.openapi_url:
        raise HTTPException(404, "the API docs are disabled (LLMMEM_DOCS_ENABLED=false)")
    return str(request.app.openapi_url)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=SWAGGER_JS,
        swagger_css_url=SWAGGER_CSS,
        swagger_favicon_url=FAVICON,
        # No call to the public validator service (and no badge that would make one).
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=REDOC_JS,
        redoc_favicon_url=FAVICON,
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page
