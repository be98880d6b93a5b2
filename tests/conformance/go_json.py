"""Go structs as Go's ``encoding/json`` writes and reads them, built from the upstream sources.

`GoTypes.load` parses the struct and named-type declarations of the ``.go`` files copied under
``upstream/`` (sources in its README): each field's Go type and JSON tag. From them:

- `GoTypes.encode` writes a value as the Go encoder would (pkg.go.dev/encoding/json, Marshal):
  a field's key is its tag name, else its Go name (extender/v1 has no tags); ``omitempty``
  drops a nil pointer, an empty string, false, 0 and an empty slice or map, but never a struct;
  a field without it is always written, a nil pointer, slice or map as ``null``; an
  ``,inline`` field is flattened into its parent.
- `GoTypes.check` decodes an answer strictly by the same rules: a key no field names is
  refused (what ``json.Decoder.DisallowUnknownFields`` refuses), a field the encoder always
  writes must be present, every value must have its field's type (integers that are not
  booleans, within their Go range).

Types from other packages are named in `EXTERNAL`: Kubernetes objects (``v1.Pod``,
``v1.NodeList``, ``metav1.Status``, ``authenticationv1.UserInfo``) are checked against the
official Python client's models, generated from the API server's published OpenAPI document
(their ``attribute_map`` and ``openapi_types``; required fields by the models' own validation).
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

UPSTREAM = Path(__file__).with_name("upstream")

_STRUCT = re.compile(r"^type (\w+) struct \{$(.*?)^\}$", re.MULTILINE | re.DOTALL)
_NAMED = re.compile(r"^type (\w+) ((?:\[\]|map\[string\]|\*)*[\w.]+)$", re.MULTILINE)
_FIELD = re.compile(r"^\s*(\w+)\s+([\w.\[\]*]+)(?:\s+`([^`]*)`)?\s*$")
_EMBEDDED = re.compile(r"^\s*([\w.]+)\s+`json:\",inline\"`")
_CONST = re.compile(r"^\s*(\w+)\s+int64\s*=\s*(-?\d+)\s*$", re.MULTILINE)
_JSON_TAG = re.compile(r'json:"([^"]*)"')
_INT_RANGES = {"int64": 63, "int32": 31, "int": 63}

# Types of other packages, by what checks them: a struct parsed here, a client model, a JSON
# value of any shape (runtime.RawExtension holds an embedded object), or a Go basic type.
EXTERNAL: Mapping[str, tuple[str, str]] = {
    "types.UID": ("basic", "string"),
    "runtime.RawExtension": ("any", ""),
    "metav1.TypeMeta": ("struct", "TypeMeta"),
    "metav1.GroupVersionKind": ("struct", "GroupVersionKind"),
    "metav1.GroupVersionResource": ("struct", "GroupVersionResource"),
    "metav1.Status": ("model", "V1Status"),
    "authenticationv1.UserInfo": ("model", "V1UserInfo"),
    "v1.Pod": ("model", "V1Pod"),
    "v1.NodeList": ("model", "V1NodeList"),
}


@dataclass(frozen=True)
class Field:
    go_name: str
    go_type: str
    key: str
    """The JSON key: the tag's name, else the Go field name."""
    omitempty: bool
    inline: bool = False


