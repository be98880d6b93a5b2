"""Shared pieces of the request and response schemas: strict base models and bounded types."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# Requests: unknown fields are errors (a typo must not silently become a default), and JSON
# types are strict: `true` is not a number and `"7"` is not an integer.
STRICT_REQUEST = ConfigDict(extra="forbid", strict=True, frozen=True)


class RequestModel(BaseModel):
    model_config = STRICT_REQUEST


class ResponseModel(BaseModel):
    model_config = ConfigDict(frozen=True)


Bytes = Annotated[int, Field(description="A memory figure in bytes.")]

# Deepest nesting a posted config.json may have: real ones are 3 levels deep.
MAX_CONFIG_DEPTH = 8
# Largest posted config.json, in keys over all levels (real ones have about 50 to 300).
MAX_CONFIG_KEYS = 5000


def json_depth_and_size(value: Any, depth: int = 1) -> tuple[int, int]:
    """Nesting depth and total key/item count of a parsed JSON value (iterative, bounded)."""
    max_depth, count = depth, 0
    stack = [(value, depth)]
    while stack:
        node, level = stack.pop()
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        for child in children:
            count += 1
            if isinstance(child, dict | list):
                max_depth = max(max_depth, level + 1)
                if max_depth > MAX_CONFIG_DEPTH or count > MAX_CONFIG_KEYS:
                    return max_depth, count
                stack.append((child, level + 1))
    return max_depth, count
