"""`gearbox.sim`: the virtual-time simulator from Python (docs/sim.md).

`SimSession` steps one simulation (advance, monitor, switch a connection's controller,
take the finished requests' records); `SimPageLoad` steps one page load on a multipath
client, one stream-to-path decision at a time. `gearbox.sim.envs` and `gearbox.sim.paths`
build gymnasium environments on them and register `gearbox/CcaSelection-v0` and
`gearbox/PathScheduling-v0` when gymnasium is installed (the `sim` extra).
"""

from __future__ import annotations

from gearbox._native import SimPageLoad, SimSession

__all__ = ["SimPageLoad", "SimSession"]

try:  # gymnasium is the `sim` extra; the session works without it.
    import gymnasium as _gym
except ImportError:  # pragma: no cover - exercised only without the extra
    _gym = None

if _gym is not None and "gearbox/CcaSelection-v0" not in _gym.registry:
    _gym.register(id="gearbox/CcaSelection-v0", entry_point="gearbox.sim.envs:CcaSelectionEnv")
if _gym is not None and "gearbox/PathScheduling-v0" not in _gym.registry:
    _gym.register(id="gearbox/PathScheduling-v0", entry_point="gearbox.sim.paths:PathSchedulingEnv")
