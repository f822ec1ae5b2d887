"""What the lab needs from the machine: the `gearbox` binary, and root, /dev/net/tun and
`ip` for emulation; `LabError`, the error a user can fix, printed without a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


class LabError(RuntimeError):
    """A problem the user can fix (missing root, binary, package); printed without a traceback."""


def find_gearbox() -> Path:
    """The `gearbox` binary: $GEARBOX_BIN, else `gearbox` on PATH, else the repository's
    target/release, else target/debug."""
    env = os.environ.get("GEARBOX_BIN")
    if env:
        p = Path(env)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise LabError(f"GEARBOX_BIN={env} is not an executable file")
        return p
    on_path = shutil.which("gearbox")
    if on_path:
        return Path(on_path)
    for profile in ("release", "debug"):
        p = REPO_ROOT / "target" / profile / "gearbox"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise LabError(
        "no `gearbox` binary found (looked at $GEARBOX_BIN, PATH, target/release and target/debug): "
        "build it with `cargo build --release -p gearbox-cli`, or set GEARBOX_BIN"
    )


def check_emulator() -> None:
    """Emulation needs root, /dev/net/tun and `ip` (docs/emu.md); say which is missing."""
    without = "`gearbox sim` runs the same link model in virtual time without root."
    if os.geteuid() != 0:
        raise LabError(
            "gearbox lab run emulates paths between network namespaces, which needs root: "
            f"run it as root (e.g. with sudo). {without}"
        )
    if not Path("/dev/net/tun").exists():
        raise LabError(f"gearbox lab run needs /dev/net/tun (the TUN driver), and this machine has none. {without}")
    if shutil.which("ip") is None and not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists():
        raise LabError("gearbox lab run needs the `ip` command (Debian package iproute2)")
