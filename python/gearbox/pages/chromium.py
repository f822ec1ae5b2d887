"""Speed Index and page load time of a page load in real Chromium, over HTTP/2 or HTTP/3.

FlexHTTP (§2.1) judges a load by its Speed Index (SI) measured with Lighthouse in Chrome; so does this
module: Debian's Chromium driven by npm `lighthouse` pinned to 12.2.3 (the last line that runs on
Node 20; scripts/setup.sh installs it under tools/lighthouse), with `--throttling-method=provided`
(Lighthouse's default "simulate" would recompute the load under a modelled network and erase the very
difference between the two transports that is measured here) and a config that runs only the audits
read here and shortens the quiet-window waits (tools/lighthouse/gearbox-lighthouse.json).

The HTTP version is forced the way the edge's Chromium test does it: HTTP/3 with
`--origin-to-force-quic-on=HOST:PORT` (no TCP at all, no Alt-Svc round), HTTP/2 with `--disable-quic`;
the self-signed certificate is trusted by its SubjectPublicKeyInfo digest
(`--ignore-certificate-errors-spki-list`), which Chromium's QUIC stack honours, unlike
`--ignore-certificate-errors`. A third "version", `chromium`, is Chromium's own choice (FlexHTTP §4's
baseline): QUIC enabled but not forced, so the first visit goes over HTTP/2 and learns the edge's
`Alt-Svc`, and a later visit by the same profile goes over HTTP/3 (speedline meter only; `CHROMIUM_UNUSED_PORT`
below says how the self-signed certificate is accepted for it). The protocol every request actually used
is read back from the browser's network records, so a run that silently fell back is reported as such, not
measured as the other.

Two meters, the same flags and the same result record:

* `lighthouse` (the reference): one Lighthouse run, hence one new Chromium, per load; ~25 s per load on
  this 2-core machine.
* `speedline` (the fast one, for datasets): tools/lighthouse/speed-index.mjs keeps one Chromium per
  (batch, version), gives each load a fresh browser context (its own socket pools, cache and QUIC
  state), records a DevTools trace with screenshots and computes SI with speedline-core, the library
  Lighthouse itself uses, from the main frame's navigationStart; visual changes up to `settle_ms` after
  the load event count; 12 loads through the emulator took 121 s, browser starts included. Both are
  checked against the same pages of known visual progress (python/tests/test_pages_chromium.py), and
  docs/flexhttp.md compares them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

#: Where scripts/setup.sh installs Lighthouse, relative to the repository root.
LIGHTHOUSE_DIR = Path("tools") / "lighthouse"
LIGHTHOUSE_VERSION = "12.2.3"


class BrowserError(RuntimeError):
    """Chromium or Lighthouse is missing or a load failed; the message says which and how to fix it."""


@dataclass(frozen=True)
class BrowserLoad:
    """One page load measured by Lighthouse in Chromium."""

    url: str
    #: "h2", "h3" or "chromium": what was asked for.
    http_version: str
    #: Speed Index, milliseconds (Lighthouse's `speed-index` audit, computed by speedline from the
    #: trace's screenshots).
    speed_index_ms: float
    #: First contentful paint, milliseconds.
    fcp_ms: float
    #: The window's load event after navigation start, milliseconds (`observedLoad`).
    load_ms: float
    #: Largest contentful paint, milliseconds (None when Chromium reported none).
    lcp_ms: float | None
    #: Requests the page made and the protocol of each as Chromium recorded it, e.g. {"h3": 36}.
    protocols: dict[str, int]
    #: Response bytes the page transferred.
    transfer_bytes: int
    #: URL path of every response, in arrival order.
    paths: tuple[str, ...] = ()
    #: Which visit of the URL by one browser profile (the `chromium` version: 0 = the first, over
    #: HTTP/2; 1.. = after Alt-Svc); 0 for h2 and h3, where every load is a first visit.
    visit: int = 0
    #: The protocol of the page's own document (speedline meter; None from Lighthouse).
    document_protocol: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def chromium_path() -> Path:
    for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if Path(p).exists():
            return Path(p)
    raise BrowserError("chromium is not installed; run scripts/setup.sh (it installs the test peers)")


def lighthouse_cli(root: Path | None = None) -> Path:
    """The pinned Lighthouse's CLI script."""
    base = (root or repo_root()) / LIGHTHOUSE_DIR
    cli = base / "node_modules" / "lighthouse" / "cli" / "index.js"
    pkg = base / "node_modules" / "lighthouse" / "package.json"
    if not cli.is_file() or not pkg.is_file():
        raise BrowserError(f"lighthouse is not installed in {base}; run scripts/setup.sh")
    version = json.loads(pkg.read_text()).get("version")
    if version != LIGHTHOUSE_VERSION:
        raise BrowserError(
            f"{pkg}: lighthouse {version} installed, {LIGHTHOUSE_VERSION} expected; run scripts/setup.sh"
        )
    if shutil.which("node") is None:
        raise BrowserError("node is not installed; run scripts/setup.sh")
    return cli


