"""Type stubs of gearbox._native, the Rust extension (crates/gearbox-py)."""

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

_Transport = Literal["tcp", "h1", "quic", "auto"]
_Path = str | os.PathLike[str]

__version__: str

class GearboxError(Exception):
    """Base class of the errors of gearbox requests."""

    kind: str
    """The telemetry error kind: connect, resolve, tls, quic, timeout, http, bad_url, config, path or page."""

class ConnectError(GearboxError):
    """The server could not be reached: its name did not resolve or the TCP connect failed."""

class TlsError(GearboxError):
    """The TLS handshake failed (over TCP, or a TLS alert in the QUIC handshake)."""

class QuicError(GearboxError):
    """The QUIC connection failed or was closed, or went silent (`kind` "quic_silent")."""

class RequestTimeout(GearboxError):
    """The connect timeout or the request timeout ran out."""

class HttpError(GearboxError):
    """The HTTP exchange failed after the connection was up."""

class BadUrl(GearboxError):
    """The URL cannot be requested (not https, no host, unparsable)."""

class ConfigError(GearboxError):
    """Unreadable certificate files, a congestion controller the kernel lacks, a path index out of range."""

class BadPage(GearboxError):
    """A page given to load_page is not a loadable dependency graph."""

class Response:
    """A complete response and the telemetry record of its request."""

    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes:
        """The body (empty when the request asked to discard it; record["bytes"] still counts it)."""
    @property
    def headers(self) -> dict[str, str]:
        """Response headers, names in lower case, repeated headers joined by ", "."""
    @property
    def record(self) -> dict[str, Any]:
        """The request's client telemetry record (docs/telemetry.md): protocol, rct_ms, ttfb_ms,
        new_connection, handshake_ms, conn_id, transport (cc, rtt_ms, cwnd_bytes, ...), decision, ..."""

class Client:
    """An HTTPS client over pooled HTTP/1.1, HTTP/2 (TCP) and HTTP/3 (QUIC) connections.

    Every request is timed and returns its telemetry record; with `telemetry`, records are
    also appended to that JSON-lines file. Methods block with the GIL released, so threads
    may share a client. Make clients after any fork (e.g. inside multiprocessing workers).

    Args:
        ca: certificate(s) or CA(s) to trust, PEM; default: the system CA bundle.
        insecure: accept any certificate (lab runs against throwaway certificates only).
        local_addrs: local IP addresses, one connection pool per path (multipath);
            `path_index` picks one. Default: one path, the kernel picks the source.
        quic_cc: QUIC congestion controller: newreno, cubic, bbr, copa, westwood, vivace (the suite's,
            switchable) or quinn-newreno, quinn-cubic, quinn-bbr (quinn's built-ins).
        tcp_cc: kernel TCP congestion controller per socket: reno, cubic, bbr or westwood (BPF, needs root)
            (default: the system's).
        telemetry: JSON-lines file the records are appended to ("-": standard output).
        connect_timeout_s: bound on TCP connect + TLS handshake, or the QUIC handshake.
        request_timeout_s: bound on a whole request, connection setup included.
        idle_timeout_s: a connection idle this long is closed instead of reused.
        quic_initial_window_packets: QUIC initial window in 1200-byte packets (default RFC 9002's).
        max_h1_connections_per_origin: HTTP/1.1 connections per origin and path.
        control: upload every record to the control plane (docs/control.md): {"url":
            "https://HOST:PORT", "token": client token, "ca": PEM file, optionally "spool"
            (default "gearbox-spool"), "batch_records", "batch_interval_ms", "max_spool_bytes",
            "final_upload_ms", "timeout_ms"}; spooled on disk, sent in batches with
            idempotency keys; `close` makes the last attempt.
    """

    def __init__(
        self,
        ca: _Path | Sequence[_Path] | None = None,
        insecure: bool = False,
        local_addrs: Sequence[str] | None = None,
        quic_cc: str = "cubic",
        tcp_cc: str | None = None,
        telemetry: _Path | None = None,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 60.0,
        idle_timeout_s: float = 30.0,
        quic_initial_window_packets: int | None = None,
        max_h1_connections_per_origin: int = 6,
        control: dict[str, Any] | None = None,
    ) -> None: ...
    def get(self, url: str, transport: _Transport = "tcp") -> Response:
        """GET `url` (https://host:port/path) over `transport`."""
    def request(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        transport: _Transport = "tcp",
        path_index: int = 0,
        force_new_connection: bool = False,
        headers: dict[str, str] | None = None,
        discard_body: bool = False,
        click: int | None = None,
    ) -> Response:
        """Any request; `force_new_connection` opens a new connection instead of reusing one,
        `discard_body` counts the body without keeping it, `click` goes into the record."""
    def load_page(
        self,
        origin: str,
        page: dict[str, Any] | int,
        transport: _Transport = "tcp",
        fresh_connection: bool = True,
        path_index: int = 0,
        click: int | None = None,
    ) -> dict[str, Any]:
        """Loads a page (a dict from `generate_page`, or an int seed of the built-in "page"
        workload) from `origin`, each object once its dependencies are complete, on one
        connection. Returns page_load_ms (every object), load_event_ms (the objects that delay
        a browser's load event: all but data fetched by scripts), protocol, transport, decision
        and objects (id, path, started_ms, completed_ms, status, record)."""
    def flush(self) -> None:
        """Waits until every record so far is in the telemetry file."""
    def close(self) -> None:
        """Flushes telemetry and closes every connection; later calls raise ValueError."""
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def workload_requests(
    name_or_path: str,
    seed: int,
    duration_ms: float | None = None,
    requests: int | None = None,
) -> list[dict[str, Any]]:
    """The requests of a workload (built-in name or .toml file) for `seed`, up to `duration_ms`
    of send times or `requests` requests (exactly one). Each: send_at_ms, click, request_bytes,
    response_bytes, new_connection, client_index, path. Deterministic for a seed."""

