"""`gearbox lab report OUT_DIR`: one self-contained HTML page of a lab run.

The page has the per-policy table with reductions against the baselines, the RCT
distribution of every policy, and per condition the story of the run over time: the
link rate the scenario configured (from its rate, traces and schedule, recomputed here
from the EMU.toml tables the runs used) with the goodput each policy got, the RTT and
loss, every request's RCT, and what each policy chose for each request (the client
records' `protocol` and `decision`). Then the per-condition numbers and the conditions.

Figures are matplotlib PNGs embedded as base64 so the page is one file that can be
mailed or archived; an interactive page (plotly, JS) was rejected for that reason and
for its size. Everything is read from the folder (`plan.json`, `conditions.json`,
`runs.json`, `summary.json`, `requests.parquet`): the report never reruns anything.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

MAX_TIMELINES = 8
PROTOCOL_COLORS = {"h1": "#e69f00", "h2": "#0072b2", "h3": "#009e73", None: "#999999"}


# ---------------------------------------------------------------------------------------
# The configured link over time


@dataclass
class Timeline:
    """A link's configured state sampled every `step_s` seconds."""

    t_s: np.ndarray
    rate_bps: np.ndarray
    udp_bps: np.ndarray
    tcp_bps: np.ndarray
    loss_rate: np.ndarray
    delay_ms: np.ndarray


def _read_trace(path: str, cache: dict[str, np.ndarray]) -> np.ndarray:
    """Cumulative delivery opportunities per ms of a mahimahi trace (index = ms)."""
    if path not in cache:
        stamps = np.loadtxt(path, dtype=np.int64, ndmin=1)
        period = int(stamps[-1])
        counts = np.bincount(np.minimum(stamps, period - 1), minlength=period)  # t = period wraps to 0
        cache[path] = np.concatenate([[0], np.cumsum(counts)])
    return cache[path]


def _trace_rate(cum: np.ndarray, start_ms: float, t0_ms: float, t1_ms: float) -> float:
    """Mean rate (bps) of a trace that started at `start_ms`, over [t0, t1) ms."""
    period = len(cum) - 1

    def opportunities(t: float) -> float:
        x = max(0.0, t - start_ms)
        whole, rest = divmod(int(x), period)
        return whole * cum[-1] + cum[rest]

    n = opportunities(t1_ms) - opportunities(t0_ms)
    return n * 1500 * 8 / ((t1_ms - t0_ms) / 1000.0)


def _loss_of(loss: dict[str, Any] | None) -> float:
    if not loss:
        return 0.0
    m = loss.get("model")
    if m == "bernoulli":
        return float(loss["loss_rate"])
    if m == "gilbert_elliott_mean":
        return float(loss["mean_loss_rate"])
    if m == "gilbert_elliott":
        g, b = loss["p_good_to_bad"], loss["p_bad_to_good"]
        return (b * loss["loss_in_good"] + g * loss["loss_in_bad"]) / (g + b) if g + b > 0 else loss["loss_in_good"]
    return 0.0


def _policed(rate: float, policer: dict[str, Any] | None, protocol: str) -> float:
    if not policer or policer.get("action", "none") == "none" or policer.get("protocol") != protocol:
        return rate
    a = policer["action"]
    if a == "block":
        return 0.0
    if a == "rate_limit":
        return min(rate, float(policer["rate_bps"]))
    if a == "drop":
        return rate * (1.0 - float(policer["drop_rate"]))
    return rate


def link_timeline(
    link: dict[str, Any], end_s: float, step_s: float = 0.5, cache: dict[str, np.ndarray] | None = None
) -> Timeline:
    """The configured rate, policed UDP/TCP rates, loss and one-way delay of a LinkConfig
    table (as in EMU.toml) over [0, end_s), following its `schedule`."""
    cache = {} if cache is None else cache
    state = {
        "rate_bps": link.get("rate_bps"),
        "trace": link.get("trace_file"),
        "trace_start_ms": 0.0,
        "delay_ms": float(link.get("delay_ms") or 0.0),
        "loss": link.get("loss"),
        "policer": link.get("policer"),
    }
    changes = sorted(link.get("schedule", []), key=lambda c: c["at_ms"])
    n = max(1, int(math.ceil(end_s / step_s)))
    t = np.arange(n) * step_s
    out = {k: np.zeros(n) for k in ("rate", "udp", "tcp", "loss", "delay")}
    ci = 0
    for i, ts in enumerate(t):
        t0, t1 = ts * 1000.0, (ts + step_s) * 1000.0
        while ci < len(changes) and changes[ci]["at_ms"] <= t0:
            c = changes[ci]
            if "rate_bps" in c:
                state["rate_bps"], state["trace"] = c["rate_bps"], None
            if "trace_file" in c:
                state["rate_bps"], state["trace"], state["trace_start_ms"] = None, c["trace_file"], c["at_ms"]
            for k in ("delay_ms", "loss", "policer"):
                if k in c:
                    state[k] = c[k]
            ci += 1
        if state["trace"]:
            rate = _trace_rate(_read_trace(state["trace"], cache), state["trace_start_ms"], t0, t1)
        else:
            rate = float(state["rate_bps"] or 0.0)
        out["rate"][i] = rate
        out["udp"][i] = _policed(rate, state["policer"], "udp")
        out["tcp"][i] = _policed(rate, state["policer"], "tcp")
        out["loss"][i] = _loss_of(state["loss"])
        out["delay"][i] = float(state["delay_ms"] or 0.0)
    return Timeline(t, out["rate"], out["udp"], out["tcp"], out["loss"], out["delay"])


