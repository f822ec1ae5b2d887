"""The features of a trace entry (FlexHTTP §3.5.1, Table 1): three of the network, eight of the page.

One list, in one order, shared by the agent's trace pool, the lab's dataset, the classifiers and the
exported forest's sidecar, so a column can never be read as another.
"""

from __future__ import annotations

import math

import numpy as np

#: Table 1 "Network": the path between the client and the agent (server) it measures against.
NETWORK_FEATURES = ("rtt_ms", "loss_rate", "capacity_mbps")
#: Table 1 "Web Page": `gearbox pages features` (python/gearbox/pages/features.py).
PAGE_FEATURES = (
    "all_files",
    "all_bytes",
    "css_files",
    "css_bytes",
    "js_files",
    "js_bytes",
    "image_files",
    "image_bytes",
)
FEATURES = NETWORK_FEATURES + PAGE_FEATURES
#: The two versions chosen between; the classifiers' classes in this order (0 = h2, 1 = h3).
VERSIONS = ("h2", "h3")

# Range checks of an uploaded value, per feature: (lowest, highest) allowed.
_RANGE = {"rtt_ms": (0.0, 60_000.0), "loss_rate": (0.0, 1.0), "capacity_mbps": (0.0, 1e6)}


class FeatureError(ValueError):
    """A value that is missing or out of range; the message names the field."""


def check_features(net: object, page: object, where: str) -> list[float]:
    """The entry's feature vector in `FEATURES` order, or `FeatureError` naming the first missing or
    bad field (`where.network.rtt_ms`, `where.page.css_bytes`)."""
    out: list[float] = []
    for part, names, value in (("network", NETWORK_FEATURES, net), ("page", PAGE_FEATURES, page)):
        if not isinstance(value, dict):
            raise FeatureError(f"{where}.{part}: missing (an object with {', '.join(names)})")
        for n in names:
            field = f"{where}.{part}.{n}"
            if n not in value:
                raise FeatureError(f"{field}: missing")
            v = value[n]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise FeatureError(f"{field}: expected a finite number, found {v!r}")
            lo, hi = _RANGE.get(n, (0.0, 1e12))
            if not lo <= v <= hi:
                raise FeatureError(f"{field}: {v} is outside [{lo:g}, {hi:g}]")
            out.append(float(v))
    return out


def scaled(x: np.ndarray) -> np.ndarray:
    """The space the k-means clusters in: log of every feature (counts, bytes, RTT, loss and rate all
    span orders of magnitude; Table 1's RTT steps and loss steps are roughly geometric), each column
    then standardised by the caller. log1p for counts and bytes, log10 of loss above 1e-5."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    for j, name in enumerate(FEATURES):
        col = x[:, j]
        if name == "loss_rate":
            out[:, j] = np.log10(np.maximum(col, 1e-5))
        elif name in ("rtt_ms", "capacity_mbps"):
            out[:, j] = np.log(np.maximum(col, 1e-3))
        else:
            out[:, j] = np.log1p(np.maximum(col, 0.0))
    return out
