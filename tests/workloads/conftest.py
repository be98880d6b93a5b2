"""Kubernetes objects built with the official client's models and serialized by its ApiClient,
so the shapes under test are the ones the API server sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s


@pytest.fixture(scope="session")
def to_json() -> Callable[[object], Any]:
    """Serialize a client model (or a dict holding them) as the API server would send it."""
    api = k8s.ApiClient()

    def convert(obj: object) -> Any:
        return api.sanitize_for_serialization(obj)

    return convert
