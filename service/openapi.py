"""`python -m service.openapi`: print the app's OpenAPI document (committed as openapi/)."""

from __future__ import annotations

import json
import sys

from service.app import create_app
from service.settings import Settings


def render() -> str:
    app = create_app(Settings())
    return json.dumps(app.openapi(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
