"""Request bodies parsed on the estimate pool, not on the event loop.

A posted config may be a megabyte of JSON: parsing and validating it takes milliseconds, and
64 clients sending such bodies kept /healthz waiting behind the parsing on the loop (issue
18, `make soak`'s heavy phase). So the estimate routes read the raw bytes (I/O, on the loop)
and parse them where the estimate runs (service/api/concurrency.py); a request waiting for a
thread holds its bytes, not the much larger parsed objects. Errors are the ones FastAPI would
raise for a declared body, so the problem documents are the same. The routes declare their
body schemas with :func:`documented_body`, and :func:`add_body_schemas` puts the models in the
OpenAPI components, as FastAPI would for a body parameter.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

__all__ = ["add_body_schemas", "documented_body", "parse_body"]

M = TypeVar("M", bound=BaseModel)

_REF = "#/components/schemas/{model}"


def parse_body(raw: bytes, model: type[M]) -> M:
    """``raw`` validated as ``model``; RequestValidationError (locations under ``body``) if
    it is not valid JSON or not a valid ``model``."""
    if not raw:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        for error in errors:
            error["loc"] = ("body", *error["loc"])
        raise RequestValidationError(errors) from None


def documented_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body is ``model``, read with :func:`parse_body`."""
    ref = _REF.format(model=model.__name__)
    return {
        "requestBody": {
            "content": {"application/json": {"schema": {"$ref": ref}}},
            "required": True,
        }
    }


def add_body_schemas(app: FastAPI, models: tuple[type[BaseModel], ...]) -> None:
    """Wrap ``app.openapi`` so the components hold ``models`` and what they refer to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        _, definitions = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
        components = document.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in definitions.get("$defs", {}).items():
            components.setdefault(name, schema)
        app.openapi_schema = dict(document, components=dict(document["components"]))
        app.openapi_schema["components"]["schemas"] = dict(sorted(components.items()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
