"""Readers of serving controllers' specs, which a controller turns into pods running vLLM.

- KServe InferenceService (``serving.kserve.io/v1beta1``, kserve/kserve
  ``pkg/apis/serving/v1beta1/predictor.go``) and LLMInferenceService
  (``serving.kserve.io/v1alpha1``/``v1alpha2``, kserve/kserve
  ``pkg/apis/serving/v1alpha2/llm_inference_service_types.go``);
- the vLLM production-stack Helm values (vllm-project/production-stack
  ``helm/templates/deployment-vllm-multi.yaml`` and ``_helpers.tpl``).

The field-by-field reading is described in :mod:`.kubernetes`'s docstring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from service.workloads.commands import (
    EngineCommand,
    find_engine_command,
    parse_engine_args,
)
from service.workloads.engine_flags import Engine
from service.workloads.gpus import GpuRequest, gpu_request
from service.workloads.gpus import product_selector as read_product_selector
from service.workloads.models import ModelRef, model_ref
from service.workloads.pods import (
    Collector,
    OtherContainer,
    PodTemplate,
    Role,
    as_list,
    as_map,
    as_text,
    container_env,
    container_words,
    first_gpu,
    pod_gpus,
    read_pod,
    sourced_count,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError

__all__ = ["read_inference_service", "read_llm_inference_service", "read_production_stack"]


def _kserve_engine(model: Mapping[str, object]) -> tuple[Engine | None, str]:
    fmt = as_text(as_map(model.get("modelFormat")).get("name")) or ""
    name = fmt.lower()
    if name in ("huggingface", "vllm"):
        return "vllm", fmt
    if name == "sglang":
        return "sglang", fmt
    return None, fmt


def read_inference_service(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A KServe InferenceService: its predictor's model spec or custom containers."""
    predictor = subtree(obj, "spec.predictor")
    if predictor is None:
        return ReadProblem("spec.predictor", "an InferenceService needs spec.predictor")
    replicas = sourced_count(
        predictor.get("minReplicas"), "spec.predictor.minReplicas", 1, "default (KServe: 1)"
    )
    worker = as_map(predictor.get("workerSpec"))
    pods = Sourced(1, "one pod per replica")
    other_gpus = 0
    extra: list[Token] = []
    wpath = "spec.predictor.workerSpec"
    if worker:
        pp = sourced_count(
            worker.get("pipelineParallelSize"),
            f"{wpath}.pipelineParallelSize",
            1,
            "default (KServe: 1)",
        )
        pods = Sourced(pp.value, f"{pp.source} (one pod per pipeline stage)")
        other_gpus = max(pp.value - 1, 0) * pod_gpus(worker, wpath)
        if "pipelineParallelSize" in worker:
            extra += [Token("--pipeline-parallel-size", pp.source), Token(str(pp.value), pp.source)]
        tp = worker.get("tensorParallelSize")
        if isinstance(tp, int) and not isinstance(tp, bool):
            src = f"{wpath}.tensorParallelSize"
            extra += [Token("--tensor-parallel-size", src), Token(str(tp), src)]
    pod = PodTemplate(out.kind, "main", "spec.predictor", predictor, replicas, pods, other_gpus)
    model = as_map(predictor.get("model"))
    if not model:
        if as_list(predictor.get("containers")):
            read_pod(out, pod)
            return None
        return ReadProblem(
            "spec.predictor.model",
            "the predictor has neither a model spec nor containers",
            "give spec.predictor.model (modelFormat, storageUri, args, resources)",
        )
    path = "spec.predictor.model"
    engine, fmt = _kserve_engine(model)
    gpus, gpu_notes = first_gpu(model.get("resources"), f"{path}.resources", out.problems)
    env, env_notes = container_env(model, path)
    words = container_words(model, path, "command", env) + container_words(model, path, "args", env)
    backend = next(
        (w for w in words if w.text in ("--backend=huggingface", "--backend=transformers")), None
    )
    if engine is None or backend is not None:
        why = (
            f"{backend.source} selects the transformers backend"
            if backend is not None
            else f"model format {fmt!r} is not served by vLLM or SGLang"
        )
        out.others.append(OtherContainer(path, "kserve-container", why, gpus))
        return None
    try:
        command = find_engine_command(words, env) if as_list(model.get("command")) else None
        if command is None:
            command = parse_engine_args(
                engine,
                [w for w in words if not w.text.startswith("--backend")] + extra,
                entrypoint=f"KServe {fmt} runtime",
                entrypoint_source=f"{path}.modelFormat.name",
                env=env,
            )
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return None
    ref, command = _kserve_model(model, path, command)
    notes = gpu_notes + env_notes
    if gpus is None:
        notes.append("the model spec requests no GPU (the ServingRuntime may add one)")
    out.add(
        pod,
        path=path,
        container="kserve-container",
        command=command,
        engine_source=f"{path}.modelFormat.name ({fmt})",
        gpus=gpus,
        model=ref,
        notes=notes,
    )
    return None


