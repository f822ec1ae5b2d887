"""The control plane's configuration file (TOML), docs/control.md "Configuration".

```toml
[server]
listen = "127.0.0.1:8443"      # host:port
cert = "cert.pem"              # `gearbox cert` makes them; relative paths are from this file's folder
key = "key.pem"
store = "store"                # a folder (embedded store) or a postgresql:// URL
max_body_bytes = 8388608       # larger requests get 413
poll_interval_s = 30           # told to pollers
flush_interval_s = 2           # peers seen to the store; embedded store: small Parquet files merged

[groups]                       # named scopes: peer (token) names
canary = ["edge-1"]

[jobs.tcpwise]                 # a learner on a schedule
gear = "tcpwise"
every_s = 60
command = ["python", "-m", "gearbox.tcpwise", "learn", "--telemetry", "{telemetry}",
           "--table", "{input}/cwnd.toml", "--out", "{output}/cwnd.toml"]
side = "edge"                  # which records it reads (omit: both)
activate = true                # false: the new version waits for `policy activate`
scope = "global"
timeout_s = 600
```
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from gearbox.control.store import NAME_RE


class ConfigError(Exception):
    """A configuration problem, naming the file and the key."""


@dataclass(frozen=True)
class Job:
    name: str
    gear: str
    every_s: float
    command: list[str]
    side: str | None = None
    activate: bool = True
    scope: str = "global"
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Config:
    path: Path | None
    host: str = "127.0.0.1"
    port: int = 8443
    cert: Path | None = None
    key: Path | None = None
    store: str = "store"
    max_body_bytes: int = 8 * 1024 * 1024
    poll_interval_s: float = 30.0
    flush_interval_s: float = 2.0
    groups: dict[str, list[str]] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)

    @property
    def base(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


_SERVER_KEYS = {"listen", "cert", "key", "store", "max_body_bytes", "poll_interval_s", "flush_interval_s"}
_JOB_KEYS = {"gear", "every_s", "command", "side", "activate", "scope", "timeout_s"}


def _num(where: str, value: object, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and not value > 0):
        raise ConfigError(f"{where}: expected a positive number, found {value!r}")
    return float(value)


def read_toml(path: Path) -> dict:
    """A config file's TOML; a ConfigError naming the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from e


def load(path: Path) -> Config:
    return parse(read_toml(path), Path(path))


def parse(data: dict, path: Path | None) -> Config:
    where = str(path) if path else "<config>"
    unknown = set(data) - {"server", "groups", "jobs"}
    if unknown:
        raise ConfigError(f"{where}: unknown table {sorted(unknown)[0]!r} (known: server, groups, jobs)")
    base = path.parent if path else Path.cwd()
    server = data.get("server", {})
    bad = set(server) - _SERVER_KEYS
    if bad:
        raise ConfigError(f"{where}: [server].{sorted(bad)[0]}: unknown key (known: {', '.join(sorted(_SERVER_KEYS))})")
    kw: dict = {}
    if "listen" in server:
        host, _, port = str(server["listen"]).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where}: [server].listen: expected HOST:PORT, found {server['listen']!r}")
        kw["host"], kw["port"] = host.strip("[]"), int(port)
    for k in ("cert", "key"):
        if k in server:
            p = Path(server[k])
            kw[k] = p if p.is_absolute() else base / p
    if "store" in server:
        if not isinstance(server["store"], str) or not server["store"]:
            raise ConfigError(f"{where}: [server].store: expected a folder or a postgresql:// URL")
        kw["store"] = server["store"]
    if "max_body_bytes" in server:
        kw["max_body_bytes"] = int(_num(f"{where}: [server].max_body_bytes", server["max_body_bytes"]))
    for k in ("poll_interval_s", "flush_interval_s"):
        if k in server:
            kw[k] = _num(f"{where}: [server].{k}", server[k])
    groups = data.get("groups", {})
    for g, members in groups.items():
        if g == "global" or not NAME_RE.match(g):
            raise ConfigError(f"{where}: [groups].{g}: a group name is letters, digits, _.- and not 'global'")
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{where}: [groups].{g}: expected a list of peer names")
    kw["groups"] = {g: list(m) for g, m in groups.items()}
    jobs: dict[str, Job] = {}
    for name, j in data.get("jobs", {}).items():
        at = f"{where}: [jobs.{name}]"
        if not isinstance(j, dict):
            raise ConfigError(f"{at}: expected a table")
        bad = set(j) - _JOB_KEYS
        if bad:
            raise ConfigError(f"{at}.{sorted(bad)[0]}: unknown key (known: {', '.join(sorted(_JOB_KEYS))})")
        for req in ("gear", "every_s", "command"):
            if req not in j:
                raise ConfigError(f"{at}.{req}: missing")
        if not isinstance(j["command"], list) or not j["command"] or not all(isinstance(c, str) for c in j["command"]):
            raise ConfigError(f"{at}.command: expected a non-empty list of strings")
        if j.get("side") not in (None, "edge", "client"):
            raise ConfigError(f'{at}.side: expected "edge" or "client", found {j["side"]!r}')
        if not isinstance(j.get("activate", True), bool):
            raise ConfigError(f"{at}.activate: expected true or false")
        scope = j.get("scope", "global")
        if scope != "global" and scope not in kw["groups"]:
            raise ConfigError(f"{at}.scope: {scope!r} is neither 'global' nor a group of [groups]")
        jobs[name] = Job(
            name=name,
            gear=str(j["gear"]),
            every_s=_num(f"{at}.every_s", j["every_s"]),
            command=list(j["command"]),
            side=j.get("side"),
            activate=j.get("activate", True),
            scope=scope,
            timeout_s=_num(f"{at}.timeout_s", j.get("timeout_s", 600.0)),
        )
    kw["jobs"] = jobs
    return Config(path=path, **kw)
