"""The WiseTrans Feature Extractor in Python (WiseTrans §III-B, Table I, and gearbox's four
additions): the same definitions and the same arithmetic as
crates/gearbox-gears/src/transport/features.rs, line for line.

The dataset takes its features from the Rust code itself (`gearbox._native.wisetrans_features`,
so training and the gear cannot drift); this transcription exists so that the definitions
are readable in Python and so that both implementations are checked against one test-vector
file, `crates/gearbox-gears/tests/vectors/wisetrans_features.json`, which the Rust tests
(`cargo test -p gearbox-gears --test feature_vectors`) and python/tests/test_wisetrans.py
both read.

    python -m gearbox.wisetrans.features --write-vectors   # regenerate the vector file

The vectors' expected values are this module's; the tests also check a few of them against
numbers worked out by hand, so the file cannot just repeat a bug of both.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
VECTORS = REPO_ROOT / "crates/gearbox-gears/tests/vectors/wisetrans_features.json"

# features.rs FEATURE_NAMES: Table I's seven, then gearbox's four.
FEATURE_NAMES = (
    "retran_rate",
    "rtt_avg_ms",
    "resp_rec_goodput_mbps",
    "ttfb_avg_ms",
    "ttfb_ms",
    "ttfb_rate",
    "req_cmpl_goodput_mbps",
    "ttfb_rtt_ratio",
    "cost_rtt_ratio",
    "fail_rate",
    "loss_streak",
)
COST_NORM_BYTES = 14_600.0  # features.rs COST_NORM_BYTES: the initial window, ten 1460-byte segments
MAX_CONNS = 512  # features.rs MAX_CONNS
NAN = float("nan")


def transport_of(protocol: str) -> str:
    """h1/h2 -> tcp, h3 -> quic (gearbox_gear_api::Transport::of)."""
    return "quic" if protocol == "h3" else "tcp"


def _finite_nonneg(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) and v >= 0 else None


@dataclass
class _Sample:
    at_ms: float
    ok: bool
    rct_ms: float
    ttfb_ms: float
    bytes: float
    rtt_ms: float
    sent: float
    lost: float
    lossy: bool


class _Sums:
    def __init__(self) -> None:
        self.sent = self.lost = self.rtt = self.rtt_n = self.ttfb = self.ttfb_n = 0.0
        self.ok_n = self.ok_bytes = self.rct = self.recv_bytes = self.recv_ms = self.cost = 0.0

    def apply(self, s: _Sample, sign: float) -> None:
        self.sent += sign * s.sent
        self.lost += sign * s.lost
        if math.isfinite(s.rtt_ms):
            self.rtt += sign * s.rtt_ms
            self.rtt_n += sign
        if s.ok:
            self.ok_n += sign
            self.ok_bytes += sign * s.bytes
            self.rct += sign * s.rct_ms
            self.cost += sign * s.rct_ms / (1.0 + s.bytes / COST_NORM_BYTES)
            if math.isfinite(s.ttfb_ms):
                self.ttfb += sign * s.ttfb_ms
                self.ttfb_n += sign
                interval = s.rct_ms - s.ttfb_ms
                if interval >= 0.0:
                    self.recv_bytes += sign * s.bytes
                    self.recv_ms += sign * interval


class _Window:
    def __init__(self) -> None:
        self.samples: deque[_Sample] = deque()
        self.sums = _Sums()

    def push(self, s: _Sample, cap: int) -> None:
        self.sums.apply(s, 1.0)
        self.samples.append(s)
        while len(self.samples) > max(cap, 1):
            self.pop()

    def pop(self) -> None:
        if self.samples:
            self.sums.apply(self.samples.popleft(), -1.0)
        if not self.samples:
            self.sums = _Sums()  # start exact again, as features.rs does

    def evict(self, now_ms: float, window_ms: float) -> None:
        while self.samples and max(0.0, now_ms - self.samples[0].at_ms) > window_ms:
            self.pop()

    def features(self) -> dict[str, float]:
        s = self.sums

        def div(a: float, b: float) -> float:
            return a / b if b > 0.0 else NAN

        ttfb_ms = next((x.ttfb_ms for x in reversed(self.samples) if x.ok and math.isfinite(x.ttfb_ms)), NAN)
        ttfb_avg_ms = div(s.ttfb, s.ttfb_n)
        rtt_avg_ms = div(s.rtt, s.rtt_n)
        n = float(len(self.samples))
        ok_n = max(0.0, float(round(s.ok_n)))
        streak = 0
        for x in reversed(self.samples):
            if not x.lossy:
                break
            streak += 1
        return {
            "retran_rate": div(s.lost, s.sent),
            "rtt_avg_ms": rtt_avg_ms,
            "resp_rec_goodput_mbps": div(s.recv_bytes * 8.0, s.recv_ms * 1e3),
            "ttfb_avg_ms": ttfb_avg_ms,
            "ttfb_ms": ttfb_ms,
            "ttfb_rate": div(ttfb_ms, ttfb_avg_ms),
            "req_cmpl_goodput_mbps": div(s.ok_bytes * 8.0, s.rct * 1e3),
            "ttfb_rtt_ratio": div(ttfb_avg_ms, rtt_avg_ms),
            "cost_rtt_ratio": div(div(s.cost, ok_n), rtt_avg_ms),
            "fail_rate": div(n - ok_n, n),
            "loss_streak": float(streak) if self.samples else NAN,
            "requests": len(self.samples),
            "ok_requests": int(ok_n),
        }


class FeatureExtractor:
    """features.rs `FeatureExtractor`, with time as milliseconds (a float) instead of `Instant`."""

    def __init__(self, window_ms: float = 10_000.0, max_requests: int = 256) -> None:
        self.window_ms = window_ms
        self.max_requests = max_requests
        self.windows = {"tcp": _Window(), "quic": _Window()}
        self.conns: dict[int, tuple[int, int, float]] = {}

    def observe(self, record: dict[str, Any], now_ms: float) -> str:
        transport = transport_of(record.get("protocol", ""))
        sent, lost = self._deltas(record, now_ms)
        rct = record.get("rct_ms")
        ok = record.get("error") is None and isinstance(rct, int | float) and math.isfinite(rct)
        snap = record.get("transport") or {}
        rtt = _finite_nonneg(snap.get("rtt_ms")) if record.get("transport") else None
        ttfb = _finite_nonneg(record.get("ttfb_ms"))
        sample = _Sample(
            at_ms=now_ms,
            ok=ok,
            rct_ms=_finite_nonneg(rct) or 0.0,
            ttfb_ms=NAN if ttfb is None else ttfb,
            bytes=float(record.get("bytes", 0)),
            rtt_ms=NAN if rtt is None else rtt,
            sent=float(sent),
            lost=float(lost),
            lossy=not ok or lost > 0,
        )
        w = self.windows[transport]
        w.evict(now_ms, self.window_ms)
        w.push(sample, self.max_requests)
        return transport

    def features(self, transport: str, now_ms: float) -> dict[str, float]:
        w = self.windows[transport]
        w.evict(now_ms, self.window_ms)
        return w.features()

    def _deltas(self, record: dict[str, Any], now_ms: float) -> tuple[int, int]:
        t = record.get("transport")
        conn = int(record.get("conn_id", 0))
        if not t or conn == 0:
            return 0, 0
        if len(self.conns) >= MAX_CONNS and conn not in self.conns:
            horizon = self.window_ms * 2
            self.conns = {k: c for k, c in self.conns.items() if max(0.0, now_ms - c[2]) <= horizon}
            if len(self.conns) >= MAX_CONNS:
                self.conns.clear()
        sent, lost = int(t["sent_packets"]), int(t["lost_packets"])
        prev = self.conns.get(conn)
        self.conns[conn] = (sent, lost, now_ms)
        if prev is not None and sent >= prev[0] and lost >= prev[1]:
            return sent - prev[0], lost - prev[1]
        return sent, lost


def completion_ms(r: dict[str, Any]) -> float:
    """A record's time in the replay: `time_unix_ms + rct_ms` when it completed, else its send time."""
    rct = r.get("rct_ms")
    if r.get("error") is None and isinstance(rct, int | float) and math.isfinite(rct) and rct >= 0:
        return float(r["time_unix_ms"]) + float(rct)
    return float(r["time_unix_ms"])