def workload_names() -> list[str]:
    """The names of the built-in workloads."""

def generate_page(seed: int, workload: str = "page") -> dict[str, Any]:
    """One page of a page workload: {"objects": [{id, path, kind, size_bytes, priority, depends_on}]},
    object 0 the HTML root. Deterministic for a seed."""

def make_cert(names: Sequence[str], cert_path: _Path, key_path: _Path) -> None:
    """Writes a self-signed certificate (PEM) for `names` (DNS names, IP addresses) and its key."""

class SimSession:
    """One simulation (docs/sim.md), stepped by a learner: `SimSession(config_toml, name)`."""

    def __init__(self, config: str, name: str = "<config>") -> None: ...
    def advance(self, seconds: float) -> bool:
        """Runs `seconds` of simulated time; returns whether the run is finished."""
    def set_cwnd_table(self, table: str | None, seed: int = 0, name: str = "<cwnd table>") -> None:
        """Each connection accepted from now on draws its initial window from this Cwnd Table
        (TOML text) as the edge's QUIC gear does; its records carry the `iw` object. None:
        the config's `initial_window` again."""
    @property
    def now_s(self) -> float: ...
    @property
    def finished(self) -> bool: ...
    @property
    def unfinished(self) -> int:
        """Requests of the workload not done (yet; once finished, those the virtual-time limit
        cut off, which have no record)."""
    def monitor(self) -> list[dict[str, Any]]:
        """Each live connection's monitor over the period since the previous call (Floo Table 2),
        with the Floo Monitor's normalised state in `features` (`floo_feature_names()` order)."""
    def switch(self, conn: int, cca: str, mode: str = "full") -> None:
        """Switches connection `conn`'s controller to `cca` with full or part switching."""
    def take_records(self) -> list[dict[str, Any]]:
        """Client records of the requests finished since the previous call."""
    def drive(
        self,
        gear: str,
        period_s: float = 12.0,
        mode: str = "full",
        model_dir: _Path | None = None,
        seed: int = 0,
    ) -> dict[str, int]:
        """Runs to the end with a Rust gear (a controller name, "random" or "floo") choosing
        every connection's controller every `period_s`; returns periods, decisions, switches."""

def floo_feature_names() -> list[str]:
    """The Floo Monitor's normalised state, in the order of a monitor's `features`."""

def generate_trace(preset: str, duration_s: float, seed: int, path: _Path) -> None:
    """Writes a synthetic link trace (docs/traces.md) in mahimahi format."""

class SimPageLoad:
    """A page load on a (multipath) client in virtual time, stepped one stream-to-path
    decision at a time: `SimPageLoad(config_toml, page_seed, name)` (docs/sim.md)."""

    def __init__(self, config: str, page_seed: int, name: str = "<config>") -> None: ...
    @property
    def paths(self) -> int: ...
    def next_stream(self) -> dict[str, Any] | None:
        """Runs to the next stream that needs a path; None when the page is loaded."""
    def assign(self, object: int, path: int, reason: str = "") -> None:
        """Sends waiting stream `object` on `path`."""
    def run(self, scheduler: str, model_dir: _Path | None = None) -> dict[str, Any]:
        """Loads the rest of the page with a Rust path scheduler ("minrtt", "round-robin",
        "single-best", "ecf", "blest", or "sailfish" with `model_dir`); returns the outcome."""
    def outcome(self) -> dict[str, Any]:
        """Every object's path and times, and the page load time once done."""
    def records(self) -> list[dict[str, Any]]:
        """Client records of the streams completed so far."""

def sailfish_feature_names(paths: int) -> list[str]:
    """SAILfish's observation, in the order of a `SimPageLoad.next_stream()`'s `features`."""
