"""Read a Kubernetes object into the trainer containers it runs, with their config files.

A container's config files are the request's ``files`` and the ConfigMaps of a ``List`` the
container mounts (a key becomes the file at its mount path; ``items`` rename keys; a
``subPath`` mounts one key as a file); its working directory is its ``workingDir``; the
controller's variables (``PET_NNODES``, ``PET_NPROC_PER_NODE``) are set over its ``env``, as the
operators do. A launcher that starts one process (``python``) in each of N pods is a job of N
ranks; a ``RayJob``'s entrypoint runs on the driver and its ranks on the GPU workers. The pod
kinds and their templates are in :mod:`.kinds`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import replace

from service.workloads.gpus import GpuRequest, gpu_requests, product_selector
from service.workloads.pods import (
    as_list,
    as_map,
    as_text,
    container_env,
    container_memory_limit,
    container_words,
    string_map,
)
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError
from service.workloads.training.files import ConfigFiles, FoundFile, parse_document
from service.workloads.training.kinds import (
    POD_SETS,
    TRAINING_KINDS,
    OtherTrainingContainer,
    PodSet,
    TrainingReading,
    TrainingWorkload,
    trainjob_model,
    trainjob_pods,
)
from service.workloads.training.launchers import find_training_command
from service.workloads.training.settings import Launch, TrainingCommand

__all__ = ["read_training"]


def _config_maps(items: list[object]) -> dict[str, dict[str, str]]:
    maps: dict[str, dict[str, str]] = {}
    for item in items:
        obj = as_map(item)
        if as_text(obj.get("kind")) == "ConfigMap":
            name = as_text(as_map(obj.get("metadata")).get("name"))
            if name:
                maps[name] = string_map(obj.get("data"))
    return maps


def _mounted(
    spec: Mapping[str, object],
    container: Mapping[str, object],
    maps: Mapping[str, Mapping[str, str]],
) -> dict[str, tuple[str, str]]:
    """The ConfigMap files a container sees: path -> (text, source)."""
    volumes = {
        as_text(as_map(v).get("name")): as_map(as_map(v).get("configMap"))
        for v in as_list(spec.get("volumes"))
    }
    files: dict[str, tuple[str, str]] = {}
    for mount in as_list(container.get("volumeMounts")):
        item = as_map(mount)
        volume = volumes.get(as_text(item.get("name")))
        target = as_text(item.get("mountPath"))
        if not volume or not target:
            continue
        name = as_text(volume.get("name")) or ""
        data = maps.get(name)
        if data is None:
            continue
        paths = {
            as_text(as_map(i).get("key")) or "": as_text(as_map(i).get("path")) or ""
            for i in as_list(volume.get("items"))
        } or {key: key for key in data}
        sub = as_text(item.get("subPath"))
        for key, relative in paths.items():
            if key not in data:
                continue
            if sub:
                if sub == relative:
                    files[target] = (data[key], f"ConfigMap {name} key {key}")
                continue
            path = posixpath.join(target, relative)
            files[path] = (data[key], f"ConfigMap {name} key {key} at {path}")
    return files


def _with_nodes(command: TrainingCommand, nodes: Sourced[int], notes: list[str]) -> TrainingCommand:
    """The launcher's node count reconciled with the pods the object runs."""
    launch = command.launch
    if nodes.value <= 1 or launch.nnodes.value == nodes.value:
        return command
    if launch.name == "python" or launch.name.startswith("axolotl (python"):
        return replace(
            command,
            launch=Launch(launch.name, launch.source, launch.nproc_per_node, nodes),
        )
    notes.append(
        f"{launch.name} starts {launch.nnodes.value} node(s) ({launch.nnodes.source}) but the "
        f"object runs {nodes.value} pods ({nodes.source}): the launcher's count is judged"
    )
    return command


def read_training(
    obj: object, files: ConfigFiles | None = None
) -> TrainingReading | ReadProblem | None:
    """Read an object into training workloads; None when it runs no trainer (or is not a
    kind read here). Never raises."""
    try:
        return _read(obj, files or ConfigFiles())
    except RecursionError:  # pragma: no cover - a pathological nesting depth
        return ReadProblem("object", "the object is nested too deeply to read")


