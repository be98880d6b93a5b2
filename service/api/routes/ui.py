"""GET /: the memory calculator page, and GET /static/...: its assets and the docs' assets.

Everything the page needs ships in `service/web/` (no CDN, no build step): clusters are often
air-gapped. The page itself only calls the public API (GET /v1/models, /v1/gpus, /openapi.json
and POST /v1/estimate/batch), so it shows exactly what a client would get.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.exceptions import HTTPException

router = APIRouter(include_in_schema=False)

WEB_DIR = Path(__file__).resolve().parents[2] / "web"

# What /static may serve, by suffix; anything else (licence texts included) is a 404 there.
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}

# The page loads only its own scripts and styles and talks only to this service.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def static_file(path: str) -> Path:
    """The file under WEB_DIR that `path` names; 404 for anything outside it or not servable."""
    candidate = (WEB_DIR / path).resolve()
    if (
        not candidate.is_relative_to(WEB_DIR)
        or candidate.suffix not in _MEDIA_TYPES
        or not candidate.is_file()
    ):
        raise HTTPException(404, f"no static file {path!r}")
    return candidate


@router.get("/")
def calculator_page() -> FileResponse:
    return FileResponse(
        WEB_DIR / "index.html",
        media_type=_MEDIA_TYPES[".html"],
        headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-cache"},
    )


@router.get("/static/{path:path}")
def static_asset(path: str) -> FileResponse:
    file = static_file(path)
    # The vendored bundles never change under a given release; the page's own files may.
    cache = "public, max-age=86400" if file.is_relative_to(WEB_DIR / "vendor") else "no-cache"
    return FileResponse(
        file, media_type=_MEDIA_TYPES[file.suffix], headers={"Cache-Control": cache}
    )
