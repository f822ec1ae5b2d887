"""The agent's network measurement (FlexHTTP §3.3.1, §3.5.1): RTT and loss by a probe exchange over UDP
and over TCP, capacity by a short bulk transfer, each measured at the agent (the side a client cannot
talk into a better or worse figure), and per client the measurements of the latest window `t`.

The seed measures with ping and iPerf; here one small protocol on one port number (UDP and TCP) does
both, so a client needs nothing installed and the agent knows whose measurement it is: a client first
asks the API for a session (authenticated), then names it in the first bytes it sends.

- UDP: the client sends `HELLO`; the agent answers with `udp_probes` probes spaced `udp_interval_ms`
  apart, to the address the hello came from (so it works behind NAT), and the client echoes each. RTT is
  the agent's send-to-echo time; a probe not echoed within `udp_timeout_s` after the last one counts as
  lost. A lost probe crossed the path twice (out and back), so it counts against two crossings.
- TCP: the client connects and sends the session; the agent sends `tcp_pings` one-byte-type pings, the
  client echoes each (RTT), then the agent sends bulk data for `bulk_s` seconds (at least `bulk_rtts`
  round trips) and samples the kernel's TCP_INFO every `tcp_info_interval_s`: capacity is the best rate
  of delivered bytes (`tcpi_delivered` segments, SACKed ones counted when they arrive, times the MSS)
  over any window of `rate_window_s` (at least four round trips), which leaves the slow-start ramp and
  single ACK bursts out (cumulatively acknowledged bytes jump when a retransmission fills a hole: 1.4x
  the link rate over half a second on a lossy path); the segments the kernel retransmitted are recorded too (not
  as the loss rate: below). Rejected: the kernel's delivery-rate
  samples, which on a fast path report single bursts (hundreds of Gbit/s on loopback).

One measurement: RTT the median of the UDP and TCP round trips; loss the UDP probes lost over twice the
probes sent (each crossed the path out and back); capacity in Mbit/s. The client runs the UDP exchange
first and the TCP one after it, so the probes neither queue behind nor are dropped by the bulk transfer.
The TCP retransmission ratio is kept beside it but is not the loss rate: a bulk transfer that fills a
drop-tail queue retransmits its own overflow (5% measured on a 0.5%-loss emulated path).
The window's value is the median of each over the client's measurements of
the last `window_s` (§3.5.1: "measures the network condition features within the time window t").
Rejected: iPerf and ping as separate tools (another daemon and ICMP, which the emulator and many
networks treat differently from the web's TCP and UDP).
"""

from __future__ import annotations

import os
import socket
import socketserver
import statistics
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

MAGIC = b"GBXP"
SESSION_BYTES = 16
_HELLO, _PROBE, _ECHO = b"H", b"P", b"E"
_UDP_PROBE = struct.Struct("!4s16sc I")  # magic, session, type, sequence number


@dataclass(frozen=True)
class ProbeConfig:
    udp_probes: int = 200
    udp_interval_ms: float = 5.0
    udp_timeout_s: float = 1.5
    tcp_pings: int = 5
    bulk_s: float = 2.0
    #: The bulk transfer lasts at least this many round trips (slow start needs a few), up to `bulk_max_s`.
    bulk_rtts: float = 10.0
    bulk_max_s: float = 5.0
    tcp_info_interval_s: float = 0.01
    #: Capacity is the best acknowledged rate over any window this long (or two round trips).
    rate_window_s: float = 0.5
    #: Measurements older than this are out of a client's window (§3.5.1's t).
    window_s: float = 300.0
    #: Sessions not used within this long are forgotten.
    session_ttl_s: float = 120.0


