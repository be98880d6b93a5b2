"""The page, its static files and the offline /docs and /redoc, without a browser."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

VENDORED = (
    "/static/vendor/swagger-ui/swagger-ui-bundle.js",
    "/static/vendor/swagger-ui/swagger-ui.css",
    "/static/vendor/redoc/redoc.standalone.js",
)


def test_page_is_served_with_its_assets(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    # Everything the page loads is its own: no scheme-qualified src or href but documentation.
    assert not re.search(r"""(src|href)=["']https?://""", page.text)
    for asset, media in (
        ("/static/app.js", "text/javascript"),
        ("/static/style.css", "text/css"),
        ("/static/favicon.svg", "image/svg+xml"),
    ):
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert response.headers["content-type"].startswith(media), asset
        assert f'"{asset}"' in page.text, asset


@pytest.mark.parametrize(
    "path",
    [
        "/static/../settings.py",
        "/static/%2e%2e/%2e%2e/app.py",
        "/static/missing.js",
        "/static/vendor",
        "/static/index.py",
    ],
)
def test_static_serves_only_web_files(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_docs_load_only_local_assets(client: TestClient, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200
    sources = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "https://" not in page.text.replace("https://github.com", "")
    for source in sources:
        if source.startswith("/static/"):
            assert client.get(source).status_code == 200, source


@pytest.mark.parametrize("asset", VENDORED)
def test_vendored_assets_are_served(client: TestClient, asset: str) -> None:
    response = client.get(asset)
    assert response.status_code == 200
    assert len(response.content) > 100_000


def test_docs_can_be_disabled() -> None:
    app = create_app(Settings(access_log=False, docs_enabled=False))
    with TestClient(app) as client:
        assert client.get("/docs").status_code == 404
        assert client.get("/redoc").status_code == 404
        assert client.get("/").status_code == 200


def test_ui_routes_stay_out_of_the_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not {"/", "/docs", "/redoc"} & set(paths)
    assert not any(p.startswith("/static") for p in paths)


def test_the_pages_context_field_names_each_engines_own_option_and_flag() -> None:
    """app.js's CONTEXT_OPTION table against the engines' `context_option` and its flag."""
    from service.api.routes.ui import WEB_DIR
    from service.estimator.engines import REGISTRY

    script = (WEB_DIR / "app.js").read_text()
    block = script[script.index("const CONTEXT_OPTION = {") :]
    block = block[: block.index("};")]
    table = {
        engine: (option, flag)
        for engine, option, flag in re.findall(
            r'^\s*"?([\w.]+)"?: \["(\w+)", "([\w-]+)"\],$', block, re.MULTILINE
        )
    }
    expected = {
        name: (engine.context_option, engine.option_table()[engine.context_option].flag)
        for name, engine in REGISTRY.items()
        if engine.context_option is not None
    }
    assert table == expected
