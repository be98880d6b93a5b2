"""One model family as four records, one per concern, as transformers splits a model's
``configuration_X`` from its ``modeling_X``.

A :class:`Family` is its name and

- ``schema`` (:class:`~.config_schema.ConfigSchema`): what its config's keys are called and
  default to;
- ``modeling`` (:class:`~.modeling_traits.Modeling`): what its modeling code builds from them;
- ``targets`` (:class:`~.adapter_targets.AdapterTargets`): the module names adapters and
  quantizers match;
- ``llamacpp`` (:class:`~.llamacpp_names.LlamaCppNames`): what llama.cpp makes of it.

A family that differs from another says only how: :meth:`Family.derive` takes the changed
fields by name and puts each in its record (as transformers' ``modular_*.py`` files do).
The families themselves live in :mod:`.families`, one module per family.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.llamacpp_names import LlamaCppNames
from service.estimator.model.modeling_traits import Modeling

__all__ = ["Family"]

# Record of each field a derived family may change (field names are unique across records).
_PARTS = {
    "schema": ConfigSchema,
    "modeling": Modeling,
    "targets": AdapterTargets,
    "llamacpp": LlamaCppNames,
}
_FIELD_PART = {f.name: part for part, cls in _PARTS.items() for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class Family:
    """One transformers family: its name and its four records (module docstring)."""

    name: str  # the family as people name it (gemma3 for both gemma3 and gemma3_text)
    schema: ConfigSchema = field(default_factory=ConfigSchema)
    modeling: Modeling = field(default_factory=Modeling)
    targets: AdapterTargets = field(default_factory=AdapterTargets)
    llamacpp: LlamaCppNames = field(default_factory=LlamaCppNames)

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def model_type(self) -> str:
        """The config's model_type for this family."""
        return self.schema.model_type or self.name

    def derive(self, name: str, **changes: Any) -> Family:
        """This family under ``name`` with ``changes`` (fields of any record, by name)."""
        per_part: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            part = _FIELD_PART.get(key)
            if part is None:
                raise TypeError(f"no family record has a field {key!r}")
            per_part.setdefault(part, {})[key] = value
        # A derived family has its own model_type unless it names one.
        schema_changes = {"model_type": "", **per_part.pop("schema", {})}
        parts = {p: dataclasses.replace(getattr(self, p), **kw) for p, kw in per_part.items()}
        schema = dataclasses.replace(self.schema, **schema_changes)
        return dataclasses.replace(self, name=name, schema=schema, **parts)
