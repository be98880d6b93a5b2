"""Requests are counted under the route they asked for, even when answered before routing
(issue 25 item 11: the calculator page's files counted as ``route="unmatched"``)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

PAGE_ASSET = re.compile(r'(?:src|href)="(/static/[^"]+)"')


def _counted(client: TestClient, method: str, route: str, status: int) -> float:
    text = client.get("/metrics").text
    line = f'llmmem_http_requests_total{{method="{method}",route="{route}",status="{status}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


def test_the_pages_files_are_counted_under_their_route(client: TestClient) -> None:
    page = client.get("/")
    assets = PAGE_ASSET.findall(page.text)
    assert assets, "the page names its files"
    before = _counted(client, "GET", "/static/{path:path}", 200)
    unmatched = _counted(client, "GET", "unmatched", 404)
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    assert _counted(client, "GET", "/static/{path:path}", 200) - before == len(assets)
    assert _counted(client, "GET", "unmatched", 404) == unmatched


def test_a_request_refused_before_routing_is_counted_under_its_route(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-value-0123456789\\n")
    settings = Settings(access_log=False, auth_tokens_path=str(tokens))
    with TestClient(create_app(settings)) as client:
        assert client.get("/static/app.js").status_code == 401
        assert client.post("/v1/extender/filter", json={}).status_code == 401
        assert client.get("/no/such/route").status_code == 401
        auth = {"Authorization": "Bearer s3cret-token-value-0123456789"}
        metrics = client.get("/metrics", headers=auth).text
    assert (
        'llmmem_http_requests_total{method="GET",route="/static/{path:path}",status="401"} 1.0'
        in metrics
    )
    assert (
        'llmmem_http_requests_total{method="POST",route="/v1/extender/filter",status="401"} 1.0'
        in metrics
    )
    assert 'llmmem_http_requests_total{method="GET",route="unmatched",status="401"} 1.0' in metrics