def spki_sha256_base64(cert_pem: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of the first certificate in a PEM file."""
    try:
        pub = subprocess.run(
            ["openssl", "x509", "-in", str(cert_pem), "-pubkey", "-noout"], check=True, capture_output=True
        ).stdout
        der = subprocess.run(
            ["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True, capture_output=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BrowserError(f"{cert_pem}: cannot read the certificate's public key with openssl: {e}") from e
    return base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")


#: The versions a load can ask for: HTTP/2 forced, HTTP/3 forced, or Chromium's own choice.
VERSIONS = ("h2", "h3", "chromium")

#: Chromium's own choice. Chromium accepts a QUIC certificate that does not chain to a publicly
#: trusted root only for the hosts of `--origin-to-force-quic-on` (net/quic/crypto/
#: proof_verifier_chromium.cc, `ShouldAllowUnknownRootForHost`; the set holds host names, ports
#: dropped), and `--ignore-certificate-errors-spki-list` does not change that: without it the Alt-Svc
#: upgrade of a self-signed edge fails its handshake and is marked broken. So QUIC is forced on a port
#: of the edge's host that no page uses (9, discard): the host's self-signed certificate is then
#: accepted, and the origin's own port is left to Chromium: TCP first, HTTP/3 after Alt-Svc.
CHROMIUM_UNUSED_PORT = 9


def chrome_flags(host: str, port: int, address: str, spki: str, http_version: str) -> list[str]:
    """Chromium's flags for one load of https://HOST:PORT/ served at ADDRESS over `http_version`."""
    if http_version not in VERSIONS:
        raise BrowserError(f"http_version must be one of {', '.join(VERSIONS)}, got {http_version!r}")
    if http_version == "chromium" and port == CHROMIUM_UNUSED_PORT:
        raise BrowserError(f"the chromium version needs the edge on a port other than {CHROMIUM_UNUSED_PORT}")
    # The one flag with spaces comes first: Lighthouse's flag parser (yargs) would take a quoted
    # "--x=a b" after a bare boolean flag as that flag's value.
    flags = [
        f"--host-resolver-rules=MAP {host} {address}",
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        f"--ignore-certificate-errors-spki-list={spki}",
    ]
    if http_version == "h3":
        flags += ["--enable-quic", f"--origin-to-force-quic-on={host}:{port}"]
    elif http_version == "chromium":
        flags += ["--enable-quic", f"--origin-to-force-quic-on={host}:{CHROMIUM_UNUSED_PORT}"]
    else:
        flags += ["--disable-quic"]
    return flags


def _quote(flag: str) -> str:
    """`--key=a b` as `--key="a b"`: Lighthouse parses --chrome-flags with yargs, which keeps a quoted
    value whole but takes a token that starts with a quote for a positional argument."""
    if " " not in flag:
        return flag
    key, _, value = flag.partition("=")
    return f'{key}="{value}"'


def measure_load(
    url: str,
    *,
    address: str,
    cert_pem: Path,
    http_version: str,
    timeout_s: float = 180.0,
    root: Path | None = None,
) -> BrowserLoad:
    """Loads `url` (https://HOST:PORT/...) once in a fresh Chromium under Lighthouse and returns its
    Speed Index, paints, load time and the protocols the requests used."""
    from urllib.parse import urlsplit

    if http_version == "chromium":
        raise BrowserError("the chromium version (visits by one profile) needs the speedline meter")

    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or not parts.port:
        raise BrowserError(f"url must be https://HOST:PORT/..., got {url!r}")
    cli = lighthouse_cli(root)
    config = cli.parents[3] / "gearbox-lighthouse.json"
    flags = chrome_flags(parts.hostname, parts.port, address, spki_sha256_base64(cert_pem), http_version)
    with tempfile.TemporaryDirectory(prefix="gearbox-lh-") as tmp:
        out = Path(tmp) / "lhr.json"
        env = dict(os.environ, CHROME_PATH=str(chromium_path()))
        cmd = [
            "node",
            str(cli),
            url,
            f"--config-path={config}",
            "--output=json",
            f"--output-path={out}",
            "--quiet",
            "--chrome-flags=" + " ".join(_quote(f) for f in flags),
        ]
        try:
            run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise BrowserError(f"lighthouse did not finish loading {url} within {timeout_s:.0f} s") from e
        if not out.is_file():
            raise BrowserError(f"lighthouse failed on {url} (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
        return parse_report(json.loads(out.read_text()), url, http_version)


def measure_loads_speedline(
    urls: list[str],
    *,
    address: str,
    cert_pem: Path,
    http_version: str,
    settle_ms: int = 1000,
    timeout_s: float = 600.0,
    root: Path | None = None,
    visits: int = 0,
) -> list[BrowserLoad | BrowserError]:
    """Loads each of `urls` (all https://HOST:PORT/... of one origin) in one Chromium, a fresh browser
    context each, and returns per URL its measurement or the error that stopped it. With `visits` > 0
    each URL is visited that many times by a profile of its own, a new browser per visit (the
    `chromium` version), and the result has one entry per visit, URL by URL."""
    from urllib.parse import urlsplit

    if not urls:
        return []
    parts = urlsplit(urls[0])
    if parts.scheme != "https" or not parts.hostname or not parts.port:
        raise BrowserError(f"url must be https://HOST:PORT/..., got {urls[0]!r}")
    for u in urls:
        p = urlsplit(u)
        if (p.scheme, p.hostname, p.port) != (parts.scheme, parts.hostname, parts.port):
            raise BrowserError(f"one batch is one origin: {u!r} is not on {parts.hostname}:{parts.port}")
    script = lighthouse_cli(root).parents[3] / "speed-index.mjs"
    flags = chrome_flags(parts.hostname, parts.port, address, spki_sha256_base64(cert_pem), http_version)
    flags = [f for f in flags if not f.startswith("--headless")]
    spec = {
        "chrome": str(chromium_path()),
        "flags": flags,
        "settle_ms": settle_ms,
        "timeout_ms": 120_000,
        "loads": [{"url": u} for u in urls],
        "visits": visits,
    }
    with tempfile.TemporaryDirectory(prefix="gearbox-si-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        try:
            run = subprocess.run(
                ["node", str(script), str(spec_path)], capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as e:
            raise BrowserError(f"speed-index.mjs did not finish {len(urls)} loads within {timeout_s:.0f} s") from e
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    expected = [u for u in urls for _ in range(max(visits, 1))]
    if len(rows) != len(expected):
        raise BrowserError(f"speed-index.mjs failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
    out: list[BrowserLoad | BrowserError] = []
    for u, r in zip(expected, rows, strict=True):
        if "error" in r:
            out.append(BrowserError(f"chromium could not measure {u} over {http_version}: {r['error']}"))
            continue
        out.append(
            BrowserLoad(
                url=u,
                http_version=http_version,
                speed_index_ms=float(r["speed_index_ms"]),
                fcp_ms=float(r["fcp_ms"]) if r.get("fcp_ms") is not None else float("nan"),
                load_ms=float(r["load_ms"]) if r.get("load_ms") is not None else float("nan"),
                lcp_ms=None,
                protocols=r["protocols"],
                transfer_bytes=int(r["transfer_bytes"]),
                paths=tuple(r.get("paths", ())),
                visit=int(r.get("visit", 0)),
                document_protocol=r.get("document_protocol"),
            )
        )
    return out


def parse_report(lhr: dict, url: str, http_version: str) -> BrowserLoad:
    """The measurements of a Lighthouse JSON report; a report with a runtime error is an error."""
    if lhr.get("runtimeError"):
        err = lhr["runtimeError"]
        raise BrowserError(
            f"lighthouse could not measure {url} over {http_version}: {err.get('code')}: {err.get('message')}"
        )
    audits = lhr["audits"]

    def value(name: str) -> float:
        v = audits.get(name, {}).get("numericValue")
        if v is None:
            raise BrowserError(
                f"lighthouse report for {url} has no {name} ({audits.get(name, {}).get('errorMessage')})"
            )
        return float(v)

    metrics = audits["metrics"]["details"]["items"][0]
    from urllib.parse import urlsplit

    protocols: dict[str, int] = {}
    paths: list[str] = []
    transfer = 0
    for item in audits["network-requests"]["details"]["items"]:
        if item.get("url", "").startswith("data:"):
            continue
        paths.append(urlsplit(item["url"]).path)
        p = item.get("protocol") or "unknown"
        protocols[p] = protocols.get(p, 0) + 1
        transfer += int(item.get("transferSize") or 0)
    lcp = audits.get("largest-contentful-paint", {}).get("numericValue")
    return BrowserLoad(
        url=url,
        http_version=http_version,
        speed_index_ms=value("speed-index"),
        fcp_ms=value("first-contentful-paint"),
        load_ms=float(metrics["observedLoad"]),
        lcp_ms=None if lcp is None else float(lcp),
        protocols=protocols,
        transfer_bytes=transfer,
        paths=tuple(paths),
    )


@dataclass(frozen=True)
class Condition:
    """An emulated path for page loads (FlexHTTP Table 1's network features)."""

    rtt_ms: float
    loss_rate: float
    rate_mbps: float

    def validate(self) -> None:
        if not (0 < self.rtt_ms <= 10_000):
            raise BrowserError(f"rtt_ms must be in (0, 10000], got {self.rtt_ms}")
        if not (0 <= self.loss_rate < 1):
            raise BrowserError(f"loss_rate must be in [0, 1), got {self.loss_rate}")
        if not (0 < self.rate_mbps <= 10_000):
            raise BrowserError(f"rate_mbps must be in (0, 10000], got {self.rate_mbps}")

    def emu_toml(self) -> str:
        """One path, the same rate, half the RTT and the loss rate each way, a one-BDP drop-tail queue."""
        link = (
            f"rate_bps = {int(self.rate_mbps * 1e6)}\ndelay_ms = {self.rtt_ms / 2}\nbase_rtt_ms = {self.rtt_ms}\n"
            "[path.{dir}.queue]\nlimit_bdp = 1.0\n"
        )
        loss = f'[path.{{dir}}.loss]\nmodel = "bernoulli"\nloss_rate = {self.loss_rate}\n' if self.loss_rate > 0 else ""
        out = 'topology = "single"\n[[path]]\nname = "flexhttp"\n'
        for d in ("uplink", "downlink"):
            out += f"[path.{d}]\n" + (link + loss).replace("{dir}", d)
        return out


#: The host name the browser uses for the edge in the emulator (mapped to its address by Chromium).
EMU_HOST = "gearbox.test"
EMU_PORT = 4433


def measure_over_emu(
    gearbox_bin: Path,
    sites: Path,
    pages: list[str],
    condition: Condition,
    versions: list[str],
    repetitions: int,
    out_jsonl: Path,
    workdir: Path,
    seed: int = 0,
    meter: str = "lighthouse",
    settle_ms: int = 1000,
    visits: int = 2,
    server: str = "edge",
    edge_args: list[str] | None = None,
) -> int:
    """Serves `sites` from our edge in the emulator's server namespace and loads each page over each
    version `repetitions` times in Chromium in the client namespace (interleaved: page, repetition,
    version), appending one JSON line per load to `out_jsonl` (`visits` lines for the `chromium`
    version: its first visit and the later ones). `server` is our edge or one of the peers' HTTP/2
    servers (gearbox.pages.peers: nginx, caddy; h2 only); `edge_args` go to our edge's command line
    (e.g. `--tcp-cc=system`, to run the peers' controller). Returns gearbox emu's exit status."""
    import shlex
    import sys

    from gearbox.pages.peers import PEERS, peer_command

    condition.validate()
    if meter not in METERS:
        raise BrowserError(f"meter must be one of {', '.join(METERS)}, got {meter!r}")
    if repetitions < 1:
        raise BrowserError(f"repetitions must be >= 1, got {repetitions}")
    for v in versions:
        if v not in VERSIONS:
            raise BrowserError(f"http version must be one of {', '.join(VERSIONS)}, got {v!r}")
    if "chromium" in versions and meter != "speedline":
        raise BrowserError("the chromium version (visits by one profile) needs the speedline meter")
    if "chromium" in versions and visits < 2:
        raise BrowserError(f"the chromium version needs 2 visits or more (the first, then after Alt-Svc), got {visits}")
    if server != "edge" and server not in PEERS:
        raise BrowserError(f"server must be edge or one of {', '.join(PEERS)}, got {server!r}")
    if server != "edge" and set(versions) != {"h2"}:
        raise BrowserError(f"{server} is measured over h2 only (our edge is the HTTP/3 server), got {versions}")
    for p in pages:
        if not (sites / p / "index.html").is_file():
            raise BrowserError(f"{sites / p / 'index.html'}: no such file")
    lighthouse_cli()
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [str(gearbox_bin), "cert", "--name", f"{EMU_HOST},10.0.0.1", "--cert", str(cert), "--key", str(key)],
        check=True,
        capture_output=True,
    )
    (workdir / "emu.toml").write_text(condition.emu_toml())
    spec = {
        "cert": str(cert),
        "out": str(out_jsonl.resolve()),
        "condition": asdict(condition),
        "meter": meter,
        "settle_ms": settle_ms,
        "visits": visits,
        "server": server,
        "edge_args": edge_args or [],
        "loads": [
            {"url": f"https://{EMU_HOST}:{EMU_PORT}/{p}/index.html", "page": p, "http_version": v, "repetition": r}
            for p in pages
            for r in range(repetitions)
            for v in (versions if r % 2 == 0 else list(reversed(versions)))
        ],
    }
    (workdir / "loads.json").write_text(json.dumps(spec, indent=1))
    if server == "edge":
        server_cmd = (
            f"exec {gearbox_bin} edge --listen 10.0.0.1:{EMU_PORT} --cert {cert} --key {key} "
            f"--static-dir {sites.resolve()} --telemetry {workdir / 'edge.jsonl'}"
        )
        server_cmd += "".join(f" {shlex.quote(a)}" for a in edge_args or [])
        ready = f"{EMU_PORT}/tcp,{EMU_PORT}/udp"
    else:
        server_cmd = peer_command(server, workdir / server, sites.resolve(), cert, key, f"10.0.0.1:{EMU_PORT}")
        ready = f"{EMU_PORT}/tcp"
    client = f"exec {sys.executable} -m gearbox.pages browse {workdir / 'loads.json'}"
    cmd = [str(gearbox_bin), "emu", "--config", str(workdir / "emu.toml"), "--seed", str(seed)]
    cmd += ["--ready-ports", ready, "--server", server_cmd, "--client", client]
    env = dict(os.environ, PYTHONPATH=str(repo_root() / "python"))
    return subprocess.run(cmd, env=env).returncode


#: The two ways of measuring SI (module doc).
METERS = ("lighthouse", "speedline")


def run_loads(spec_path: Path) -> int:
    """The client side of `measure_over_emu`: every load of the spec, one JSON line each. The speedline
    meter runs one Chromium per (repetition, version), keeping the spec's order within it."""
    spec = json.loads(spec_path.read_text())
    address = os.environ.get("GEARBOX_SERVER_ADDR", "10.0.0.1")
    cert = Path(spec["cert"])
    meter = spec.get("meter", "lighthouse")
    failures = 0

    def emit(out, load: dict, result: BrowserLoad | BrowserError, visit: int = 0) -> None:
        nonlocal failures
        row = {k: load[k] for k in ("page", "http_version", "repetition")}
        row |= {"condition": spec["condition"], "meter": meter, "server": spec.get("server", "edge")}
        if spec.get("edge_args"):
            row["edge_args"] = spec["edge_args"]
        if isinstance(result, BrowserError):
            failures += 1
            row |= {"visit": visit, "error": str(result)}
        else:
            row |= result.as_dict()
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row), flush=True)

    with open(spec["out"], "a") as out:
        if meter == "speedline":
            batches: dict[tuple[int, str], list[dict]] = {}
            for load in spec["loads"]:
                batches.setdefault((load["repetition"], load["http_version"]), []).append(load)
            for (_, version), loads in batches.items():
                visits = spec.get("visits", 2) if version == "chromium" else 0
                per_load = max(visits, 1)
                try:
                    results: list[BrowserLoad | BrowserError] = measure_loads_speedline(
                        [x["url"] for x in loads],
                        address=address,
                        cert_pem=cert,
                        http_version=version,
                        settle_ms=spec.get("settle_ms", 1000),
                        timeout_s=600.0 * per_load,
                        visits=visits,
                    )
                except BrowserError as e:
                    results = [e] * (len(loads) * per_load)
                for i, result in enumerate(results):
                    emit(out, loads[i // per_load], result, i % per_load)
        else:
            for load in spec["loads"]:
                try:
                    result: BrowserLoad | BrowserError = measure_load(
                        load["url"], address=address, cert_pem=cert, http_version=load["http_version"]
                    )
                except BrowserError as e:
                    result = e
                emit(out, load, result)
    return 1 if failures else 0
