"""`python -m service`: run the API under uvicorn with the settings from the environment."""

from __future__ import annotations

import uvicorn

from service.settings import get_settings


def main() -> None:
    settings = get_settings()
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=1,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        timeout_keep_alive=settings.timeout_keep_alive_s,
        timeout_graceful_shutdown=settings.graceful_shutdown_s,
    )


if __name__ == "__main__":
    main()
