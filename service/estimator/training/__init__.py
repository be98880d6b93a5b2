"""The detailed fine-tuning estimator: peak GPU memory of one training step, and its fit.

- :mod:`.request`: the request and its checks;
- :mod:`.precision`, :mod:`.optimizers`, :mod:`.lora`, :mod:`.sharding`: what each setting
  holds;
- :mod:`.activations`: what each layer keeps for backward (coefficients in b·s and b·s²);
- :mod:`.loss`: what the logits and the cross entropy hold, per loss implementation;
- :mod:`.kbit`: peft's preparation of a quantized base (fp32 non-quantized tensors);
- :mod:`.state`: the static state of a step per stage (cached);
- :mod:`.phases`: the peak at a (batch, sequence) point, the largest of the step's phases;
- :mod:`.fit`: estimate, fit and inverse answers.
"""

from service.estimator.training.activations import ATTENTION, GRADIENT_CHECKPOINTING
from service.estimator.training.fit import BREAKDOWN_KEYS, estimate_finetune, fit_finetune
from service.estimator.training.kbit import KBIT_PREPARATIONS
from service.estimator.training.lora import LoraSpec
from service.estimator.training.loss import LOSS_IMPLEMENTATIONS
from service.estimator.training.optimizers import OPTIMIZERS
from service.estimator.training.precision import PRECISIONS
from service.estimator.training.request import METHODS, FinetuneRequest
from service.estimator.training.sharding import SHARDING_IMPLEMENTATIONS

__all__ = [
    "ATTENTION",
    "BREAKDOWN_KEYS",
    "GRADIENT_CHECKPOINTING",
    "KBIT_PREPARATIONS",
    "LOSS_IMPLEMENTATIONS",
    "METHODS",
    "OPTIMIZERS",
    "PRECISIONS",
    "SHARDING_IMPLEMENTATIONS",
    "FinetuneRequest",
    "LoraSpec",
    "estimate_finetune",
    "fit_finetune",
]