class GoTypes:
    """The structs, named types and int64 constants of some Go files."""

    def __init__(self) -> None:
        self.structs: dict[str, list[Field]] = {}
        self.named: dict[str, str] = {}
        self.consts: dict[str, int] = {}

    @classmethod
    def load(cls, *names: str) -> GoTypes:
        types = cls()
        for name in names:
            source = (UPSTREAM / name).read_text()
            # Comments carry backquotes and braces of their own: drop them first.
            code = "\n".join(line.split("//", 1)[0].rstrip() for line in source.splitlines())
            for match in _STRUCT.finditer(code):
                types.structs[match.group(1)] = [
                    field for line in match.group(2).splitlines() if (field := _field(line))
                ]
            for match in _NAMED.finditer(code):
                types.named[match.group(1)] = match.group(2)
            types.consts.update({m.group(1): int(m.group(2)) for m in _CONST.finditer(code)})
        return types

    # ------------------------------------------------------------------------ encoding

    def encode(self, struct: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (by Go field name; JSON-ready leaves) as the Go encoder writes them."""
        out: dict[str, Any] = {}
        for field in self.structs[struct]:
            if field.inline:
                _, inner = EXTERNAL.get(field.go_type, ("struct", field.go_type))
                out.update(self.encode(inner, values.get(field.go_name) or {}))
                continue
            value = values.get(field.go_name)
            if field.omitempty and self._omitted(field.go_type, value):
                continue
            out[field.key] = value
        return out

    def _omitted(self, go_type: str, value: Any) -> bool:
        """What ``omitempty`` drops: a nil pointer (a pointer to false is written), an empty
        value of a basic type, slice or map; never a struct."""
        if go_type.startswith("*"):
            return value is None
        if go_type in self.structs or EXTERNAL.get(go_type, ("", ""))[0] in (
            "struct",
            "model",
            "any",
        ):
            return False
        return _empty(value)

    # ------------------------------------------------------------------------ decoding

    def check(self, value: Any, go_type: str, path: str = "$") -> list[str]:
        """Everything wrong with ``value`` as a ``go_type`` under the strict decoding rules."""
        errors: list[str] = []
        self._check(value, go_type, path, errors)
        return errors

    def _check(self, value: Any, go_type: str, path: str, errors: list[str]) -> None:
        if go_type.startswith("*"):
            if value is not None:
                self._check(value, go_type[1:], path, errors)
            return
        if go_type == "[]byte":
            if not isinstance(value, str) or not _is_base64(value):
                errors.append(f"{path}: expected base64 bytes, got {value!r:.60}")
            return
        if go_type.startswith("[]"):
            if value is None:
                return
            if not isinstance(value, list):
                errors.append(f"{path}: expected an array, got {type(value).__name__}")
                return
            for index, item in enumerate(value):
                self._check(item, go_type[2:], f"{path}[{index}]", errors)
            return
        if go_type.startswith("map[string]"):
            if value is None:
                return
            if not isinstance(value, dict):
                errors.append(f"{path}: expected an object, got {type(value).__name__}")
                return
            for key, item in value.items():
                self._check(item, go_type[len("map[string]") :], f"{path}[{key!r}]", errors)
            return
        if go_type in self.named:
            self._check(value, self.named[go_type], path, errors)
            return
        if go_type in self.structs:
            self._check_struct(value, go_type, path, errors)
            return
        if go_type in EXTERNAL:
            kind, target = EXTERNAL[go_type]
            if kind == "basic":
                self._check(value, target, path, errors)
            elif kind == "struct":
                self._check_struct(value, target, path, errors)
            elif kind == "model":
                errors.extend(check_model(value, target, path))
            return
        _check_basic(value, go_type, path, errors)

    def fields(self, struct: str) -> list[Field]:
        """The struct's fields with ``,inline`` ones flattened in."""
        out: list[Field] = []
        for field in self.structs[struct]:
            if field.inline:
                _, inner = EXTERNAL.get(field.go_type, ("struct", field.go_type))
                out.extend(self.fields(inner))
            else:
                out.append(field)
        return out

    def _check_struct(self, value: Any, struct: str, path: str, errors: list[str]) -> None:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a {struct} object, got {type(value).__name__}")
            return
        fields = {field.key: field for field in self.fields(struct)}
        for key in value:
            if key not in fields:
                errors.append(f"{path}.{key}: unknown field of {struct}")
        for key, field in fields.items():
            if key not in value:
                if not field.omitempty:
                    errors.append(f"{path}.{key}: missing (the Go encoder always writes it)")
                continue
            self._check(value[key], field.go_type, f"{path}.{key}", errors)


def _field(line: str) -> Field | None:
    embedded = _EMBEDDED.match(line)
    if embedded:
        # An embedded field is named by its type, without the package.
        go_type = embedded.group(1)
        return Field(go_type.rsplit(".", 1)[-1], go_type, "", omitempty=False, inline=True)
    match = _FIELD.match(line)
    if match is None:
        return None
    name, go_type, tag = match.groups()
    key, omitempty = name, False
    found = _JSON_TAG.search(tag or "")
    if found:
        parts = found.group(1).split(",")
        key = parts[0] or name
        omitempty = "omitempty" in parts[1:]
    return Field(name, go_type, key, omitempty)


def _empty(value: Any) -> bool:
    return value is None or value == "" or value is False or value == 0 or value in ([], {})


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _check_basic(value: Any, go_type: str, path: str, errors: list[str]) -> None:
    if go_type == "string":
        ok = isinstance(value, str)
    elif go_type == "bool":
        ok = isinstance(value, bool)
    elif go_type in _INT_RANGES:
        bits = _INT_RANGES[go_type]
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and -(2**bits) <= value < 2**bits
    elif go_type in ("float64", "float32"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        errors.append(f"{path}: Go type {go_type} is not known to this checker")
        return
    if not ok:
        errors.append(f"{path}: expected {go_type}, got {value!r:.60}")


# ---------------------------------------------------------------------------- client models

# Client releases write container types as list[T] / dict(str, T) or List[T] / Dict[str, T].
_MODEL_TYPE = re.compile(
    r"^(?:[Ll]ist\[(?P<item>.+)\]|dict\(str, (?P<value>.+)\)|Dict\[str, (?P<dict>.+)\])$"
)
_OPENAPI_BASIC = {"str": str, "int": int, "bool": bool, "float": (int, float)}


def check_model(value: Any, model: str, path: str = "$") -> list[str]:
    """Everything wrong with ``value`` as the JSON of client model ``model`` (e.g. ``V1Pod``):
    keys the model does not have, values of the wrong type, required fields missing."""
    errors: list[str] = []
    _check_model(value, model, path, errors)
    if not errors:
        try:
            _deserialize(value, model)
        except (ValueError, TypeError) as exc:
            errors.append(f"{path}: {model}: {exc}")
    return errors


def _check_model(value: Any, model: str, path: str, errors: list[str]) -> None:
    cls = getattr(k8s, model)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {model} object, got {type(value).__name__}")
        return
    by_key = {json_key: py for py, json_key in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_key:
            errors.append(f"{path}.{key}: unknown field of {model}")
            continue
        _check_openapi(item, cls.openapi_types[by_key[key]], f"{path}.{key}", errors)


def _check_openapi(value: Any, openapi_type: str, path: str, errors: list[str]) -> None:
    if value is None or openapi_type == "object":
        return
    shape = _MODEL_TYPE.match(openapi_type)
    if shape and shape.group("item"):
        if not isinstance(value, list):
            errors.append(f"{path}: expected an array")
            return
        for index, item in enumerate(value):
            _check_openapi(item, shape.group("item"), f"{path}[{index}]", errors)
        return
    if shape and (shape.group("value") or shape.group("dict")):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object")
            return
        for key, item in value.items():
            item_type = shape.group("value") or shape.group("dict")
            _check_openapi(item, item_type, f"{path}[{key!r}]", errors)
        return
    if openapi_type in ("datetime", "date"):
        if not isinstance(value, str):
            errors.append(f"{path}: expected a timestamp string")
        return
    if openapi_type in _OPENAPI_BASIC:
        expected = _OPENAPI_BASIC[openapi_type]
        wrong_bool = isinstance(value, bool) and openapi_type != "bool"
        if wrong_bool or not isinstance(value, expected):
            errors.append(f"{path}: expected {openapi_type}, got {value!r:.60}")
        return
    _check_model(value, openapi_type, path, errors)


class _Response:
    def __init__(self, data: str) -> None:
        self.data = data


def _deserialize(value: Any, model: str) -> Any:
    """The client's own deserialization, which runs the models' required-field checks (its
    signature changed across the client releases the test extras allow)."""
    text = json.dumps(value)
    api = k8s.ApiClient()
    if "content_type" in inspect.signature(api.deserialize).parameters:
        return api.deserialize(text, model, "application/json")
    return api.deserialize(_Response(text), model)
