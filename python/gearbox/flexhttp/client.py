"""A client's side of the agent (FlexHTTP §3.3, §3.5): measure the network against it, upload trace
entries (through the control plane's spooled `Uploader`, so an unreachable agent loses nothing: the
entries wait on disk and go later), and fetch the global classifier."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from gearbox.control.client import Uploader, _ssl_context
from gearbox.flexhttp.probe import run_probe

TRACES_PATH = "/v1/flexhttp/traces"


class AgentError(RuntimeError):
    """The agent refused or could not be reached; says which."""


class AgentClient:
    def __init__(self, url: str, token: str, cafile: str | Path | None = None, timeout_s: float = 30.0) -> None:
        self.url, self.token, self.cafile = url.rstrip("/"), token, cafile
        self.http = httpx.Client(
            base_url=self.url,
            verify=_ssl_context(cafile),
            timeout=timeout_s,
            headers={"Authorization": f"Bearer {token}"},
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, resp: httpx.Response) -> dict:
        try:
            body = resp.json()
        except ValueError:
            body = {"detail": resp.text}
        if resp.status_code >= 300:
            raise AgentError(f"{self.url}: {resp.status_code}: {body.get('detail', body)}")
        return body

    def measure(self, timeout_s: float = 60.0) -> dict:
        """One probe exchange; returns the window's network features once the agent has this one."""
        s = self._json(self.http.post("/v1/flexhttp/probe"))
        host = urlsplit(self.url).hostname or "127.0.0.1"
        run_probe(host, int(s["port"]), s["session"], timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            resp = self.http.get("/v1/flexhttp/network")
            if resp.status_code == 200 and resp.json()["latest"]["session"] == s["session"]:
                return resp.json()
            time.sleep(0.1)
        raise AgentError(f"{self.url}: measurement {s['session']} did not finish in {timeout_s:g} s")

    def network(self) -> dict | None:
        resp = self.http.get("/v1/flexhttp/network")
        return None if resp.status_code == 404 else self._json(resp)

    def uploader(self, spool: str | Path, batch_records: int = 1000) -> Uploader:
        return Uploader(self.url, self.token, spool, self.cafile, batch_records=batch_records, path=TRACES_PATH)

    def train(self, k: int | None = None) -> dict:
        return self._json(self.http.post("/v1/flexhttp/train", json={"k": k} if k else {}, timeout=600))

    def classifier(self, out: Path) -> dict:
        """Downloads the active global classifier into `out` (checked against its sha256)."""
        from gearbox.control import policy as pol

        info = self._json(self.http.get("/v1/flexhttp/classifier"))
        data = self.http.get(info["url"])
        if data.status_code != 200:
            raise AgentError(f"{self.url}{info['url']}: {data.status_code}")
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        pol.install(data.content, info["sha256"], out.parent, out.name)
        return info
