"""The model-store overlay: the model cache claim mounted read-only where the store looks."""

from __future__ import annotations

from typing import Any

from service.settings import Settings
from tests.deploy.support import OVERLAYS, one

Resources = dict[str, list[dict[str, Any]]]


def test_model_store_overlay_is_rendered_with_the_others() -> None:
    assert "model-store" in OVERLAYS


def test_model_cache_is_mounted_read_only_at_the_store_root(rendered: Resources) -> None:
    resources = rendered["model-store"]
    pod = one(resources, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config_maps = [r for r in resources if r["kind"] == "ConfigMap"]
    data = next(c["data"] for c in config_maps if "LLMMEM_MODEL_DIRS" in c["data"])
    roots = data["LLMMEM_MODEL_DIRS"].split(":")
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for root in roots:
        mount = mounts[root]
        assert mount["readOnly"] is True
        claim = volumes[mount["name"]]["persistentVolumeClaim"]
        assert claim["readOnly"] is True and claim["claimName"]
    # The settings the overlay sets are valid for the service.
    store = Settings(
        model_dirs=data["LLMMEM_MODEL_DIRS"],
        model_store_rescan_s=float(data["LLMMEM_MODEL_STORE_RESCAN_S"]),
    )
    assert store.model_dirs == "/models"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
