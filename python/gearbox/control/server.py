"""`gearbox control serve`: the API over HTTPS with uvicorn, plus the background work: peers seen
written to the store, the embedded store's small Parquet files merged, and the scheduled
learners ([jobs])."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gearbox.control.config import Config, ConfigError
from gearbox.control.store import Store, open_store


class Background:
    """One thread: every `flush_interval_s`, peers seen to the store and the store's flush
    (compaction); jobs run in their own thread (jobs.Scheduler)."""

    def __init__(self, config: Config, store: Store, service: object) -> None:
        self.config, self.store, self.service = config, store, service
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-flush", daemon=True)
        from gearbox.control.jobs import Scheduler

        self.scheduler = Scheduler(config, store, service)

    def start(self) -> None:
        self._thread.start()
        self.scheduler.start()

    def _run(self) -> None:
        while not self._stop.wait(self.config.flush_interval_s):
            self.tick()

    def tick(self) -> None:
        try:
            self.service.write_seen()
            self.store.flush()
        except Exception as e:  # noqa: BLE001 - a failed pass is retried on the next one
            print(f"gearbox control: background pass failed: {e}", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self.scheduler.stop()
        self._thread.join(timeout=30)
        self.tick()


def serve(config: Config, make_app: Callable[[Config, Store], Any] | None = None) -> None:
    """Runs until stopped. `make_app(config, store)` builds the ASGI app (default the control plane's;
    the FlexHTTP agent passes its own, which is the control plane's with more routes)."""
    import uvicorn

    from gearbox.control.app import create_app

    if config.cert is None or config.key is None:
        raise ConfigError(
            f"{config.path}: [server].cert and .key are required (HTTPS only); make them with "
            "`gearbox cert --name HOST --cert cert.pem --key key.pem`"
        )
    for p in (config.cert, config.key):
        if not Path(p).is_file():
            raise ConfigError(f"{config.path}: {p}: no such file (make it with `gearbox cert`)")
    store = open_store(config.store, config.base)
    app = (make_app or create_app)(config, store)
    bg = Background(config, store, app.state.service)
    bg.start()
    try:
        uvicorn.run(
            app,
            host=config.host,
            port=config.port,
            ssl_certfile=str(config.cert),
            ssl_keyfile=str(config.key),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    finally:
        bg.stop()
        store.close()
