"""A model's shape as data: read from a Hugging Face ``config.json``, read by every formula.

- :mod:`.shapes`: value objects (modules with their roles, MoE / MLA / vision specs);
- :mod:`.families`: the family table (traits as data);
- :mod:`.config_reader`: typed, bounded config reads with one alias table;
- :mod:`.quantization`: what a ``quantization_config`` says;
- :mod:`.architecture`: the :class:`Architecture` every formula reads;
- :mod:`.build`: building it (:func:`read_config`);
- :mod:`.inventory` / :mod:`.vision`: its tensors; :mod:`.parameters`: their counts.
"""

from service.estimator.model.architecture import Architecture
from service.estimator.model.build import read_config
from service.estimator.model.families import SUPPORTED_MODEL_TYPES
from service.estimator.model.family_traits import Family
from service.estimator.model.parameters import ParameterCounts, count_parameters
from service.estimator.model.quantization import QuantizationSpec
from service.estimator.model.shapes import (
    COMPONENTS,
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    LinearModule,
    MlaSpec,
    MoeSpec,
    ParameterGroup,
    Reads,
    Shard,
    VisionSpec,
)

__all__ = [
    "COMPONENTS",
    "FULL_ATTENTION",
    "SLIDING_ATTENTION",
    "SUPPORTED_MODEL_TYPES",
    "Architecture",
    "Family",
    "LinearModule",
    "MlaSpec",
    "MoeSpec",
    "ParameterCounts",
    "ParameterGroup",
    "QuantizationSpec",
    "Reads",
    "Shard",
    "VisionSpec",
    "count_parameters",
    "read_config",
]