def _read(obj: object, files: ConfigFiles) -> TrainingReading | ReadProblem | None:
    if not isinstance(obj, Mapping):
        return None
    kind = as_text(obj.get("kind"))
    maps: dict[str, dict[str, str]] = {}
    runtime: Mapping[str, object] | None = None
    if kind == "List":
        items = as_list(obj.get("items"))
        maps = _config_maps(items)
        runtime = next(
            (
                as_map(i)
                for i in items
                if as_text(as_map(i).get("kind")) in ("ClusterTrainingRuntime", "TrainingRuntime")
            ),
            None,
        )
        workload = next(
            (as_map(i) for i in items if as_text(as_map(i).get("kind")) in TRAINING_KINDS),
            None,
        )
        if workload is None:
            return None
        obj, kind = workload, as_text(workload.get("kind"))
    metadata = as_map(obj.get("metadata"))
    name = as_text(metadata.get("name"))
    namespace = as_text(metadata.get("namespace"))
    labels, annotations = (
        string_map(metadata.get("labels")),
        string_map(metadata.get("annotations")),
    )
    notes: list[str] = []
    queue = labels.get("kueue.x-k8s.io/queue-name")
    if queue:
        notes.append(
            f"Kueue queue {queue}: the job waits suspended until Kueue admits it and sets its "
            "node selection; fits_on lists the products it fits on"
        )
    if kind == "TrainJob":
        sets_or_problem = trainjob_pods(obj, runtime)
        model_hint = trainjob_model(obj, runtime)
    elif kind in POD_SETS:
        sets_or_problem = POD_SETS[kind](obj)
        model_hint = None
    else:
        return None
    if isinstance(sets_or_problem, ReadProblem):
        return sets_or_problem
    sets = sets_or_problem
    workloads: list[TrainingWorkload] = []
    others: list[OtherTrainingContainer] = []
    problems: list[ReadProblem] = []
    if kind == "RayJob":
        return _rayjob(obj, sets, files, kind, name, namespace, labels, annotations, notes)
    found: list[tuple[PodSet, str, Mapping[str, object], TrainingCommand, list[ReadProblem]]] = []
    for pod_set in sets:
        for index, raw in enumerate(as_list(pod_set.spec.get("containers"))):
            container = as_map(raw)
            path = f"{pod_set.path}.containers[{index}]"
            if pod_set.path == "spec.trainer":
                path = "spec.trainer"
            env, env_notes = container_env(container, path)
            env = {**env, **pod_set.env}
            words = container_words(container, path, "command", env) + container_words(
                container, path, "args", env
            )
            container_files = files.with_files(_mounted(pod_set.spec, container, maps))
            try:
                command, read_problems = find_training_command(
                    words, env, container_files, as_text(container.get("workingDir"))
                )
            except WorkloadError as exc:
                problems.append(exc.problem)
                continue
            if command is None:
                reason = "runs no trainer this service reads" if words else "gives no command"
                others.append(OtherTrainingContainer(path, as_text(container.get("name")), reason))
                continue
            found.append((pod_set, path, container, command, read_problems))
            notes.extend(env_notes)
    if not found:
        return (
            None
            if not problems
            else TrainingReading(kind or "", name, namespace, (), tuple(others), tuple(problems))
        )
    trainer_sets = {id(s) for s, *_ in found}
    total = sum(s.pods.value for s in sets if id(s) in trainer_sets)
    total_source = " + ".join(s.pods.source for s in sets if id(s) in trainer_sets)
    nodes = Sourced(total, total_source)
    for pod_set, path, container, command, read_problems in found:
        problems.extend(read_problems)
        own_notes = list(notes)
        command = _with_nodes(command, nodes, own_notes)
        if model_hint is not None and (command.model is None or command.model.repo_id is None):
            command = replace(command, model=model_hint)
        requests, gpu_problems = gpu_requests(
            container.get("resources"),
            f"{path}.resources" if path != "spec.trainer" else "spec.trainer.resourcesPerNode",
        )
        problems.extend(gpu_problems)
        workloads.append(
            TrainingWorkload(
                kind=kind or "",
                name=name,
                namespace=namespace,
                role=pod_set.role,
                path=path,
                container=as_text(container.get("name")),
                command=command,
                gpus=requests[0] if requests else None,
                pods=pod_set.pods,
                nodes=nodes,
                gpu_product=pod_set.selector
                if pod_set.path == "spec.trainer"
                else product_selector(pod_set.spec, pod_set.path),
                memory_limit=container_memory_limit(container, path),
                labels=labels,
                annotations=annotations,
                notes=tuple(dict.fromkeys(own_notes)),
            )
        )
    return TrainingReading(
        kind or "", name, namespace, tuple(workloads), tuple(others), tuple(problems)
    )