def replay(protocol: str, records: list[dict[str, Any]], window_ms: float = 10_000.0, max_requests: int = 256):
    """What `gearbox._native.wisetrans_features` returns: every record observed in completion
    order, then `protocol`'s features, one dict per record in the input's order."""
    order = sorted(range(len(records)), key=lambda i: completion_ms(records[i]))
    fx = FeatureExtractor(window_ms, max_requests)
    t0 = min((completion_ms(r) for r in records), default=0.0)
    out: list[dict[str, float]] = [{} for _ in records]
    for i in order:
        now = max(0.0, completion_ms(records[i]) - t0)
        fx.observe(records[i], now)
        out[i] = fx.features(protocol, now)
    return out


# ---------------------------------------------------------------------------- test vectors


def _record(
    proto: str,
    rct: float | None,
    ttfb: float | None,
    size: int,
    conn: int,
    rtt: float | None = 40.0,
    sent: int = 0,
    lost: int = 0,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "side": "client",
        "schema": 1,
        "time_unix_ms": 0.0,
        "conn_id": conn,
        "server_addr": "10.0.0.1:4433",
        "local_addr": "100.64.0.1:5000",
        "protocol": proto,
        "method": "GET",
        "url": "https://10.0.0.1:4433/bytes/1",
        "status": None if error else 200,
        "bytes": 0 if error else size,
        "rct_ms": None if error else rct,
        "ttfb_ms": None if error else ttfb,
        "new_connection": False,
        "handshake_ms": None,
        "transport": None
        if rtt is None
        else {
            "cc": "cubic",
            "rtt_ms": rtt,
            "min_rtt_ms": rtt,
            "rttvar_ms": None,
            "cwnd_bytes": 14600,
            "sent_packets": sent,
            "lost_packets": lost,
            "congestion_events": None,
            "unacked_bytes": None,
            "delivery_rate_bps": None,
        },
        "decision": None,
        "click": None,
        "error": error,
    }


