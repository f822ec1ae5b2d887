"""`gearbox agent`: FlexHTTP's agent server (§3.3), built on the control plane (docs/control.md): the
same HTTPS service, store, bearer tokens, body limit and policy registry, with these routes added:

    POST /v1/flexhttp/probe        a measurement session: {"session", "port"} (client, agent, admin)
    GET  /v1/flexhttp/network      the caller's network features over its window t; 404 before any
    POST /v1/flexhttp/traces       trace entries {"records": [...]} with an Idempotency-Key (client, agent, admin)
    GET  /v1/flexhttp/pool         the pool's size (learner, admin)
    POST /v1/flexhttp/train        k-means labels, the global forest, pushed and activated (learner, admin)
    GET  /v1/flexhttp/classifier   the active global classifier's version and download URL (everyone)

The classifier is the registry's gear `flexhttp`: every training is a new version (a folder with the
forest, its sidecar, the training rows and the cluster centres), downloaded from the registry's own
`/v1/policies/flexhttp/versions/N/artifact` and rolled back with `gearbox control policy rollback`.

The configuration is the control plane's file with one more table:

```toml
[server]                 # as gearbox control's (docs/control.md)
listen = "127.0.0.1:8443"
cert = "cert.pem"
key = "key.pem"

[agent]
probe_listen = "127.0.0.1:4460"   # UDP and TCP probe port (port 0: any free one)
window_s = 300                    # a client's measurement window t
k = 0                             # k-means clusters; 0: one per 10 entries (labels.choose_k)
cap_per_client = 3                # entries one client weighs at most per (cluster, version)
pool_days = 30                    # entries older than this are not used for labels
retrain_every_s = 0               # 0: only on POST /v1/flexhttp/train
```
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from gearbox.control import policy as pol
from gearbox.control.app import Caller, bearer, create_app, read_batch
from gearbox.control.config import Config, ConfigError, read_toml
from gearbox.control.config import parse as parse_control
from gearbox.control.store import Store
from gearbox.flexhttp.features import FeatureError
from gearbox.flexhttp.pool import TracePool, validate
from gearbox.flexhttp.probe import Measurements, ProbeConfig, ProbeServer

GEAR = "flexhttp"
MAX_RECORDS = 100_000
MAX_ERRORS_LISTED = 100
log = logging.getLogger("gearbox.agent")


@dataclass(frozen=True)
class AgentConfig:
    probe_host: str = "127.0.0.1"
    probe_port: int = 4460
    probe: ProbeConfig = ProbeConfig()
    k: int = 0
    cap_per_client: float = 3.0
    pool_days: float = 30.0
    retrain_every_s: float = 0.0
    seed: int = 0


_AGENT_KEYS = {"probe_listen", "window_s", "k", "cap_per_client", "pool_days", "retrain_every_s", "seed"}


def load(path: Path) -> tuple[Config, AgentConfig]:
    return parse(read_toml(path), Path(path))


def parse(data: dict, path: Path | None) -> tuple[Config, AgentConfig]:
    where = str(path) if path else "<config>"
    data = dict(data)
    agent = data.pop("agent", {})
    config = parse_control(data, path)
    if not isinstance(agent, dict):
        raise ConfigError(f"{where}: [agent]: expected a table")
    bad = set(agent) - _AGENT_KEYS
    if bad:
        raise ConfigError(f"{where}: [agent].{sorted(bad)[0]}: unknown key (known: {', '.join(sorted(_AGENT_KEYS))})")
    a = AgentConfig()
    if "probe_listen" in agent:
        host, _, port = str(agent["probe_listen"]).rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ConfigError(f"{where}: [agent].probe_listen: expected HOST:PORT, found {agent['probe_listen']!r}")
        a = replace(a, probe_host=host.strip("[]"), probe_port=int(port))
    for key, positive in (
        ("window_s", True),
        ("cap_per_client", True),
        ("pool_days", True),
        ("retrain_every_s", False),
    ):
        if key in agent:
            v = agent[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (positive and v == 0):
                kind = "positive" if positive else "non-negative"
                raise ConfigError(f"{where}: [agent].{key}: expected a {kind} number, found {v!r}")
            if key == "window_s":
                a = replace(a, probe=replace(a.probe, window_s=float(v)))
            else:
                a = replace(a, **{key: float(v)})
    for key in ("k", "seed"):
        if key in agent:
            v = agent[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (key == "k" and v == 1):
                but = " other than 1" if key == "k" else ""
                raise ConfigError(f"{where}: [agent].{key}: expected a whole number >= 0{but}, found {v!r}")
            a = replace(a, **{key: v})
    return config, a


class Agent:
    """The state behind the agent's routes: the pool, the measurement windows, the probe server."""

    def __init__(self, config: Config, agent: AgentConfig, store: Store, service: Any) -> None:
        self.config, self.agent, self.store, self.service = config, agent, store, service
        self.pool = TracePool(store)
        self.measurements = Measurements(agent.probe)
        self.probe: ProbeServer | None = None
        self._train_lock = threading.Lock()
        self._stop = threading.Event()
        self._retrainer: threading.Thread | None = None
        self.last_train: dict | None = None

    def start(self) -> None:
        self.probe = ProbeServer(self.agent.probe_host, self.agent.probe_port, self.measurements).start()
        log.info("probe server on %s:%d (udp, tcp)", self.agent.probe_host, self.probe.port)
        if self.agent.retrain_every_s > 0:
            self._retrainer = threading.Thread(target=self._retrain_loop, name="flexhttp-retrain", daemon=True)
            self._retrainer.start()

    def stop(self) -> None:
        self._stop.set()
        if self.probe is not None:
            self.probe.stop()

    def _retrain_loop(self) -> None:
        seen = -1
        while not self._stop.wait(self.agent.retrain_every_s):
            n = self.pool.summary()["entries"]
            if n == seen:
                continue
            try:
                self.train("retrain")
                seen = n
            except (ValueError, pol.PolicyError) as e:
                log.warning("flexhttp retrain skipped: %s", e)

    def train(self, who: str, k: int | None = None) -> dict:
        """Labels the pool, trains the global forest, pushes it as the gear's next version and activates it."""
        from gearbox.flexhttp.forest import export
        from gearbox.flexhttp.labels import label

        with self._train_lock:
            since = time.time() * 1000.0 - self.agent.pool_days * 86_400_000.0
            e = self.pool.entries(since)
            n = len(e["version"])
            if n < 2:
                raise ValueError(
                    f"the pool has {n} entries in the last {self.agent.pool_days:g} days: nothing to train on"
                )
            lab = label(
                e["x"],
                e["version"],
                e["si_ms"],
                e["contributor"],
                k or self.agent.k or None,
                self.agent.cap_per_client,
                self.agent.seed,
            )
            with tempfile.TemporaryDirectory(prefix="flexhttp-train-") as tmp:
                summary = export(Path(tmp), e["x"], lab, self.agent.seed, note=f"{n} pool entries")
                data = pol.pack(Path(tmp))
            v = self.service.push(GEAR, data, None, who, f"{n} entries, k={lab.k}")
            self.service.activate(GEAR, v["version"], "global", who)
            self.last_train = {"version": v["version"], "sha256": v["sha256"], **summary, "entries": n}
            log.info("flexhttp: version %d from %d entries (k=%d)", v["version"], n, lab.k)
            return self.last_train


