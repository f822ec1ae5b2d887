#!/usr/bin/env python3
"""HTTP/2 page loads from four servers on one emulated path (docs/flexhttp.md, "HTTP/2 on the demo's WiFi").

Serves the same generated sites (`gearbox pages gen`) from our edge (with the kernel's unlimited unsent
buffer and with TCP_NOTSENT_LOWAT), nginx and caddy in the emulator's server namespace, and loads every
page with our client's page loader (dependency order, one connection per page load) over HTTP/2 and, from
our edge, over HTTP/1.1 and HTTP/3; prints the page load times per server and protocol. Needs root.

    scripts/h2-servers.py --emu-config EMU.toml --sites DIR --pages 8 --reps 3 --out OUT

EMU.toml is any `gearbox emu` config (e.g. the demo's WiFi phase as the lab writes it:
OUT/runs/<run>/emu.toml of `gearbox lab run`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gearbox.pages.peers import peer_command

PORT = 4433


def servers(gearbox: str, work: Path, sites: Path, cert: Path, key: Path) -> dict[str, tuple[str, list[str]]]:
    edge = f"exec {gearbox} edge --listen 10.0.0.1:{PORT} --cert {cert} --key {key} --static-dir {sites}"
    return {
        "edge-unlimited": (edge + " --tcp-notsent-lowat 0", ["tcp", "h1", "quic"]),
        "edge-lowat16k": (edge + " --tcp-notsent-lowat 16384", ["tcp", "h1"]),
        "nginx": (peer_command("nginx", work, sites, cert, key, f"10.0.0.1:{PORT}"), ["tcp"]),
        "caddy": (peer_command("caddy", work, sites, cert, key, f"10.0.0.1:{PORT}"), ["tcp"]),
    }


#: The probe: small responses asked for while a large one is being sent on the same connection.
PROBE_BIG_BYTES = 3_000_000
PROBE_SMALL_BYTES = 2_000
PROBE_SMALLS = 5
PROBE_DELAY_S = 0.3


def write_probe_files(sites: Path) -> None:
    d = sites / "probe"
    d.mkdir(exist_ok=True)
    (d / "big.bin").write_bytes(os.urandom(PROBE_BIG_BYTES))
    (d / "warm.bin").write_bytes(os.urandom(100))
    for i in range(PROBE_SMALLS):
        (d / f"small-{i}.bin").write_bytes(os.urandom(PROBE_SMALL_BYTES))


def probe(client, origin: str, proto: str, bigs: int) -> dict:
    """TTFB of small responses asked for PROBE_DELAY_S after `bigs` large ones started, on a warm
    connection."""
    import threading

    client.get(f"{origin}/probe/warm.bin", transport=proto)
    big: dict = {}

    def fetch_big(i: int) -> None:
        big[i] = client.get(f"{origin}/probe/big.bin?{i}", transport=proto)

    threads = [threading.Thread(target=fetch_big, args=(i,)) for i in range(bigs)]
    for t in threads:
        t.start()
    time.sleep(PROBE_DELAY_S)
    ttfbs = []
    for i in range(PROBE_SMALLS):
        r = client.get(f"{origin}/probe/small-{i}.bin", transport=proto)
        ttfbs.append(r.record["ttfb_ms"])
    for t in threads:
        t.join()
    return {"small_ttfb_ms": ttfbs, "big_rct_ms": max(r.record["rct_ms"] for r in big.values())}


def client_mode(spec_path: Path) -> int:
    import gearbox

    spec = json.loads(spec_path.read_text())
    origin = f"https://{os.environ.get('GEARBOX_SERVER_ADDR', '10.0.0.1')}:{PORT}"
    with (
        open(spec["out"], "a") as out,
        gearbox.Client(ca=spec["cert"], connect_timeout_s=10, request_timeout_s=120) as client,
    ):
        for rep in range(spec["reps"]):
            for proto in spec["protos"]:
                row = {"server": spec["server"], "proto": proto, "rep": rep, "kind": "probe"}
                try:
                    row |= probe(client, origin, proto, spec["probe_bigs"])
                except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
                    row["error"] = f"{type(e).__name__}: {e}"
                out.write(json.dumps(row) + "\n")
                out.flush()
        for rep in range(spec["reps"]):
            for name in spec["pages"]:
                graph = json.loads(Path(spec["sites"], f"{name}.page.json").read_text())
                for proto in spec["protos"]:
                    row = {"server": spec["server"], "proto": proto, "page": name, "rep": rep, "kind": "page"}
                    try:
                        load = client.load_page(origin, graph, transport=proto, fresh_connection=True)
                        row |= {
                            "page_load_ms": load["page_load_ms"],
                            "protocol": load["protocol"],
                            "objects": len(load["objects"]),
                            "bytes": sum(o["record"]["bytes"] for o in load["objects"]),
                            "ttfb_p50_ms": statistics.median(o["record"]["ttfb_ms"] for o in load["objects"]),
                        }
                    except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
                        row["error"] = f"{type(e).__name__}: {e}"
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--emu-config", type=Path)
    p.add_argument("--sites", type=Path)
    p.add_argument("--pages", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path)
    p.add_argument("--only", action="append", help="server name(s) to run")
    p.add_argument("--probe-bigs", type=int, default=1, help="large responses in flight during the probe")
    p.add_argument("--client-mode", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.client_mode:
        return client_mode(a.client_mode)
    gearbox = os.environ.get("GEARBOX_BIN", "gearbox")
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    sites = a.sites.resolve()
    cert, key = out / "cert.pem", out / "key.pem"
    subprocess.run([gearbox, "cert", "--name", "10.0.0.1,localhost", "--cert", cert, "--key", key], check=True)
    write_probe_files(sites)
    manifest = json.loads((sites / "pages.json").read_text())
    pages = [e["name"] for e in manifest["pages"]][: a.pages]
    results = out / "loads.jsonl"
    for name, (server, protos) in servers(gearbox, out, sites, cert, key).items():
        if a.only and name not in a.only:
            continue
        spec = out / f"{name}.json"
        spec.write_text(
            json.dumps(
                {"server": name, "protos": protos, "pages": pages, "reps": a.reps, "sites": str(sites)}
                | {"probe_bigs": a.probe_bigs}
                | {"cert": str(cert), "out": str(results)}
            )
        )
        client = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} --client-mode {spec}"
        cmd = [gearbox, "emu", "--config", str(a.emu_config), "--server", server, "--client", client]
        cmd += ["--ready-ports", f"{PORT}/tcp", "--ready-timeout-s", "20"]
        print(f"== {name}: {' '.join(protos)}", flush=True)
        with open(out / f"{name}.log", "wb") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    print(f"probe: TTFB of 2 KB responses asked for 0.3 s into {a.probe_bigs} x 3 MB responses (warm connection)")
    print(f"{'server':16s} {'proto':5s} {'smalls':>6s} {'median ms':>10s} {'max ms':>8s} {'big rct ms':>10s}")
    pk: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get("kind") == "probe" and "error" not in r:
            pk.setdefault((r["server"], r["proto"]), []).append(r)
    for k in sorted(pk):
        t = [x for r in pk[k] for x in r["small_ttfb_ms"]]
        b = statistics.median(r["big_rct_ms"] for r in pk[k])
        print(f"{k[0]:16s} {k[1]:5s} {len(t):6d} {statistics.median(t):10.1f} {max(t):8.1f} {b:10.1f}")
    rows = [r for r in rows if r.get("kind") == "page"]
    print("page loads (our client's page loader, a new connection per page)")
    groups: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    for r in rows:
        k = (r["server"], r["proto"])
        if "error" in r:
            errors[k] = errors.get(k, 0) + 1
        else:
            groups.setdefault(k, []).append(r["page_load_ms"])
    print(f"{'server':16s} {'proto':5s} {'loads':>5s} {'errors':>6s} {'median ms':>10s} {'mean ms':>9s}")
    for k in sorted(set(groups) | set(errors)):
        v = groups.get(k, [])
        med = statistics.median(v) if v else float("nan")
        mean = statistics.fmean(v) if v else float("nan")
        print(f"{k[0]:16s} {k[1]:5s} {len(v):5d} {errors.get(k, 0):6d} {med:10.1f} {mean:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
