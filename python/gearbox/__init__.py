"""gearbox: adaptive web transport.

The data plane is Rust; this package is its Python face. A client times every request
and hands back its telemetry record (docs/telemetry.md)::

    import gearbox

    with gearbox.Client(ca="cert.pem") as client:
        for transport in ("tcp", "h1", "quic"):
            r = client.get("https://127.0.0.1:4433/bytes/100000", transport=transport)
            print(r.record["protocol"], r.record["rct_ms"], r.record["new_connection"])
        load = client.load_page("https://127.0.0.1:4433", gearbox.generate_page(seed=7), transport="quic")
        print(load["page_load_ms"])

    requests = gearbox.workload_requests("app", seed=1, duration_ms=60_000)

Errors of requests are `GearboxError`s, one class per kind of failure (`ConnectError`,
`TlsError`, `QuicError`, `RequestTimeout`, `HttpError`, `BadUrl`, `ConfigError`,
`BadPage`), each with `.kind`, the `error` field of the request's record. Bad argument
values raise `ValueError` naming the valid choices.

The native module is imported on first use of one of its names, so that the pure-Python
subpackages (e.g. `gearbox.models`) work before it is built; a missing build then says
how to make it instead of failing every import of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from gearbox._native import (
        BadPage,
        BadUrl,
        Client,
        ConfigError,
        ConnectError,
        GearboxError,
        HttpError,
        QuicError,
        RequestTimeout,
        Response,
        TlsError,
        __version__,
        generate_page,
        make_cert,
        workload_names,
        workload_requests,
    )

Transport = Literal["tcp", "h1", "quic", "auto"]
"""How a request travels: "tcp" (HTTP/2, or HTTP/1.1 if the server picks it), "h1"
(HTTP/1.1 only), "quic" (HTTP/3), "auto" (the client's transport gear decides)."""

__all__ = [
    "BadPage",
    "BadUrl",
    "Client",
    "ConfigError",
    "ConnectError",
    "GearboxError",
    "HttpError",
    "QuicError",
    "RequestTimeout",
    "Response",
    "TlsError",
    "Transport",
    "__version__",
    "generate_page",
    "make_cert",
    "workload_names",
    "workload_requests",
]

_NATIVE = frozenset(__all__) - {"Transport"}


def __getattr__(name: str) -> Any:
    if name not in _NATIVE:
        raise AttributeError(f"module 'gearbox' has no attribute {name!r}")
    try:
        from gearbox import _native
    except ImportError as e:
        raise ImportError(
            "gearbox's native module (gearbox._native) is not built or does not load: "
            "run scripts/python-setup.sh, or `maturin develop --release` in the repository"
        ) from e
    value = getattr(_native, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _NATIVE)