def condition_paths(emu: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, uplink, downlink) of each path of an EMU config (population: the default prefix link)."""
    if emu.get("topology") == "population":
        pop = emu["population"]
        return [("prefix link", pop["uplink"], pop["downlink"])]
    return [(p.get("name", f"path{i}"), p["uplink"], p["downlink"]) for i, p in enumerate(emu["path"])]


# ---------------------------------------------------------------------------------------
# Figures


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _policy_colors(policies: list[str]) -> dict[str, str]:
    palette = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442", "#000000"]
    return {p: palette[i % len(palette)] for i, p in enumerate(policies)}


def _client_ok(rows: dict[str, list[Any]], mask: np.ndarray) -> np.ndarray:
    side = np.array(rows["side"], dtype=object)
    err = np.array(rows["error"], dtype=object)
    rct = np.array([np.nan if v is None else v for v in rows["rct_ms"]], dtype=float)
    return mask & (side == "client") & np.array([e is None for e in err], dtype=bool) & np.isfinite(rct)


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no successful requests", ha="center", va="center", transform=ax.transAxes, color="#777")


def cdf_figure(rows: dict[str, list[Any]], policies: list[str], colors: dict[str, str], title: str) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    pol = np.array(rows["policy"], dtype=object)
    rct = np.array([np.nan if v is None else v for v in rows["rct_ms"]], dtype=float)
    drawn = False
    for p in policies:
        ok = _client_ok(rows, pol == p)
        v = np.sort(rct[ok])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=colors[p], label=f"{p} (n={v.size})")
            drawn = True
    if not drawn:
        _no_data(ax)
        return _png(fig)
    ax.set_xscale("log")
    ax.set_xlabel("request completion time (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title)
    return _png(fig)


def timeline_figure(
    cond: dict[str, Any],
    rows: dict[str, list[Any]],
    policies: list[str],
    colors: dict[str, str],
    end_s: float,
    reps: int,
) -> str:
    """Four panels sharing time: configured rate + goodput, RTT + loss, RCT per request,
    protocol per request."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True, gridspec_kw={"height_ratios": [3, 2, 3, 2]})
    ax_rate, ax_rtt, ax_rct, ax_choice = axes
    cache: dict[str, np.ndarray] = {}
    loss_ax = ax_rtt.twinx()
    for name, up, down in condition_paths(cond["emu"]):
        tl = link_timeline(down, end_s, cache=cache)
        tu = link_timeline(up, end_s, cache=cache)
        ax_rate.step(
            tl.t_s, tl.rate_bps / 1e6, where="post", color="black", lw=1.5, label=f"{name}: configured rate (down)"
        )
        if np.any(tl.udp_bps != tl.rate_bps):
            ax_rate.step(
                tl.t_s, tl.udp_bps / 1e6, where="post", color="red", ls="--", lw=1.2, label=f"{name}: UDP after policer"
            )
        if np.any(tl.tcp_bps != tl.rate_bps):
            ax_rate.step(
                tl.t_s,
                tl.tcp_bps / 1e6,
                where="post",
                color="purple",
                ls="--",
                lw=1.2,
                label=f"{name}: TCP after policer",
            )
        ax_rtt.step(tl.t_s, tl.delay_ms + tu.delay_ms, where="post", color="black", label=f"{name}: base RTT")
        loss_ax.step(tl.t_s, 100 * tl.loss_rate, where="post", color="red", ls=":", label=f"{name}: loss (down)")
    pol = np.array(rows["policy"], dtype=object)
    cond_mask = np.array(rows["condition_id"], dtype=object) == cond["condition_id"]
    t = np.array([np.nan if v is None else v for v in rows["t_s"]], dtype=float)
    rct = np.array([np.nan if v is None else v for v in rows["rct_ms"]], dtype=float)
    nbytes = np.array([0 if v is None else v for v in rows["bytes"]], dtype=float)
    protocol = np.array(rows["protocol"], dtype=object)
    bins = np.arange(0.0, end_s + 1.0, 1.0)
    for k, p in enumerate(policies):
        ok = _client_ok(rows, cond_mask & (pol == p))
        done = t[ok] + rct[ok] / 1000.0
        got, _ = np.histogram(done, bins=bins, weights=nbytes[ok])
        ax_rate.plot(
            bins[:-1] + 0.5, got * 8 / 1e6 / max(1, reps), color=colors[p], lw=1, alpha=0.9, label=f"goodput {p}"
        )
        ax_rct.scatter(t[ok], rct[ok], s=9, color=colors[p], alpha=0.7, label=p)
        mine = cond_mask & (pol == p) & (np.array(rows["side"], dtype=object) == "client")
        for proto in dict.fromkeys(protocol[mine]):
            sel = mine & np.array([x == proto for x in protocol], dtype=bool)
            ax_choice.scatter(
                t[sel], np.full(sel.sum(), k), s=14, marker="|", color=PROTOCOL_COLORS.get(proto, "#999999")
            )
    ax_rate.set_ylabel("Mbit/s")
    ax_rate.set_title(f"{cond['condition_id']}: {cond['label']}")
    ax_rate.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_rate.grid(True, alpha=0.3)
    ax_rtt.set_ylabel("base RTT (ms)")
    loss_ax.set_ylabel("loss (%)", color="red")
    ax_rtt.grid(True, alpha=0.3)
    lines = ax_rtt.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    labels = ax_rtt.get_legend_handles_labels()[1] + loss_ax.get_legend_handles_labels()[1]
    ax_rtt.legend(lines, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.08, 1.0))
    if _client_ok(rows, cond_mask).any():
        ax_rct.set_yscale("log")
        ax_rct.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        _no_data(ax_rct)
    ax_rct.set_ylabel("RCT (ms, log)")
    ax_rct.grid(True, which="both", alpha=0.3)
    ax_choice.set_yticks(range(len(policies)), policies)
    ax_choice.set_ylim(-0.6, len(policies) - 0.4)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=c, marker="|", ls="", markersize=10, label=str(k)) for k, c in PROTOCOL_COLORS.items() if k
    ]
    ax_choice.legend(handles=handles, title="protocol", fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_choice.set_xlabel("seconds since the links started (request send time)")
    ax_choice.set_title("choice per request", fontsize=9)
    ax_choice.set_xlim(0, end_s)
    return _png(fig)


def by_condition_figure(summary: dict[str, Any], policies: list[str], colors: dict[str, str]) -> str:
    import matplotlib.pyplot as plt

    conds = list(dict.fromkeys(r["condition_id"] for r in summary["by_condition"]))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(conds) * len(policies)), 4.2))
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(conds))
    for k, p in enumerate(policies):
        med = [
            next((r["median_ms"] for r in summary["by_condition"] if r["condition_id"] == c and r["policy"] == p), None)
            for c in conds
        ]
        p90 = [
            next((r["p90_ms"] for r in summary["by_condition"] if r["condition_id"] == c and r["policy"] == p), None)
            for c in conds
        ]
        med_v = np.array([np.nan if v is None else v for v in med])
        p90_v = np.array([np.nan if v is None else v for v in p90])
        ax.bar(x + k * width, med_v, width, color=colors[p], label=f"{p} median")
        ax.scatter(x + k * width, p90_v, color=colors[p], marker="_", s=120, label=f"{p} p90")
    ax.set_xticks(x + width * (len(policies) - 1) / 2, conds, rotation=60 if len(conds) > 8 else 0)
    if not any(r["median_ms"] for r in summary["by_condition"]):
        _no_data(ax)
        return _png(fig)
    ax.set_yscale("log")
    ax.set_ylabel("RCT (ms, log)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("median (bar) and p90 (tick) RCT per condition")
    return _png(fig)


# ---------------------------------------------------------------------------------------
# The page


def _table(head: list[str], body: list[list[Any]], cls: str = "") -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in body)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } .muted { color: #777; } pre { background: #f7f7f7; padding: .6em; overflow-x: auto; }
"""


def write_report(out: Path) -> Path:
    """Writes OUT/report.html from a lab folder and returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    from gearbox.lab.collect import collect, read_json, read_lab_folder, read_results_table
    from gearbox.lab.scenario import dumps_toml
    from gearbox.lab.summary import PATH_TABLE_HEAD, path_table_rows, summarize

    out = Path(out)
    lab = read_lab_folder(out)
    plan, conds, runs = lab.plan, lab.conditions, lab.runs
    if not (out / "requests.parquet").exists():
        collect(out)
    summary = read_json(out / "summary.json", dict) if (out / "summary.json").exists() else summarize(out)
    table = read_results_table(out)
    need = ("policy", "side", "error", "rct_ms", "t_s", "bytes", "protocol", "decision", "condition_id")
    rows = {k: table.column(k).to_pylist() if k in table.column_names else [None] * table.num_rows for k in need}
    policies = [p["name"] for p in plan["policies"]]
    colors = _policy_colors(policies)
    end_s = float(plan["duration_s"]) * max(1.0, float(plan["workload"].get("time_scale", 1.0))) + 5.0
    if rows["t_s"] and any(v is not None for v in rows["t_s"]):
        end_s = max(end_s, max(v for v in rows["t_s"] if v is not None) + 1.0)
    end_s = min(end_s, float(plan["timeout_s"]))

    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>gearbox lab: {html.escape(plan['scenario'])}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>gearbox lab: {html.escape(plan['scenario'])}</h1>",
        f"<p>{html.escape(plan.get('description') or '')}</p>",
        f"<p class='muted'>report written {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} "
        f"from {html.escape(str(out))}; "
        f"topology {plan['topology']}, workload {html.escape(Path(plan['workload']['name']).name)}, "
        f"{plan['duration_s']:g} s per run, {plan['repetitions']} repetition(s), seed {plan['seed']}, "
        f"{len(conds)} condition(s), {summary['runs']['total']} runs ({summary['runs']['ok']} ok, "
        f"{summary['runs']['timeout']} timed out, {summary['runs']['failed']} failed).</p>",
    ]

    parts.append("<h2>Request completion time per policy</h2>")
    parts.append(
        "<p>All conditions and repetitions pooled; every policy saw the same requests on the same links. "
        "Baselines are marked *. Reduction = 1 &minus; policy / baseline (positive: faster).</p>"
    )
    head = ["policy", "label", "proto", "requests", "errors", "mean ms", "median ms", "p90 ms", "p99 ms"]
    body = [
        [
            p["policy"] + (" *" if p["baseline"] else ""),
            p["label"],
            p["proto"],
            p["requests"],
            p["errors"],
            _ms(p["mean_ms"]),
            _ms(p["median_ms"]),
            _ms(p["p90_ms"]),
            _ms(p["p99_ms"]),
        ]
        for p in summary["policies"]
    ]
    parts.append(_table(head, body))
    if summary["reductions"]:
        pairs = list(dict.fromkeys((r["policy"], r["baseline"]) for r in summary["reductions"]))
        body = []
        for pol, base in pairs:
            vals = {
                r["statistic"]: r["reduction"]
                for r in summary["reductions"]
                if r["policy"] == pol and r["baseline"] == base
            }
            body.append([pol, base, *(_pct(vals.get(s)) for s in summary["statistics"])])
        parts.append(_table(["policy", "vs baseline", *summary["statistics"]], body))
    if summary.get("by_phase"):
        parts.append("<p>Median / p90 RCT (ms) in each phase of the schedule (requests by send time):</p>")
        spans = list(dict.fromkeys((x["start_s"], x["end_s"], x["phase"]) for x in summary["by_phase"]))
        body = []
        for start, end, label in spans:
            cells: list[Any] = [label, f"{start:g}-{'end' if end is None else f'{end:g}'} s"]
            for p in policies:
                st = next(x for x in summary["by_phase"] if x["start_s"] == start and x["policy"] == p)
                cells.append(f"{_ms(st['median_ms'])} / {_ms(st['p90_ms'])}")
            body.append(cells)
        parts.append(_table(["phase", "time", *policies], body))
    if summary.get("by_path"):
        parts.append("<p>Requests (share) and median / p90 RCT (ms) on each path of the multipath client:</p>")
        parts.append(_table(list(PATH_TABLE_HEAD), path_table_rows(summary["by_path"])))
    parts.append(_img(cdf_figure(rows, policies, colors, "RCT distribution, all conditions"), "RCT CDF"))

    if len(conds) > 1:
        parts.append("<h2>Per condition</h2>")
        parts.append(_img(by_condition_figure(summary, policies, colors), "RCT per condition"))
        head = ["condition", "parameters"] + [f"{p} median / p90 ms" for p in policies]
        body = []
        for c in conds:
            cells: list[Any] = [c["condition_id"], c["label"]]
            for p in policies:
                r = next(
                    (x for x in summary["by_condition"] if x["condition_id"] == c["condition_id"] and x["policy"] == p),
                    None,
                )
                cells.append("-" if r is None else f"{_ms(r['median_ms'])} / {_ms(r['p90_ms'])}")
            body.append(cells)
        parts.append(_table(head, body))

    parts.append("<h2>Over time</h2>")
    parts.append(
        "<p>Configured link (rate of the server&rarr;client direction from its rate, trace and schedule; "
        "the UDP or TCP rate a policer leaves; base RTT and loss), the goodput each policy got (response "
        "bytes by completion time, 1 s bins, averaged over repetitions), every request's RCT at its send "
        "time, and the protocol each request used. Times are from the emulator's start (&plusmn;0.1 s).</p>"
    )
    for c in conds[:MAX_TIMELINES]:
        parts.append(
            _img(
                timeline_figure(c, rows, policies, colors, end_s, int(plan["repetitions"])),
                f"timeline {c['condition_id']}",
            )
        )
    if len(conds) > MAX_TIMELINES:
        parts.append(f"<p class='muted'>Timelines of the first {MAX_TIMELINES} of {len(conds)} conditions only.</p>")
    decisions: dict[str, dict[str, int]] = {}
    for pol, side, dec in zip(rows["policy"], rows["side"], rows["decision"], strict=True):
        if side == "client":
            decisions.setdefault(pol, {}).setdefault(str(dec), 0)
            decisions[pol][str(dec)] += 1
    parts.append(
        _table(
            ["policy", "decisions (client records' `decision`: count)"],
            [[p, ", ".join(f"{d}: {n}" for d, n in sorted(decisions.get(p, {}).items()))] for p in policies],
        )
    )

    parts.append("<h2>Runs</h2>")
    body = [
        [
            r["run_id"],
            r["policy"],
            r["repetition"],
            r["status"],
            r["exit_code"],
            f"{r['wall_s']:.1f}",
            r["client_records"],
            r["edge_records"],
            r["link_seed"],
            r["workload_seed"],
        ]
        for r in runs
    ]
    parts.append(
        _table(
            [
                "run",
                "policy",
                "rep",
                "status",
                "exit",
                "wall s",
                "client records",
                "edge records",
                "link seed",
                "workload seed",
            ],
            body,
        )
    )
    for r in runs:
        if r["status"] != "ok":
            parts.append(f"<p class='muted'>{html.escape(r['run_id'])}: {html.escape(r['message'])}</p>")

    controlled = [(r, lab.run_dir(r) / "control.json") for r in runs if (lab.run_dir(r) / "control.json").exists()]
    if controlled:
        # lab/control.py: what each run's control plane stored, and which version decided.
        parts.append("<h2>Control plane</h2>")
        body = []
        for r, path in controlled:
            c = read_json(path, dict)
            sides = c.get("sides", {})
            body.append(
                [
                    r["run_id"],
                    "; ".join(
                        f"{side}: {v['written']} written, {v['stored']} stored, "
                        f"{v['missing']} missing, {v['twice']} twice"
                        for side, v in sides.items()
                    ),
                    "; ".join(
                        f"{p['gear']} at {p['after_s']:.1f} s{'' if p.get('ok') else ' (failed)'}"
                        for p in c.get("pushed", [])
                    ),
                    ", ".join(
                        f"{'no registry version' if k == 'none' else 'v' + k}: {n}"
                        for k, n in c.get("client_requests_by_policy_version", {}).items()
                    ),
                    ", ".join(f"table {k}: {n}" for k, n in c.get("edge_records_by_table_version", {}).items()),
                ]
            )
        parts.append(
            _table(
                [
                    "run",
                    "records (each stored once?)",
                    "pushes",
                    "client requests per policy version",
                    "edge requests per Cwnd Table version",
                ],
                body,
            )
        )

    parts.append("<h2>Policies and conditions</h2>")
    parts.append(
        _table(
            ["policy", "proto", "load args", "edge args", "baseline"],
            [
                [p["name"], p["proto"], " ".join(p["load_args"]), " ".join(p["edge_args"]), p["baseline"]]
                for p in plan["policies"]
            ],
        )
    )
    for c in conds:
        parts.append(
            f"<details><summary>{html.escape(c['condition_id'])}: {html.escape(c['label'])}</summary>"
            f"<pre>{html.escape(dumps_toml(c['emu']))}</pre></details>"
        )
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts))
    return path