def tcp_info(sock: socket.socket) -> dict:
    """The fields of Linux's `struct tcp_info` used here (offsets of include/uapi/linux/tcp.h)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    if len(raw) < 196:
        return {}
    (snd_mss,) = struct.unpack_from("I", raw, 16)
    (rtt_us,) = struct.unpack_from("I", raw, 68)
    (total_retrans,) = struct.unpack_from("I", raw, 100)
    (bytes_acked,) = struct.unpack_from("Q", raw, 120)
    (data_segs_out,) = struct.unpack_from("I", raw, 156)
    (delivered,) = struct.unpack_from("I", raw, 192) if len(raw) >= 196 else (0,)
    return {
        "rtt_us": rtt_us,
        "total_retrans": total_retrans,
        "bytes_acked": bytes_acked,
        "data_segs_out": data_segs_out,
        "delivered_bytes": delivered * snd_mss,
    }


class _Session:
    def __init__(self, client: str) -> None:
        self.client = client
        self.created = time.monotonic()
        self.udp: dict | None = None
        self.tcp: dict | None = None
        self.udp_started = False
        self.sent: dict[int, float] = {}
        self.echoed: dict[int, float] = {}


class Measurements:
    """Sessions and, per client, the window of finished measurements (in memory: they are minutes old
    at most and a restarted agent is measured against again)."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._sessions: dict[bytes, _Session] = {}
        self._window: dict[str, deque[dict]] = {}

    def new_session(self, client: str) -> str:
        sid = os.urandom(SESSION_BYTES)
        with self._lock:
            now = time.monotonic()
            for k in [k for k, s in self._sessions.items() if now - s.created > self.config.session_ttl_s]:
                del self._sessions[k]
            self._sessions[sid] = _Session(client)
        return sid.hex()

    def session(self, sid: bytes) -> _Session | None:
        with self._lock:
            return self._sessions.get(sid)

    def finish(self, sid: bytes) -> None:
        """Combines a session's UDP and TCP parts into one measurement once both are in."""
        with self._lock:
            s = self._sessions.get(sid)
            if s is None or s.udp is None or s.tcp is None:
                return
            del self._sessions[sid]
            m = combine(s.udp, s.tcp)
            m["session"] = sid.hex()
            m["time_unix_ms"] = time.time() * 1000.0
            self._window.setdefault(s.client, deque()).append(m)
            self._trim(s.client)

    def _trim(self, client: str) -> None:
        w = self._window.get(client)
        cut = time.time() * 1000.0 - self.config.window_s * 1000.0
        while w and w[0]["time_unix_ms"] < cut:
            w.popleft()

    def window(self, client: str) -> dict | None:
        """The client's current network features: the median of each over its window, or None."""
        with self._lock:
            self._trim(client)
            w = list(self._window.get(client, ()))
        if not w:
            return None
        out = {k: statistics.median(m[k] for m in w) for k in ("rtt_ms", "loss_rate", "capacity_mbps")}
        out |= {"measurements": len(w), "window_s": self.config.window_s, "latest": w[-1]}
        return out


def combine(udp: dict, tcp: dict) -> dict:
    rtts = list(udp["rtt_ms"]) + list(tcp["rtt_ms"])
    lost = udp["sent"] - udp["echoed"]
    return {
        "rtt_ms": statistics.median(rtts) if rtts else float("nan"),
        "loss_rate": lost / (2 * udp["sent"]) if udp["sent"] else 0.0,
        "capacity_mbps": tcp["capacity_bps"] / 1e6,
        "udp": udp,
        "tcp": {k: v for k, v in tcp.items() if k != "rtt_ms"} | {"rtt_ms": tcp["rtt_ms"]},
    }


class ProbeServer:
    """The UDP and TCP sides on one port number (0: any free one)."""

    def __init__(self, host: str, port: int, store: Measurements) -> None:
        self.store = store
        self.config = store.config
        self.udp = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((host, port))
        port = self.udp.getsockname()[1]
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._tcp_session(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True
            address_family = self.udp.family

        self.tcp = Server((host, port), Handler)
        self.port = port
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._udp_loop, name="probe-udp", daemon=True),
            threading.Thread(target=self.tcp.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True),
        ]

    def start(self) -> ProbeServer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.tcp.shutdown()
        self.tcp.server_close()
        self.udp.close()

    # --- UDP --------------------------------------------------------------------------------------

    def _udp_loop(self) -> None:
        self.udp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data, addr = self.udp.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.monotonic()
            if len(data) < _UDP_PROBE.size or data[:4] != MAGIC:
                continue
            _, sid, kind, seq = _UDP_PROBE.unpack_from(data)
            s = self.store.session(sid)
            if s is None:
                continue
            if kind == _HELLO and not s.udp_started:
                s.udp_started = True
                threading.Thread(target=self._udp_send, args=(sid, s, addr), daemon=True).start()
            elif kind == _ECHO and seq in s.sent and seq not in s.echoed:
                s.echoed[seq] = now

    def _udp_send(self, sid: bytes, s: _Session, addr: tuple) -> None:
        c = self.config
        for seq in range(c.udp_probes):
            s.sent[seq] = time.monotonic()
            try:
                self.udp.sendto(_UDP_PROBE.pack(MAGIC, sid, _PROBE, seq), addr)
            except OSError:
                pass
            time.sleep(c.udp_interval_ms / 1000.0)
        time.sleep(c.udp_timeout_s)
        rtts = [1000.0 * (s.echoed[q] - s.sent[q]) for q in sorted(s.echoed)]
        s.udp = {"sent": len(s.sent), "echoed": len(s.echoed), "rtt_ms": rtts}
        self.store.finish(sid)

    # --- TCP --------------------------------------------------------------------------------------

    def _tcp_session(self, sock: socket.socket) -> None:
        c = self.config
        sock.settimeout(max(10.0, c.bulk_max_s * 2))
        head = _recv_exact(sock, 4 + SESSION_BYTES)
        if head is None or head[:4] != MAGIC:
            return
        sid = head[4:]
        s = self.store.session(sid)
        if s is None or s.tcp is not None:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for seq in range(c.tcp_pings):
            t0 = time.monotonic()
            sock.sendall(_PROBE + struct.pack("!I", seq))
            back = _recv_exact(sock, 5)
            if back is None or back[1:] != struct.pack("!I", seq):
                return
            rtts.append(1000.0 * (time.monotonic() - t0))
        rtt_s = statistics.median(rtts) / 1000.0 if rtts else 0.1
        duration = min(c.bulk_max_s, max(c.bulk_s, c.bulk_rtts * rtt_s))
        before = tcp_info(sock)
        chunk = memoryview(b"B" + bytes(64 * 1024 - 1))
        samples = [(time.monotonic(), 0)]  # (time, bytes delivered since the bulk began)
        end = samples[0][0] + duration
        next_sample = 0.0
        sock.setblocking(False)
        try:
            while (now := time.monotonic()) < end:
                if now >= next_sample:
                    delivered = tcp_info(sock).get("delivered_bytes", 0) - before.get("delivered_bytes", 0)
                    samples.append((now, delivered))
                    next_sample = now + c.tcp_info_interval_s
                try:
                    sock.send(chunk)
                except BlockingIOError:
                    time.sleep(min(c.tcp_info_interval_s, 0.005))
        except OSError:
            return
        after = tcp_info(sock)
        acked = after.get("bytes_acked", 0) - before.get("bytes_acked", 0)
        samples.append((time.monotonic(), after.get("delivered_bytes", 0) - before.get("delivered_bytes", 0)))
        s.tcp = {
            "rtt_ms": rtts,
            "bulk_s": duration,
            "bytes_acked": acked,
            "mean_rate_bps": 8.0 * acked / duration,
            "capacity_bps": best_rate_bps(samples, max(4 * rtt_s, c.rate_window_s)),
            "data_segs_out": after.get("data_segs_out", 0) - before.get("data_segs_out", 0),
            "retrans_segs": after.get("total_retrans", 0) - before.get("total_retrans", 0),
        }
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.store.finish(sid)