def vector_steps() -> list[tuple[float, dict[str, Any], str]]:
    """(at_ms, record, protocol queried after it): a TCP connection losing packets, a QUIC one
    whose requests stall then fail (a policed, then blocked, UDP path), a record without a
    transport snapshot, a counter reset (a new connection under an old id), the window's
    10 s eviction (one step exactly at the boundary, one just past it) and a query of the
    protocol that did not just get a record."""
    steps: list[tuple[float, dict[str, Any], str]] = []
    # TCP, connection 7: 100 sent / 2 lost, then 300 / 5, then no new loss.
    steps.append((0.0, _record("h2", 120.0, 60.0, 20_000, 7, 40.0, 100, 2), "tcp"))
    steps.append((500.0, _record("h2", 80.0, 45.0, 5_000, 7, 42.0, 300, 5), "tcp"))
    steps.append((900.0, _record("h1", 200.0, 90.0, 45_000, 7, 44.0, 420, 5), "tcp"))
    # QUIC, connection 9: clean, then losses, then a failure (blocked UDP).
    steps.append((1_000.0, _record("h3", 60.0, 30.0, 10_000, 9, 30.0, 50, 0), "quic"))
    steps.append((2_000.0, _record("h3", 900.0, 700.0, 30_000, 9, 35.0, 90, 4), "quic"))
    steps.append((3_000.0, _record("h3", 1_500.0, 1_200.0, 12_000, 9, 38.0, 120, 9), "quic"))
    steps.append((4_000.0, _record("h3", None, None, 0, 9, 38.0, 125, 14, error="quic: path silent"), "quic"))
    # No transport snapshot: counts as a request, adds nothing to loss or RTT.
    steps.append((4_500.0, _record("h3", 400.0, 100.0, 8_000, 10, None), "quic"))
    # Connection 7 again with smaller counters: a new connection reusing the id.
    steps.append((5_000.0, _record("h2", 150.0, 70.0, 14_600, 7, 50.0, 30, 1), "tcp"))
    # The TCP window seen from a QUIC record's arrival.
    steps.append((6_000.0, _record("h3", 70.0, 35.0, 2_000, 9, 33.0, 140, 14), "tcp"))
    # 10 s after the first record: still inside (eviction is strictly after the window).
    steps.append((10_000.0, _record("h2", 90.0, 50.0, 1_000, 11, 45.0, 20, 0), "tcp"))
    # Just past it: the first record leaves.
    steps.append((10_001.0, _record("h2", 95.0, 40.0, 1_500, 11, 46.0, 40, 0), "tcp"))
    # Much later: QUIC's old records have all left; only the new one counts.
    steps.append((20_000.0, _record("h3", 50.0, 25.0, 3_000, 12, 25.0, 10, 1), "quic"))
    steps.append((25_000.0, _record("h3", 55.0, 28.0, 3_000, 12, 26.0, 20, 1), "quic"))
    return steps


def vectors() -> dict[str, Any]:
    fx = FeatureExtractor(10_000.0, 256)
    out = []
    for at_ms, record, query in vector_steps():
        fx.observe(record, at_ms)
        f = fx.features(query, at_ms)
        out.append(
            {
                "at_ms": at_ms,
                "record": record,
                "query": query,
                "expect": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in f.items()},
            }
        )
    return {
        "about": "WiseTrans feature vectors: observe each record at at_ms (ms after the start), then the "
        "features of `query`; null = missing (NaN). Written by `python -m gearbox.wisetrans.features "
        "--write-vectors`; read by crates/gearbox-gears/tests/feature_vectors.rs and "
        "python/tests/test_wisetrans.py.",
        "window_ms": 10_000.0,
        "max_requests": 256,
        "feature_names": list(FEATURE_NAMES),
        "steps": out,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gearbox.wisetrans.features", description=__doc__.split("\n")[0])
    p.add_argument("--write-vectors", action="store_true", help=f"write {VECTORS.relative_to(REPO_ROOT)}")
    ns = p.parse_args(argv)
    if not ns.write_vectors:
        p.print_help()
        return 2
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(json.dumps(vectors(), indent=1) + "\n")
    print(f"wrote {VECTORS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
