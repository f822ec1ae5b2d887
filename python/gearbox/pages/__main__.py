"""`gearbox pages` (also `python -m gearbox.pages`): the page kit (docs/flexhttp.md "Page kit").

    gearbox pages gen --out DIR --count N [--seed S]   # N sites: DIR/page-NNNN/, their graphs, DIR/pages.json
    gearbox pages features SITE_DIR                    # Table 1's page features of a site, as JSON
    gearbox pages stats DIR                            # the set's statistics against FlexHTTP's Table 1
    gearbox pages measure --sites DIR --page page-0000 [--page ...] --rtt-ms 80 --loss 0.005 --rate-mbps 7 \
        [--http h2 --http h3 --http chromium] [--reps 3] [--meter lighthouse|speedline] [--visits 2] \
        [--server edge|nginx|caddy] --out loads.jsonl  # Speed Index in Chromium through the emulator (root)

A site is served as static files (`gearbox edge --static-dir DIR`, then /page-NNNN/index.html);
`DIR/page-NNNN.page.json` is the same page as a dependency graph for `Client.load_page`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from gearbox.pages.chromium import VERSIONS, BrowserError, Condition, measure_over_emu, run_loads
from gearbox.pages.features import PageFeatureError, page_features
from gearbox.pages.generate import MANIFEST, GenerateError, generate
from gearbox.pages.peers import PEERS

#: FlexHTTP Table 1 (mean, std, max); MB = 10^6 bytes.
TABLE1 = {
    "all_files": (36.06, 25, 255),
    "all_bytes": (1.08e6, 0.56e6, 22.99e6),
    "css_files": (2.28, 2, 37),
    "css_bytes": (0.04e6, 0.03e6, 0.41e6),
    "js_files": (5.66, 4, 55),
    "js_bytes": (0.18e6, 0.10e6, 1.53e6),
    "image_files": (24.58, 10, 231),
    "image_bytes": (0.72e6, 0.20e6, 22.64e6),
}


def stats_table(features: list[dict]) -> str:
    lines = [f"{'feature':12s} {'mean':>11s} {'median':>11s} {'std':>11s} {'max':>11s}   Table 1 mean / std / max"]
    for key, (m, s, mx) in TABLE1.items():
        v = [f[key] for f in features]
        lines.append(
            f"{key:12s} {statistics.fmean(v):11.1f} {statistics.median(v):11.1f} {statistics.pstdev(v):11.1f} "
            f"{max(v):11.0f}   {m:g} / {s:g} / {mx:g}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    prog = os.environ.get("GEARBOX_PAGES_PROG", "python -m gearbox.pages")
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gen", help="generate seeded sites")
    g.add_argument("--out", type=Path, required=True, help="directory to create (must be empty if it exists)")
    g.add_argument("--count", type=int, required=True, help="number of pages")
    g.add_argument("--seed", type=int, default=1, help="seed of the set (default 1)")
    f = sub.add_parser("features", help="page features of a site directory")
    f.add_argument("site", type=Path)
    s = sub.add_parser("stats", help="statistics of a generated set against Table 1")
    s.add_argument("dir", type=Path)
    m = sub.add_parser("measure", help="Speed Index of pages in Chromium over h2/h3 through the emulator (root)")
    m.add_argument("--sites", type=Path, required=True, help="directory written by `gearbox pages gen`")
    m.add_argument("--page", action="append", required=True, help="page name (repeatable), e.g. page-0000")
    m.add_argument("--rtt-ms", type=float, required=True)
    m.add_argument("--loss", type=float, default=0.0, help="loss rate each way, e.g. 0.01")
    m.add_argument("--rate-mbps", type=float, required=True)
    m.add_argument(
        "--http",
        action="append",
        choices=list(VERSIONS),
        help="version(s): h2 and h3 forced (the default: both), chromium = Chromium's own choice (HTTP/2 on "
        "a first visit, HTTP/3 after Alt-Svc; speedline meter only)",
    )
    m.add_argument("--visits", type=int, default=2, help="chromium: visits per load by one browser profile (default 2)")
    m.add_argument(
        "--server",
        choices=["edge", *PEERS],
        default="edge",
        help="who serves the sites: our edge (default) or a peer's HTTP/2 server (h2 only)",
    )
    m.add_argument(
        "--edge-arg",
        action="append",
        default=[],
        help="an argument for our edge, e.g. --edge-arg=--tcp-cc=system (repeatable)",
    )
    m.add_argument("--reps", type=int, default=1)
    m.add_argument("--seed", type=int, default=0, help="seed of the emulated loss")
    m.add_argument(
        "--meter",
        choices=["lighthouse", "speedline"],
        default="lighthouse",
        help="lighthouse (one Lighthouse run per load, the reference) or speedline (one Chromium per batch)",
    )
    m.add_argument("--settle-ms", type=int, default=1000, help="speedline: visual changes counted after load")
    m.add_argument("--out", type=Path, required=True, help="JSON lines, one per load (appended)")
    m.add_argument("--workdir", type=Path, default=None, help="certificate, emu config, edge telemetry")
    b = sub.add_parser("browse", help=argparse.SUPPRESS)
    b.add_argument("spec", type=Path)
    a = parser.parse_args(argv)
    try:
        if a.command == "gen":
            entries = generate(a.out, a.count, a.seed)
            print(f"wrote {len(entries)} pages to {a.out} ({a.out / MANIFEST})")
            print(stats_table([e["features"] for e in entries]))
        elif a.command == "features":
            print(json.dumps(page_features(a.site).as_dict(), indent=1))
        elif a.command == "stats":
            manifest = a.dir / MANIFEST
            if not manifest.is_file():
                raise GenerateError(f"{manifest}: no such file (not a directory written by `gearbox pages gen`)")
            pages = json.loads(manifest.read_text())["pages"]
            print(stats_table([page_features(a.dir / p["name"]).as_dict() for p in pages]))
        elif a.command == "measure":
            from gearbox.lab.environment import find_gearbox

            cond = Condition(rtt_ms=a.rtt_ms, loss_rate=a.loss, rate_mbps=a.rate_mbps)
            workdir = a.workdir or a.out.with_suffix(".work")
            return measure_over_emu(
                find_gearbox(),
                a.sites,
                a.page,
                cond,
                a.http or ["h2", "h3"],
                a.reps,
                a.out,
                workdir,
                a.seed,
                meter=a.meter,
                settle_ms=a.settle_ms,
                visits=a.visits,
                server=a.server,
                edge_args=a.edge_arg,
            )
        elif a.command == "browse":
            return run_loads(a.spec)
    except (GenerateError, PageFeatureError, BrowserError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