def create_agent_app(config: Config, agent: AgentConfig, store: Store) -> FastAPI:
    app = create_app(config, store)
    svc = app.state.service
    ag = Agent(config, agent, store, svc)
    app.state.agent = ag
    app.title = "gearbox FlexHTTP agent"
    app.router.on_startup.append(ag.start)
    app.router.on_shutdown.append(ag.stop)
    uploaders = bearer(svc, "client", "agent", "admin")
    everyone = bearer(svc, "edge", "client", "agent", "learner", "admin")
    learners = bearer(svc, "learner", "admin")

    @app.post("/v1/flexhttp/probe", summary="Start a measurement: a session for the probe port (UDP and TCP)")
    def probe(caller: Caller = uploaders) -> JSONResponse:
        if ag.probe is None:
            raise HTTPException(503, "the probe server is not running")
        return JSONResponse({"session": ag.measurements.new_session(caller.name), "port": ag.probe.port})

    @app.get("/v1/flexhttp/network", summary="The caller's network features over its measurement window")
    def network(caller: Caller = uploaders) -> JSONResponse:
        w = ag.measurements.window(caller.name)
        if w is None:
            raise HTTPException(404, f"no measurement of {caller.name} in the last {agent.probe.window_s:g} s")
        return JSONResponse(w)

    @app.post("/v1/flexhttp/traces", summary="Upload trace entries {records: [...]} with an Idempotency-Key")
    async def traces(request: Request, caller: Caller = uploaders) -> JSONResponse:
        key, records = await read_batch(request, MAX_RECORDS, noun="entries")
        rows, errors = [], []
        for i, rec in enumerate(records):
            try:
                rows.append(validate(rec, f"records[{i}]"))
            except FeatureError as e:
                field, _, reason = str(e).partition(": ")
                errors.append({"index": i, "field": field, "reason": reason})
        response: dict = {"stored": len(rows), "rejected": len(errors)}
        if errors:
            response["errors"] = errors[:MAX_ERRORS_LISTED]
            response["detail"] = (
                f"{len(errors)} of {len(records)} entries rejected; {errors[0]['field']}: {errors[0]['reason']}"
            )
        address = request.client.host if request.client else None
        first = await run_in_threadpool(ag.pool.add, caller.name, address, key, rows, response)
        status = 400 if errors else 200
        if first is not None:
            return JSONResponse({**first, "duplicate": True}, status_code=400 if first.get("rejected") else 200)
        return JSONResponse({**response, "duplicate": False}, status_code=status)

    @app.get("/v1/flexhttp/pool", summary="The global trace pool's size (learner, admin)")
    def pool(caller: Caller = learners) -> JSONResponse:
        return JSONResponse({**ag.pool.summary(), "last_train": ag.last_train})

    @app.post("/v1/flexhttp/train", summary="Label the pool and train, push and activate the global forest")
    async def train(request: Request, caller: Caller = learners) -> JSONResponse:
        raw = await request.body()
        body = orjson.loads(raw) if raw else {}
        k = body.get("k") if isinstance(body, dict) else None
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 2):
            raise HTTPException(400, "k: expected a whole number >= 2")
        try:
            return JSONResponse(await run_in_threadpool(ag.train, caller.name, k), status_code=201)
        except ValueError as e:
            raise HTTPException(409, str(e)) from e

    @app.get("/v1/flexhttp/classifier", summary="The active global classifier: version and download URL")
    def classifier(caller: Caller = everyone) -> JSONResponse:
        version = store.active().get((GEAR, "global"))
        if version is None:
            raise HTTPException(404, "no global classifier yet (POST /v1/flexhttp/train once the pool has entries)")
        v = store.version(GEAR, version)
        return JSONResponse(
            {
                "version": version,
                "sha256": v["sha256"],
                "size": v["size"],
                "note": v["note"],
                "url": f"/v1/policies/{GEAR}/versions/{version}/artifact",
            }
        )

    return app


def serve(path: Path) -> None:
    from gearbox.control.server import serve as serve_control

    config, agent = load(path)
    serve_control(config, lambda c, s: create_agent_app(c, agent, s))