def _kserve_model(
    model: Mapping[str, object], path: str, command: EngineCommand
) -> tuple[ModelRef | None, EngineCommand]:
    """``storageUri`` names the model; else the Hugging Face server's ``--model_id``
    (kserve/kserve ``python/huggingfaceserver/huggingfaceserver/__main__.py``), which is then
    read, not ignored: the command comes back without it in ``ignored_args``."""
    uri = as_text(model.get("storageUri"))
    if uri:
        return model_ref(uri, f"{path}.storageUri"), command
    for arg in command.ignored_args:
        flag, _, inline = arg.words[0].partition("=")
        if flag in ("--model_id", "--model-id"):
            value = inline or (arg.words[1] if len(arg.words) > 1 else "")
            if value:
                rest = tuple(a for a in command.ignored_args if a is not arg)
                return model_ref(value, arg.source), dataclasses.replace(command, ignored_args=rest)
    return command.model, command


_PARALLELISM = (
    ("tensor", "--tensor-parallel-size"),
    ("pipeline", "--pipeline-parallel-size"),
    ("data", "--data-parallel-size"),
)


def read_llm_inference_service(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A KServe LLMInferenceService: its main workload and, when set, its prefill side."""
    spec = subtree(obj, "spec")
    if spec is None:
        return ReadProblem("spec", "an LLMInferenceService needs a spec")
    uri = as_text(as_map(spec.get("model")).get("uri"))
    if not uri:
        return ReadProblem("spec.model.uri", "the model URI is missing", "e.g. hf://org/model")
    model = model_ref(uri, "spec.model.uri")
    _read_llm_workload(out, spec, "spec", model, "decode" if spec.get("prefill") else "main")
    prefill = as_map(spec.get("prefill"))
    if prefill:
        _read_llm_workload(out, prefill, "spec.prefill", model, "prefill")
    return None


def _read_llm_workload(
    out: Collector, workload: Mapping[str, object], path: str, model: ModelRef, role: Role
) -> None:
    replicas = sourced_count(workload.get("replicas"), f"{path}.replicas", 1, "default (KServe: 1)")
    parallelism = as_map(workload.get("parallelism"))
    extra: list[Token] = []
    sizes: dict[str, int] = {}
    for key, flag in _PARALLELISM:
        value = parallelism.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            src = f"{path}.parallelism.{key}"
            extra += [Token(flag, src), Token(str(value), src)]
            sizes[key] = value
    if parallelism.get("expert") is True:
        extra.append(Token("--enable-expert-parallel", f"{path}.parallelism.expert"))
    template = as_map(workload.get("template"))
    template_path = f"{path}.template"
    containers = [as_map(c) for c in as_list(template.get("containers"))]
    main_index = next(
        (i for i, c in enumerate(containers) if c.get("name") == "main"),
        0 if containers else None,
    )
    gpus: GpuRequest | None = None
    words: list[Token] = []
    env: dict[str, Sourced[str]] = {}
    notes: list[str] = []
    container_path = template_path
    if main_index is not None:
        main = containers[main_index]
        container_path = f"{template_path}.containers[{main_index}]"
        gpus, gpu_notes = first_gpu(
            main.get("resources"), f"{container_path}.resources", out.problems
        )
        env, env_notes = container_env(main, container_path)
        words = container_words(main, container_path, "command", env) + container_words(
            main, container_path, "args", env
        )
        notes += gpu_notes + env_notes
    else:
        notes.append(
            f"{template_path} gives no container: GPUs come from the LLMInferenceServiceConfig "
            "preset and are not in the object"
        )
    worker = as_map(workload.get("worker"))
    pods = Sourced(1, "one pod per replica")
    other = 0
    if worker and gpus is not None and gpus.count:
        needed = 1
        for value in sizes.values():
            needed *= value
        count = max(1, -(-needed // gpus.count))
        pods = Sourced(
            count,
            f"{path}.parallelism ({needed} GPUs) / {gpus.count} GPUs per pod ({path}.worker set)",
        )
        other = (count - 1) * gpus.count
    elif worker:
        notes.append(f"{path}.worker is set but the pods per group cannot be derived")
    pod = PodTemplate(out.kind, role, template_path, template, replicas, pods, other)
    try:
        command = find_engine_command(words, env) if words else None
        if command is None:
            command = parse_engine_args(
                "vllm",
                words,
                entrypoint="KServe LLMInferenceService (vLLM)",
                entrypoint_source="kind LLMInferenceService",
                env=env,
            )
        if extra:
            # spec.parallelism is what the controller passes to vLLM; it comes last so it wins.
            merged = parse_engine_args(
                command.engine,
                extra,
                entrypoint=command.entrypoint,
                entrypoint_source=command.entrypoint_source,
            )
            command = EngineCommand(
                engine=command.engine,
                entrypoint=command.entrypoint,
                entrypoint_source=command.entrypoint_source,
                model=command.model,
                options={**command.options, **merged.options},
                ignored_args=command.ignored_args,
                env=command.env,
                notes=command.notes,
            )
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return
    if command.model is not None and command.model.scheme == "local":
        notes.append(f"the engine reads {command.model.given}, where {model.source} is downloaded")
    out.add(
        pod,
        path=container_path,
        container=as_text(containers[main_index].get("name")) if main_index is not None else None,
        command=command,
        engine_source="kind LLMInferenceService (KServe runs vLLM)",
        gpus=gpus,
        model=model,
        notes=notes,
    )


# vllmConfig keys the production-stack chart turns into flags (deployment-vllm-multi.yaml).
_STACK_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu_memory_utilization"),
    ("maxLoras", "--max_loras"),
)
_STACK_SWITCHES = (
    ("enableChunkedPrefill", "--enable-chunked-prefill"),
    ("enablePrefixCaching", "--enable-prefix-caching"),
)


def read_production_stack(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """The vLLM production-stack values: one vLLM Deployment per ``modelSpec`` entry."""
    engine_spec = as_map(obj.get("servingEngineSpec"))
    specs = as_list(engine_spec.get("modelSpec"))
    if not specs:
        return ReadProblem(
            "servingEngineSpec.modelSpec", "the values list no model", "give one modelSpec entry"
        )
    for index, raw in enumerate(specs):
        spec = as_map(raw)
        path = f"servingEngineSpec.modelSpec[{index}]"
        url = as_text(spec.get("modelURL"))
        if not url:
            out.problems.append(ReadProblem(f"{path}.modelURL", "the model URL is missing"))
            continue
        words = [
            Token("vllm", f"{path} (the chart runs vllm serve)"),
            Token("serve", f"{path} (the chart runs vllm serve)"),
            Token(url, f"{path}.modelURL"),
        ]
        if spec.get("enableLoRA") is True:
            words.append(Token("--enable-lora", f"{path}.enableLoRA"))
        config = as_map(spec.get("vllmConfig"))
        cpath = f"{path}.vllmConfig"
        for key, flag in _STACK_SWITCHES:
            if key in config:
                on = config.get(key) is True
                words.append(Token(flag if on else "--no-" + flag[2:], f"{cpath}.{key}"))
        for key, flag in _STACK_VALUE_FLAGS:
            if key in config and config[key] is not None:
                words += [Token(flag, f"{cpath}.{key}"), Token(str(config[key]), f"{cpath}.{key}")]
        for k, arg in enumerate(as_list(config.get("extraArgs"))):
            if isinstance(arg, str | int | float) and not isinstance(arg, bool):
                words.append(Token(str(arg), f"{cpath}.extraArgs[{k}]"))
        count = sourced_count(spec.get("requestGPU"), f"{path}.requestGPU", 0, "not given")
        resource = as_text(spec.get("requestGPUType")) or "nvidia.com/gpu"
        gpus = gpu_request(resource, count.value, count.source) if count.value else None
        notes = []
        if count.value and gpus is None:
            notes.append(
                f"{path}.requestGPUType {resource!r} is not a GPU resource this reader knows"
            )
        if "raySpec" in spec:
            notes.append(f"{path}.raySpec runs a multi-node Ray cluster; its pods are not counted")
        replicas = sourced_count(
            spec.get("replicaCount"), f"{path}.replicaCount", 1, "default (chart: 1)"
        )
        pod = PodTemplate(out.kind, "main", path, {}, replicas, Sourced(1, "one pod per replica"))
        product = read_product_selector(
            {},
            path,
            extra_terms=spec.get("nodeSelectorTerms"),
            extra_path=f"{path}.nodeSelectorTerms",
        )
        try:
            command = find_engine_command(words)
        except WorkloadError as exc:
            out.problems.append(exc.problem)
            continue
        assert command is not None  # the words start with vllm serve
        out.add(
            pod,
            path=path,
            container="vllm",
            command=command,
            engine_source=f"{path} (the production-stack chart runs vllm serve)",
            gpus=gpus,
            product=product,
            notes=notes,
        )
    return None
