"""Serving engines, one module each, behind one protocol (:class:`.base.Engine`).

Adding an engine is a new module with an :class:`~.base.Engine` subclass and a line in
``_ENGINES`` below (docs/CONTRIBUTING.md); the API's ``engine`` enum and ``engine_options``
schema are built from this registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from service.estimator.engines.base import Engine, EngineContext, EngineSettings, Option
from service.estimator.engines.generic import GenericEngine
from service.estimator.engines.llamacpp import LlamaCppEngine
from service.estimator.engines.sglang import SglangEngine
from service.estimator.engines.transformers import TransformersEngine
from service.estimator.engines.vllm import VllmEngine
from service.estimator.errors import InvalidRequest

__all__ = [
    "ENGINES",
    "REGISTRY",
    "Engine",
    "EngineContext",
    "EngineSettings",
    "Option",
    "all_options",
    "get_engine",
]

_ENGINES: tuple[Engine, ...] = (
    GenericEngine(),
    TransformersEngine(),
    VllmEngine(),
    SglangEngine(),
    LlamaCppEngine(),
)

REGISTRY: Mapping[str, Engine] = MappingProxyType({e.name: e for e in _ENGINES})

#: Engine names a request may give (the API's enum is built from this tuple).
ENGINES: tuple[str, ...] = tuple(REGISTRY)


def get_engine(name: str) -> Engine:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InvalidRequest(
            f"unknown engine {name[:40]!r}; allowed: {', '.join(ENGINES)}", field="engine"
        ) from None


def all_options() -> Mapping[str, tuple[Option, tuple[str, ...]]]:
    """Every option name (aliases included) with its spec and the engines that accept it.
    Engines sharing a name must agree on its type."""
    out: dict[str, tuple[Option, tuple[str, ...]]] = {}
    for engine in _ENGINES:
        for name, option in engine.option_table().items():
            if name in out:
                known, engines = out[name]
                if known.kind is not option.kind:
                    raise TypeError(f"engine option {name} has two types")
                out[name] = (known, (*engines, engine.name))
            else:
                out[name] = (option, (engine.name,))
    return MappingProxyType(out)