def _rayjob(
    obj: Mapping[str, object],
    sets: list[PodSet],
    files: ConfigFiles,
    kind: str,
    name: str | None,
    namespace: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    notes: list[str],
) -> TrainingReading | ReadProblem | None:
    entrypoint = as_text(as_map(obj.get("spec")).get("entrypoint"))
    if not entrypoint:
        return None
    env: dict[str, Sourced[str]] = {}
    runtime_env = as_text(as_map(obj.get("spec")).get("runtimeEnvYAML"))
    if runtime_env:
        doc = parse_document(
            FoundFile("runtime_env.yaml", runtime_env, "spec.runtimeEnvYAML"), "spec.runtimeEnvYAML"
        )
        if isinstance(doc, Mapping):
            for key, value in as_map(doc.get("env_vars")).items():
                env[str(key)] = Sourced(str(value), f"spec.runtimeEnvYAML env_vars.{key}")
    words = [
        Token("sh", "spec.entrypoint"),
        Token("-c", "spec.entrypoint"),
        Token(entrypoint, "spec.entrypoint"),
    ]
    try:
        command, problems = find_training_command(words, env, files)
    except WorkloadError as exc:
        return ReadProblem(exc.problem.field, exc.problem.detail, exc.problem.fix)
    if command is None:
        return None
    gpu_sets: list[tuple[PodSet, Mapping[str, object], str, GpuRequest]] = []
    for pod_set in sets:
        for index, raw in enumerate(as_list(pod_set.spec.get("containers"))):
            container = as_map(raw)
            path = f"{pod_set.path}.containers[{index}]"
            requests, gpu_problems = gpu_requests(container.get("resources"), f"{path}.resources")
            problems.extend(gpu_problems)
            if requests:
                gpu_sets.append((pod_set, container, path, requests[0]))
                break
    if not gpu_sets:
        return TrainingReading(
            kind,
            name,
            namespace,
            (),
            (),
            (ReadProblem("spec.rayClusterSpec", "no Ray pod requests a GPU"),),
        )
    total = sum(s.pods.value for s, *_ in gpu_sets)
    nodes = Sourced(total, " + ".join(s.pods.source for s, *_ in gpu_sets))
    launch = Launch(
        "Ray Train",
        "spec.entrypoint",
        Sourced(None, "every GPU of each Ray worker (ScalingConfig is in the script)"),
        nodes,
    )
    command = replace(command, launch=launch)
    workloads = tuple(
        TrainingWorkload(
            kind=kind,
            name=name,
            namespace=namespace,
            role=pod_set.role,
            path=path,
            container=as_text(container.get("name")),
            command=command,
            gpus=request,
            pods=pod_set.pods,
            nodes=nodes,
            gpu_product=product_selector(pod_set.spec, pod_set.path),
            memory_limit=container_memory_limit(container, path),
            labels=labels,
            annotations=annotations,
            notes=(
                *notes,
                "Ray Train's world size is set in the script: one rank per worker GPU assumed",
            ),
        )
        for pod_set, container, path, request in gpu_sets
    )
    return TrainingReading(kind, name, namespace, workloads, (), tuple(problems))
