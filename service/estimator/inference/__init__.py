"""The detailed inference estimator: memory to serve a model, per GPU and in total, per engine.

- :mod:`.request`: the request and its checks;
- :mod:`.setup`: what a model, format, engine and layout hold before any request (cached);
- :mod:`.evaluate`: bytes at a workload, by component, and the engine's start-up figures;
- :mod:`.fit`: the fit on a GPU type and count, and the inverse answers.
"""

from service.estimator.inference.evaluate import StageFigures, estimate_inference, stage_figures
from service.estimator.inference.fit import fit_inference
from service.estimator.inference.request import MAX_TOKENS, InferenceRequest

__all__ = [
    "MAX_TOKENS",
    "InferenceRequest",
    "StageFigures",
    "estimate_inference",
    "fit_inference",
    "stage_figures",
]
