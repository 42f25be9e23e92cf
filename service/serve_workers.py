"""``gpu-ledger serve --workers N``: N uvicorn worker processes serving one app, on PostgreSQL.

uvicorn's supervisor starts each worker as a fresh interpreter (``spawn``) and builds the app from
an import string, so the settings ``serve`` resolved (config file, environment, ``--demo``, the
``[auth]`` it chose for the address) are handed over in a file only this user can read, in a
private temporary directory whose path is in :data:`SETTINGS_FILE_ENV`; it is removed when
``serve`` exits. Every worker answers requests; the connectors' scheduler runs in the one holding
the database's scheduler lock (:mod:`service.scheduler_lease`). Each worker has its own answer
cache; the ledger version in the database keeps them all current (:mod:`service.api.answer_cache`).

SQLite is refused: one writer at a time and a file per host make several processes pointless.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from service.settings import Settings

#: Names the file holding the pickled :class:`Settings` for the worker processes.
SETTINGS_FILE_ENV = "GPU_LEDGER_SERVE_SETTINGS_FILE"
#: uvicorn's import string of the worker app factory.
APP_FACTORY = "service.serve_workers:app_from_handoff"


def refusal(settings: Settings, workers: int) -> str | None:
    """Why ``serve --workers workers`` cannot run on these settings' database (None: it can)."""
    if workers <= 1:
        return None
    backend = make_url(settings.database_url).get_backend_name()
    if backend == "postgresql":
        return None
    return (
        f"--workers {workers} needs PostgreSQL: {settings.database_url_masked} is {backend}, which "
        "takes one writer at a time and cannot be shared by worker processes. Serve it with "
        "--workers 1 (the default), or point database_url at PostgreSQL."
    )


def app_from_handoff() -> Starlette:
    """The app of one worker process, from the settings ``serve`` handed over (uvicorn's factory)."""
    from service.app import create_app
    from service.logging import configure_logging

    path = os.environ.get(SETTINGS_FILE_ENV)
    if not path:
        raise RuntimeError(f"{SETTINGS_FILE_ENV} is not set: this factory is for `serve --workers`")
    # The file was written by the parent `serve`, mode 0600 in its private directory.
    settings = pickle.loads(Path(path).read_bytes())  # noqa: S301
    if not isinstance(settings, Settings):
        raise RuntimeError(f"{path} does not hold GPU Ledger settings")
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings, run_scheduler=True)


def serve_workers(settings: Settings, host: str, port: int, workers: int) -> None:
    """Run ``workers`` processes of the app under uvicorn's supervisor until it is stopped."""
    import uvicorn

    with tempfile.TemporaryDirectory(prefix="gpu-ledger-serve-") as directory:  # mode 0700
        path = Path(directory) / "settings.pickle"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            pickle.dump(settings, out)
        os.environ[SETTINGS_FILE_ENV] = str(path)
        try:
            # log_config=None: keep our structlog setup instead of uvicorn's own.
            uvicorn.run(
                APP_FACTORY,
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_config=None,
                lifespan="on",
            )
        finally:
            os.environ.pop(SETTINGS_FILE_ENV, None)
