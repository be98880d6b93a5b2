"""`python -m service`: run the API under uvicorn with the settings from the environment
(service/api/server.py says how)."""

from __future__ import annotations

from service.api.server import run
from service.app import create_app
from service.settings import get_settings


def main() -> None:
    run(get_settings(), create_app)


if __name__ == "__main__":
    main()
