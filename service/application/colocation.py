"""Answering ``POST /v1/estimate/colocated``: several engines judged on one shared GPU.

Each workload is answered as ``/v1/estimate/inference`` answers it, on the memory its engine
sees when it starts (:mod:`service.estimator.inference.colocation` says which), and what each
then holds is added up against the GPU.
"""

from __future__ import annotations

import dataclasses

from service.application.estimate_service import Catalogs, answer_body
from service.application.metrics import Metrics
from service.application.render import render_estimate
from service.application.resolve import ad_hoc_gpu, resolve_gpu, resolve_model
from service.estimator.cancel import checkpoint
from service.estimator.engines import get_engine
from service.estimator.engines.overhead import cuda_context_bytes
from service.estimator.errors import InvalidRequest
from service.estimator.inference.colocation import footprint, judge_colocation, starts_beside
from service.estimator.units import GB
from service.schemas.colocation import ColocatedRequest, ColocatedResponse, TenantOut

__all__ = ["run_colocated"]


def run_colocated(
    body: ColocatedRequest, catalogs: Catalogs, metrics: Metrics
) -> ColocatedResponse:
    """Judge the workloads together on the request's GPU."""
    gpu = (
        resolve_gpu(catalogs.gpus, body.gpu)
        if body.gpu is not None
        else ad_hoc_gpu(int(body.gpu_memory_bytes or 0))
    )
    total = gpu.total_bytes
    n = len(body.workloads)
    notes: list[str] = []
    if body.sharing == "mps":
        limit = body.mps_memory_limit_bytes or total // n
        if limit * n > total:
            raise InvalidRequest(
                f"{n} MPS clients of {limit} bytes exceed the GPU's {total} bytes",
                field="mps_memory_limit_bytes",
            )
        notes.append(
            f"MPS: each client sees its pinned limit of {limit / GB:.1f} GB as the device's "
            "memory (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and holds at most that"
        )
    else:
        limit = None
        notes.append(
            "time-slicing: no memory isolation; engines whose budget is a share of the "
            "device (vLLM) start first on the whole GPU, engines whose budget is a share of "
            "the free memory (SGLang) after them, on what is left"
        )
    # Share-of-total engines first, free-memory engines after them (module docstring).
    order = sorted(
        range(n), key=lambda i: get_engine(body.workloads[i].engine).budget_reads_free_memory
    )
    tenants: dict[int, TenantOut] = {}
    held_so_far = 0
    for i in order:
        checkpoint()  # past the request's deadline, the remaining workloads are not estimated
        work = body.workloads[i]
        engine = get_engine(work.engine)
        sees = limit if limit is not None else total
        if limit is None and engine.budget_reads_free_memory:
            sees = max(1, total - held_so_far)
        seen = dataclasses.replace(gpu, total_bytes=sees)
        model = resolve_model(work, catalogs.models, catalogs.store)
        answer = answer_body(work, model, seen, catalogs)
        if answer.fit is None:
            raise InvalidRequest(
                "the detailed estimator is needed to judge a shared GPU (name the model)",
                field=f"workloads[{i}].model",
            )
        held = footprint(answer.estimate, answer.fit, engine.budget_option is not None)
        fits = answer.fit.fits
        if limit is not None:
            held = min(held, limit)
        elif engine.budget_option is not None and not engine.budget_reads_free_memory:
            context = cuda_context_bytes(gpu)
            if not starts_beside(held_so_far, answer.fit.usable_bytes, context, total):
                fits = False
                notes.append(
                    f"workload #{i}: {work.engine} checks at start that its budget "
                    f"({answer.fit.usable_bytes / GB:.1f} GB) is free beside its CUDA context; "
                    f"the engines before it leave {(total - held_so_far - context) / GB:.1f} GB"
                )
        held_so_far += held
        rendered = render_estimate("inference", model, answer)
        tenants[i] = TenantOut(sees_bytes=sees, held_bytes=held, fits=fits, estimate=rendered)
        metrics.observe_estimate("inference", answer.estimate.estimator, work.engine, fits)
    ordered = [tenants[i] for i in range(n)]
    held_total = sum(t.held_bytes for t in ordered)
    verdict = judge_colocation(total, [t.held_bytes for t in ordered], [t.fits for t in ordered])
    word = "fit" if verdict.fits else "do not fit"
    summary = (
        f"{n} engines on one {gpu.name} ({body.sharing}): they hold {held_total / GB:.1f} GB of "
        f"{total / GB:.1f} GB and {word}"
    )
    if verdict.detail:
        summary += f": {verdict.detail}"
    return ColocatedResponse(
        gpu=gpu.ref,
        gpu_bytes=total,
        sharing=body.sharing,
        held_bytes=held_total,
        headroom_bytes=total - held_total,
        fits=verdict.fits,
        reason_detail=verdict.detail,
        workloads=ordered,
        assumptions=notes,
        summary=summary,
    )