def best_rate_bps(samples: list[tuple[float, int]], window_s: float) -> float:
    """The largest rate of acknowledged bytes over any span of at least `window_s` between samples
    `(time_s, bytes acked so far)`, bit/s; over the whole transfer when it is shorter than the window.
    The slow-start ramp and the short bursts of a single ACK both stay out of it."""
    best = 0.0
    i = 0
    for j in range(1, len(samples)):
        while i + 1 < j and samples[j][0] - samples[i + 1][0] >= window_s:
            i += 1
        dt = samples[j][0] - samples[i][0]
        if dt >= window_s:
            best = max(best, 8.0 * (samples[j][1] - samples[i][1]) / dt)
    if best == 0.0 and len(samples) > 1:
        dt = samples[-1][0] - samples[0][0]
        best = 8.0 * (samples[-1][1] - samples[0][1]) / dt if dt > 0 else 0.0
    return best


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            part = sock.recv(n - len(buf))
        except OSError:
            return None
        if not part:
            return None
        buf += part
    return buf


# --- the client's side ----------------------------------------------------------------------------


def run_probe(host: str, port: int, session_hex: str, timeout_s: float = 30.0) -> None:
    """The client's half of one measurement: the UDP echoes and the TCP pings and bulk, at once."""
    sid = bytes.fromhex(session_hex)
    errors: list[BaseException] = []

    def udp() -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as u:
            u.settimeout(0.2)
            hello = _UDP_PROBE.pack(MAGIC, sid, _HELLO, 0)
            deadline = time.monotonic() + timeout_s
            got_any = False
            got_last = 0.0
            last = time.monotonic()
            while time.monotonic() < deadline:
                if not got_any and time.monotonic() - last >= 0.0:
                    u.sendto(hello, (host, port))  # again until the first probe comes (a lost hello)
                    last = time.monotonic() + 0.5
                try:
                    data, _ = u.recvfrom(2048)
                except TimeoutError:
                    if got_any and time.monotonic() - got_last > 1.0:
                        return
                    continue
                if len(data) >= _UDP_PROBE.size and data[:4] == MAGIC:
                    _, s, kind, seq = _UDP_PROBE.unpack_from(data)
                    if s == sid and kind == _PROBE:
                        got_any, got_last = True, time.monotonic()
                        u.sendto(_UDP_PROBE.pack(MAGIC, sid, _ECHO, seq), (host, port))

    def tcp() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as t:
                t.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t.sendall(MAGIC + sid)
                while True:
                    kind = t.recv(1)
                    if not kind:
                        return
                    if kind == _PROBE:
                        seq = _recv_exact(t, 4)
                        if seq is None:
                            return
                        t.sendall(_PROBE + seq)
                    else:
                        while t.recv(1 << 16):
                            pass
                        return
        except OSError as e:
            errors.append(e)

    udp()
    tcp()
    if errors:
        raise ConnectionError(f"probe TCP exchange with {host}:{port} failed: {errors[0]}")
