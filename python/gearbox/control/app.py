"""The control plane's HTTP API (FastAPI), docs/control.md "API".

Every `/v1` route names the roles that may call it; a request without a known bearer token gets
401, a known token of another role 403. Bodies larger than `max_body_bytes` get 413 before they
are read whole. Telemetry batches carry an `Idempotency-Key`; a batch's good records are stored
and its bad ones rejected, each naming its field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from gearbox.control import policy as pol
from gearbox.control.config import Config
from gearbox.control.schema import validate
from gearbox.control.store import NAME_RE, ROLES, Store, now_ms, telemetry_row
from gearbox.control.tokens import hash_token

MAX_BATCH_RECORDS = 100_000
MAX_ERRORS_LISTED = 100
ACTIVE_CACHE_S = 1.0

log = logging.getLogger("gearbox.control")


@dataclass(frozen=True)
class Caller:
    name: str
    role: str


class BodyLimit:
    """ASGI middleware: 413 for a request whose body (declared or streamed) exceeds the limit."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                await self._reject(send, int(v))
                return
        seen = 0
        started = False

        async def counted_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(seen)
            return message

        async def watched_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except _TooLarge as e:
            if not started:
                await self._reject(send, e.size)

    async def _reject(self, send: Any, size: int) -> None:
        log.warning("413: a request body of %d bytes exceeds the limit of %d", size, self.limit)
        body = json.dumps({"detail": f"request body of {size} bytes exceeds the limit of {self.limit}"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


class Service:
    """The state behind the routes: the store, caches, and the buffered record of peers seen."""

    def __init__(self, config: Config, store: Store) -> None:
        self.config, self.store = config, store
        self._tokens: dict[str, Caller] = {}
        self._seen: dict[str, tuple[str, str, str | None, int, str | None]] = {}
        self._seen_lock = threading.Lock()
        self._active_cache: dict[str, tuple[str, bytes, float]] = {}
        self._active_lock = threading.Lock()
        self.group_of: dict[str, list[str]] = {}
        for group, members in config.groups.items():
            for m in members:
                self.group_of.setdefault(m, []).append(group)

    def caller(self, token: str) -> Caller | None:
        h = hash_token(token)
        c = self._tokens.get(h)
        if c is None:
            found = self.store.token(h)
            if found is None:
                return None
            c = self._tokens[h] = Caller(*found)
        return c

    def saw(self, caller: Caller, address: str | None, policies: str | None = None) -> None:
        with self._seen_lock:
            self._seen[caller.name] = (caller.name, caller.role, address, int(time.time() * 1000), policies)

    def write_seen(self) -> None:
        with self._seen_lock:
            seen, self._seen = list(self._seen.values()), {}
        if seen:
            self.store.touch_peers(seen)

    def invalidate_active(self) -> None:
        with self._active_lock:
            self._active_cache.clear()

    def active_for(self, name: str) -> tuple[str, bytes]:
        """The policies a peer should run: per gear, its group's activation if it has one, else
        the global one. Returns (ETag, JSON body); cached until the next activation here, or for
        `ACTIVE_CACHE_S`."""
        groups = self.group_of.get(name, [])
        key = ",".join(groups)
        now = time.monotonic()
        with self._active_lock:
            hit = self._active_cache.get(key)
        if hit and hit[2] > now:
            return hit[0], hit[1]
        active = self.store.active()
        out: dict[str, dict] = {}
        gears = sorted({g for g, _ in active})
        for gear in gears:
            scope = next((s for s in groups if (gear, s) in active), "global")
            if (gear, scope) not in active:
                continue
            v = self.store.version(gear, active[(gear, scope)])
            out[gear] = {
                "version": v["version"],
                "sha256": v["sha256"],
                "size": v["size"],
                "scope": scope,
                "url": f"/v1/policies/{gear}/versions/{v['version']}/artifact",
            }
        body = json.dumps(
            {"policies": out, "poll_interval_s": self.config.poll_interval_s}, sort_keys=True, separators=(",", ":")
        ).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        with self._active_lock:
            # Re-read at most once a second: another instance sharing the store may activate.
            self._active_cache[key] = (etag, body, now + ACTIVE_CACHE_S)
        return etag, body

    def push(self, gear: str, data: bytes, stated: str | None, who: str, note: str | None) -> dict:
        if not NAME_RE.match(gear):
            raise pol.PolicyError(f"gear {gear!r}: letters, digits and _.- only")
        art = pol.check(data, stated)
        self.store.put_blob(art.sha256, data)
        version = self.store.add_version(gear, art.sha256, len(data), who, art.training_digest, art.manifest(), note)
        return self.store.version(gear, version)

    def activate(self, gear: str, version: int, scope: str, who: str, action: str = "activate") -> dict:
        if scope != "global" and scope not in self.config.groups:
            raise HTTPException(400, f"scope: {scope!r} is neither 'global' nor a group of the config's [groups]")
        if self.store.version(gear, version) is None:
            raise HTTPException(404, f"{gear} has no version {version}")
        self.store.activate(gear, scope, version, who, action)
        self.invalidate_active()
        return {"gear": gear, "scope": scope, "version": version, "action": action}

    def rollback(self, gear: str, scope: str, to: int | None, who: str) -> dict:
        """To `to`, or to the version active before the current one in this scope."""
        if to is None:
            history = [a["version"] for a in self.store.activations(gear) if a["scope"] == scope]
            if not history:
                raise HTTPException(409, f"{gear} has nothing active in scope {scope!r} to roll back")
            current = history[-1]
            earlier = [v for v in history[:-1] if v != current]
            if not earlier:
                raise HTTPException(409, f"{gear} in scope {scope!r} has no earlier version than {current}")
            to = earlier[-1]
        return self.activate(gear, to, scope, who, action="rollback")

    def dashboard(self) -> dict:
        from gearbox.stats import percentile

        now = time.time() * 1000
        since = now - 3600_000
        series: dict[str, dict[int, list[float]]] = {}
        for t, decision, rct in self.store.client_rct(since):
            gear = gear_of_decision(decision)
            series.setdefault(gear, {}).setdefault(int((t - since) // 60_000), []).append(rct)
        rct = {
            g: [{"minute": m, "median_ms": percentile(v, 50), "n": len(v)} for m, v in sorted(by_minute.items())]
            for g, by_minute in sorted(series.items())
        }
        active = self.store.active()
        return {
            "now_ms": now,
            "peers": self.store.peers(),
            "active": [{"gear": g, "scope": s, "version": v} for (g, s), v in sorted(active.items())],
            "versions": self.store.versions(),
            "activations": self.store.activations(),
            "rct_last_hour": rct,
            "records": self.store.count_records(),
            "jobs": [{k: r[k] for k in r if k != "log"} for r in self.store.runs()[-50:]],
        }


def gear_of_decision(decision: str | None) -> str:
    """The gear a client record's `decision` names (its first word), `baseline` for none/static."""
    if not decision:
        return "baseline"
    head = decision.replace(":", ";").replace("=", ";").split(";")[0].strip()
    return "baseline" if head in ("", "static") else head


async def read_batch(request: Request, limit: int, noun: str = "records") -> tuple[str, list]:
    """A batch upload's idempotency key and its `records` list, or the 400/413 that names
    what is wrong (the telemetry route's and the FlexHTTP agent's trace route's shape)."""
    key = request.headers.get("idempotency-key", "")
    if not key or len(key) > 200:
        raise HTTPException(400, "Idempotency-Key: header required, 1 to 200 characters")
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as e:
        raise HTTPException(400, f"body: malformed JSON: {e}") from e
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise HTTPException(400, 'records: the body must be {"records": [...]}')
    records = body["records"]
    if len(records) > limit:
        raise HTTPException(413, f"records: {len(records)} {noun} exceed the batch limit of {limit}")
    return key, records


def bearer(svc: Service, *allowed: str) -> Any:
    """A route dependency: the caller of a known bearer token whose role is one of `allowed`; 401
    without a known token (logged), 403 with another role. Other services built on this one (the
    FlexHTTP agent, python/gearbox/flexhttp/agent.py) guard their routes with it."""

    async def check(request: Request) -> Caller:
        # async: FastAPI would run a plain function in a worker thread, a hop per request.
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        peer = request.client.host if request.client else "?"
        if scheme.lower() != "bearer" or not token:
            log.warning("401 %s %s from %s: missing bearer token", request.method, request.url.path, peer)
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        caller = svc.caller(token.strip())
        if caller is None:
            log.warning("401 %s %s from %s: unknown token", request.method, request.url.path, peer)
            raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
        if caller.role not in allowed:
            raise HTTPException(403, f"role {caller.role!r} may not call this route (allowed: {', '.join(allowed)})")
        return caller

    return Depends(check)


def create_app(config: Config, store: Store) -> FastAPI:
    svc = Service(config, store)
    app = FastAPI(
        title="gearbox control plane",
        version="1",
        description="Telemetry ingestion, policy registry, scheduled learners (docs/control.md).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.service = svc

    def roles(*allowed: str) -> Any:
        return bearer(svc, *allowed)

    senders = roles("edge", "client", "agent", "admin")
    everyone = roles(*ROLES)
    readers = roles("learner", "admin")
    pushers = roles("learner", "admin")
    admins = roles("admin")

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @app.get("/v1/openapi.json", summary="This API's OpenAPI schema")
    def openapi(caller: Caller = everyone) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.post("/v1/telemetry", summary="Upload a batch of telemetry records (edge, client, agent, admin)")
    async def ingest(request: Request, caller: Caller = senders) -> JSONResponse:
        key, records = await read_batch(request, MAX_BATCH_RECORDS)
        rows, errors = [], []
        received = now_ms()
        for i, rec in enumerate(records):
            problem = validate(rec)
            if problem is None:
                rows.append(telemetry_row(caller.name, rec, received))
            else:
                errors.append({"index": i, "field": problem[0], "reason": problem[1]})
        response: dict = {"stored": len(rows), "rejected": len(errors)}
        if errors:
            response["errors"] = errors[:MAX_ERRORS_LISTED]
            first = errors[0]
            response["detail"] = (
                f"{len(errors)} of {len(records)} records rejected; record {first['index']}: "
                f"{first['field']}: {first['reason']}"
            )
        status = 400 if errors else 200
        result = await run_in_threadpool(store.ingest, caller.name, caller.role, key, rows, status, response)
        svc.saw(caller, request.client.host if request.client else None)
        return JSONResponse({**result.response, "duplicate": result.duplicate}, status_code=result.status)

    @app.get("/v1/telemetry", summary="Stored records as JSON Lines (learner, admin)")
    def export(since_ms: float | None = None, side: str | None = None, caller: Caller = readers) -> Response:
        if side not in (None, "edge", "client"):
            raise HTTPException(400, f"side: expected edge or client, found {side!r}")
        recs = store.records(since_ms, side)
        return StreamingResponse(
            (json.dumps(r, separators=(",", ":")) + "\n" for r in recs), media_type="application/x-ndjson"
        )

    @app.get("/v1/policies", summary="The policies the caller should run, per gear (ETag / If-None-Match)")
    async def poll(request: Request, caller: Caller = everyone) -> Response:
        # In the event loop, not a worker thread: everything it needs is cached in memory (the
        # caller after its first request, the answer until the next activation).
        etag, body = svc.active_for(caller.name)
        svc.saw(caller, request.client.host if request.client else None, _loaded(request))
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        return Response(body, media_type="application/json", headers={"ETag": etag})

    @app.get("/v1/policies/{gear}/versions/{version}/artifact", summary="A version's artifact (a tar)")
    def artifact(gear: str, version: int, caller: Caller = everyone) -> Response:
        v = store.version(gear, version)
        data = store.get_blob(v["sha256"]) if v else None
        if data is None:
            raise HTTPException(404, f"{gear} has no version {version}")
        return Response(data, media_type="application/x-tar", headers={"X-Gearbox-SHA256": v["sha256"]})

    @app.get("/v1/policies/{gear}/versions", summary="A gear's versions (learner, admin)")
    def versions(gear: str, caller: Caller = readers) -> JSONResponse:
        active = {s: v for (g, s), v in store.active().items() if g == gear}
        return JSONResponse({"versions": store.versions(gear), "active": active, "history": store.activations(gear)})

    @app.post("/v1/policies/{gear}/versions", summary="Push a new version: the tar of a folder (learner, admin)")
    async def push(request: Request, gear: str, caller: Caller = pushers) -> JSONResponse:
        data = await request.body()
        try:
            v = await run_in_threadpool(
                svc.push,
                gear,
                data,
                request.headers.get("x-gearbox-sha256"),
                caller.name,
                request.headers.get("x-gearbox-note"),
            )
        except pol.PolicyError as e:
            raise HTTPException(400, f"policy refused: {e}") from e
        return JSONResponse(v, status_code=201)

    @app.post("/v1/policies/{gear}/activate", summary="Activate a version in a scope (admin)")
    async def activate(request: Request, gear: str, caller: Caller = admins) -> JSONResponse:
        body = await _json_object(request)
        version = body.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise HTTPException(400, "version: expected an integer")
        scope = body.get("scope", "global")
        return JSONResponse(await run_in_threadpool(svc.activate, gear, version, str(scope), caller.name))

    @app.post("/v1/policies/{gear}/rollback", summary="Back to the previous (or a named) version (admin)")
    async def rollback(request: Request, gear: str, caller: Caller = admins) -> JSONResponse:
        body = await _json_object(request)
        to = body.get("to")
        if to is not None and (not isinstance(to, int) or isinstance(to, bool)):
            raise HTTPException(400, "to: expected an integer")
        scope = str(body.get("scope", "global"))
        return JSONResponse(await run_in_threadpool(svc.rollback, gear, scope, to, caller.name))

    @app.get("/v1/peers", summary="Edges and clients seen (admin)")
    def peers(caller: Caller = admins) -> JSONResponse:
        svc.write_seen()
        return JSONResponse({"peers": store.peers()})

    @app.get("/v1/jobs", summary="Job runs with their outcome and log (admin)")
    def jobs(caller: Caller = admins) -> JSONResponse:
        return JSONResponse({"jobs": sorted(config.jobs), "runs": store.runs()})

    @app.get("/v1/dashboard", summary="Everything the dashboard shows (admin)")
    def dashboard(caller: Caller = admins) -> JSONResponse:
        svc.write_seen()
        return JSONResponse(svc.dashboard())

    @app.get("/dashboard", include_in_schema=False)
    def dashboard_page() -> HTMLResponse:
        # The page holds no data: its script reads the admin token from the URL's fragment
        # (never sent to the server) and calls /v1/dashboard with it.
        return HTMLResponse(resources.files("gearbox.control").joinpath("dashboard.html").read_text())

    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    return app


def _loaded(request: Request) -> str | None:
    """`X-Gearbox-Policies: gear=version,...`: what the poller runs now (for the dashboard)."""
    header = request.headers.get("x-gearbox-policies")
    if header is None:
        return None
    loaded: dict[str, int] = {}
    for part in header.split(","):
        gear, _, v = part.strip().partition("=")
        if gear and v.isdigit():
            loaded[gear] = int(v)
    return json.dumps(loaded, sort_keys=True)


async def _json_object(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HTTPException(400, f"body: malformed JSON: {e}") from e
    if not isinstance(body, dict):
        raise HTTPException(400, "body: expected a JSON object")
    return body
