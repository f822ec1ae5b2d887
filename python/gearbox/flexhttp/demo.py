"""`gearbox lab flexhttp demo` (and `gearbox demo --part flexhttp`): FlexHTTP's whole loop (Fig. 3) on two
contrasting emulated paths — a clean short one (30 ms, 0.01% loss, 10 Mbit/s) and a long lossy one
(300 ms, 3%, 1 Mbit/s), §4's first and last configurations.

One agent (`gearbox agent serve`, its store kept across the runs, as §4's configurations "share the same
agent server") and our edge serving generated pages run in the emulator's server namespace; each path has
its own client (its own state folder: cache, local pool, forests, spool), which runs `gearbox get --page
URL --agent ...` in the client namespace:

1. **warm-up**: on each path, every page over h2 and over h3 (`--http-version h2|h3`), `reps` times,
   alternating which goes first. Each load is a local entry of its client and is uploaded to the agent's
   global pool (the client measured its path against the agent first).
2. **global classifier**: the agent labels its pool by k-means (k = paths x pages: one cluster per
   (path, page) when the network and page features separate them) and trains the global forest, version 1.
3. **choice**: on each path, each page is loaded twice with `--http-version auto`: the client downloads
   version 1, labels its local entries by the nearest centre (or its own evidence), fine-tunes the forest
   with them, and on the first load (a cache miss) takes a random version while the forest fills the
   cache; the second load is the cache's answer.

The run prints, per path and page, the warm-up's median load time of each version, then each choice with
its reason and load time. Three `gearbox emu` runs (clean warm-up; lossy warm-up, training, lossy choices;
clean choices); about 3 minutes with the defaults on a quiet machine.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gearbox.flexhttp.lab import AGENT_PORT, PORT, FlexLabError, _agent_dir, _gearbox_bin
from gearbox.pages.chromium import Condition

#: The two contrasting paths (§4's first and last configurations).
PATHS = {"clean": Condition(30, 0.0001, 10), "lossy": Condition(300, 0.03, 1)}
SERVER = "10.0.0.1"


def _emu(
    gearbox: Path, work: Path, cond: Condition, agent: Path, sites: Path, cert: Path, key: Path, script: str
) -> None:
    """One emulator run: agent + edge in the server namespace, `script` (bash) in the client namespace."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "emu.toml").write_text(cond.emu_toml())
    (work / "client.sh").write_text("set -u\n" + script)
    py = shlex.quote(sys.executable)
    server = (
        f"{gearbox} edge --listen {SERVER}:{PORT} --cert {cert} --key {key} --static-dir {sites} "
        f"> {shlex.quote(str(work / 'edge.log'))} 2>&1 & "
        f"cd {shlex.quote(str(agent))} && exec {py} -m gearbox.flexhttp serve --config agent.toml"
    )
    cmd = [str(gearbox), "emu", "--config", str(work / "emu.toml"), "--seed", "1"]
    cmd += ["--ready-ports", f"{PORT}/tcp,{PORT}/udp,{AGENT_PORT}/tcp", "--ready-timeout-s", "60"]
    cmd += ["--server", server, "--client", f"exec bash {shlex.quote(str(work / 'client.sh'))}"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    with open(work / "emu.log", "wb") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise FlexLabError(f"gearbox emu exited with {code} (see {work / 'emu.log'} and {work / 'client.log'})")


def _get(gearbox: Path, url: str, version: str, state: Path, cert: Path, agent: Path, token: str, out: Path) -> str:
    """The client command of one page load (its JSON record appended to `out`, stderr to client.log)."""
    q = shlex.quote
    return (
        f"{gearbox} get --page {q(url)} --http-version {version} --ca {q(str(cert))} "
        # A first QUIC handshake on the 300 ms, 3% path can need a retransmission timeout or two: more
        # than the client's 2 s bound for an origin of unknown RTT.
        "--quic-silence-floor-s 8 --timeout-s 120 "
        f"--agent https://{SERVER}:{AGENT_PORT} --agent-token {q(token)} --agent-ca {q(str(agent / 'cert.pem'))} "
        f"--flexhttp-state {q(str(state))} >> {q(str(out))} 2>> {q(str(out.parent / 'client.log'))} || true\n"
    )


def run(out: Path, pages: int = 2, reps: int = 2, pages_seed: int = 17, max_page_bytes: float = 1.5e5) -> dict:
    from gearbox.pages.generate import generate

    gearbox = _gearbox_bin()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    sites = out / "sites"
    if not (sites / "pages.json").is_file():
        generate(sites, 8 * pages, pages_seed)
    manifest = json.loads((sites / "pages.json").read_text())
    names = [p["name"] for p in manifest["pages"] if p["features"]["all_bytes"] <= max_page_bytes][:pages]
    if len(names) < pages:
        raise FlexLabError(f"{sites}: {len(names)} pages of at most {max_page_bytes:g} bytes, {pages} asked for")
    features = {p["name"]: p["features"] for p in manifest["pages"]}
    cert, key = (out / "edge-cert.pem").resolve(), (out / "edge-key.pem").resolve()
    subprocess.run(
        [str(gearbox), "cert", "--name", f"{SERVER},localhost", "--cert", str(cert), "--key", str(key)],
        check=True,
        capture_output=True,
    )
    agent = (out / "agent").resolve()
    if agent.exists():
        raise FlexLabError(f"{agent} exists: the demo starts from an empty agent; remove {out} or pick another --out")
    agent, tokens = _agent_dir(agent, SERVER, AGENT_PORT, SERVER)
    sites = sites.resolve()
    urls = {n: f"https://{SERVER}:{PORT}/{n}/index.html" for n in names}
    q = shlex.quote

    def warmup(path: str) -> str:
        state = (out / path / "state").resolve()
        rec = (out / path / "warmup.jsonl").resolve()
        lines = ""
        for rep in range(reps):
            for i, n in enumerate(names):
                order = ("h2", "h3") if (rep + i) % 2 == 0 else ("h3", "h2")
                lines += "".join(_get(gearbox, urls[n], v, state, cert, agent, tokens["client"], rec) for v in order)
        return lines

    def choices(path: str) -> str:
        state = (out / path / "state").resolve()
        rec = (out / path / "auto.jsonl").resolve()
        return "".join(
            _get(gearbox, urls[n], "auto", state, cert, agent, tokens["client"], rec) for n in names for _ in range(2)
        )

    train = (
        f"{q(sys.executable)} -m gearbox.flexhttp train --k {len(PATHS) * len(names)} "
        f"--url https://{SERVER}:{AGENT_PORT} --token {q(tokens['learner'])} --cafile {q(str(agent / 'cert.pem'))} "
        f"> {q(str((out / 'train.json').resolve()))} 2> {q(str((out / 'train.log').resolve()))} || true\n"
    )
    print(f"flexhttp demo: pages {', '.join(names)}; {reps} warm-up reps per version; paths:", flush=True)
    for p, c in PATHS.items():
        print(f"  {p}: {c.rtt_ms:g} ms, {c.loss_rate * 100:g}% loss, {c.rate_mbps:g} Mbit/s", flush=True)
    _emu(gearbox, out / "clean" / "run-1", PATHS["clean"], agent, sites, cert, key, warmup("clean"))
    print(f"  clean: warm-up done ({time.monotonic() - started:.0f} s)", flush=True)
    _emu(
        gearbox,
        out / "lossy" / "run-1",
        PATHS["lossy"],
        agent,
        sites,
        cert,
        key,
        warmup("lossy") + train + choices("lossy"),
    )
    print(f"  lossy: warm-up, training and choices done ({time.monotonic() - started:.0f} s)", flush=True)
    _emu(gearbox, out / "clean" / "run-2", PATHS["clean"], agent, sites, cert, key, choices("clean"))
    print(f"  clean: choices done ({time.monotonic() - started:.0f} s)", flush=True)

    def records(p: Path) -> list[dict]:
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.is_file() else []

    trained = (out / "train.json").read_text() if (out / "train.json").is_file() else ""
    report: dict = {
        "pages": {n: features[n] for n in names},
        "train": json.loads(trained) if trained.strip() else {"error": (out / "train.log").read_text().strip()},
        "paths": {},
        "elapsed_s": time.monotonic() - started,
    }
    for p in PATHS:
        warm = records(out / p / "warmup.jsonl")
        auto = records(out / p / "auto.jsonl")
        med = {}
        for n in names:
            for v in ("h2", "h3"):
                ms = [
                    r["page_load_ms"]
                    for r in warm
                    if r["url"] == urls[n] and r["http_version"] == v and "page_load_ms" in r
                ]
                med[f"{n}/{v}"] = statistics.median(ms) if ms else None
        pool = out / p / "state" / "local-pool.jsonl"
        report["paths"][p] = {
            "condition": PATHS[p].__dict__,
            "warmup": warm,
            "warmup_median_ms": med,
            "auto": auto,
            "local_pool_entries": len(pool.read_text().splitlines()) if pool.is_file() else 0,
        }
    (out / "demo.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def print_report(r: dict) -> None:
    t = r["train"]
    if "version" in t:
        print(
            f"\nglobal forest v{t['version']}: {t['entries']} pool entries, k={t['k']}, {t['rows']} labelled rows, "
            f"H3 labels {t['h3_share'] * 100:.0f}%"
        )
    else:
        print(f"\nno global forest: {t.get('error') or t}")
    for p, d in r["paths"].items():
        c = d["condition"]
        print(f"\n{p} path ({c['rtt_ms']:g} ms, {c['loss_rate'] * 100:g}% loss, {c['rate_mbps']:g} Mbit/s):")
        for key, ms in d["warmup_median_ms"].items():
            print(f"  warm-up median {key}: {'-' if ms is None else f'{ms:.0f} ms'}")
        for a in d["auto"]:
            page = a["url"].split("/")[-2]
            took = f"{a['page_load_ms']:.0f} ms" if "page_load_ms" in a else f"failed: {a.get('error')}"
            print(f"  auto {page}: {a['http_version']} in {took} -- {a['reason']}")
        print(f"  local pool: {d['local_pool_entries']} entries")
    print(f"\n({r['elapsed_s']:.0f} s)")
