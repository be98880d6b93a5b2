"""Posted config.json files with one field broken in any way: always a 200 or a 4xx, never a
5xx (the configs are real catalog entries; hypothesis picks the field and the bad value)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.catalog.model_catalog import load_model_catalog

CONFIGS = [dict(e.config) for e in load_model_catalog().all()]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    config=st.sampled_from(CONFIGS),
    data=st.data(),
    value=json_values,
    kind=st.sampled_from(["inference", "finetune"]),
)
def test_broken_config_field_is_never_a_server_error(
    client: TestClient, config: dict[str, Any], data: st.DataObject, value: Any, kind: str
) -> None:
    key = data.draw(st.sampled_from(sorted(config)))
    broken = {**config, key: value}
    response = client.post(f"/v1/estimate/{kind}", json={"hf_config": broken, "gpu": "h100"})
    assert response.status_code in (200, 422), (key, value, response.text[:300])
    if response.status_code == 422:
        assert response.headers["content-type"].startswith("application/problem+json")
