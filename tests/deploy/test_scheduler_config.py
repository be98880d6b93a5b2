"""The example KubeSchedulerConfiguration wires the extender to routes the service has.

Field names follow kube-scheduler's v1 configuration (k8s.io/kube-scheduler config/v1
types.go, ``Extender``): urlPrefix, filterVerb, prioritizeVerb, weight, enableHTTPS,
tlsConfig, httpTimeout, nodeCacheCapable, managedResources, ignorable.
"""

from __future__ import annotations

import json

import yaml

from tests.deploy.support import REPO

CONFIG = REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
KNOWN_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "bindVerb",
    "weight",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}


def test_the_extender_calls_the_service_routes() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (extender,) = config["extenders"]
    assert set(extender) <= KNOWN_FIELDS
    paths = set(json.loads((REPO / "openapi" / "openapi.json").read_text())["paths"])
    prefix = "/" + extender["urlPrefix"].split("://", 1)[1].split("/", 1)[1]
    for verb in ("filterVerb", "prioritizeVerb"):
        assert f"{prefix}/{extender[verb]}" in paths
    assert extender["nodeCacheCapable"] is False  # node labels are what it judges
    assert extender["ignorable"] is True
    assert {"name": "nvidia.com/gpu", "ignoredByScheduler": False} in extender["managedResources"]
    assert extender["weight"] > 0 and extender["httpTimeout"].endswith("s")
    assert extender["enableHTTPS"] is True and extender["urlPrefix"].startswith("https://")
