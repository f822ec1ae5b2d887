"""Other people's HTTP/2 servers serving a page kit's sites, as peers of our edge (docs/flexhttp.md,
"HTTP/2 on the demo's WiFi" and "Speed Index in Chromium"): Debian's nginx and caddy with their
defaults, on TLS 1.3, in the emulator's server namespace. A comparison of HTTP/2 with HTTP/3 is fair
only when our HTTP/2 is as fast as what its users would deploy; these are what they would deploy.

Each function returns the shell command that runs the server in the foreground (`exec`, so that the
emulator's stop reaches it), writing its configuration under `work`. Both servers leave the
congestion controller to the kernel, so the command first sets the namespace's default to Cubic, the
controller our edge runs on TCP and quinn runs on QUIC (docs/edge.md, `tcp_cc`): a server on the
host's BBR would make the comparison one of controllers.
"""

from __future__ import annotations

from pathlib import Path

#: The servers, each with the protocols it is run with.
PEERS = ("nginx", "caddy")

_CUBIC = "sysctl -qw net.ipv4.tcp_congestion_control=cubic && "


def nginx_conf(work: Path, sites: Path, cert: Path, key: Path, listen: str) -> Path:
    """nginx serving `sites` over HTTP/2 (and HTTP/1.1) on `listen` (ADDR:PORT), TLS 1.3 only."""
    conf = work / "nginx.conf"
    (work / "nginx-tmp").mkdir(parents=True, exist_ok=True)
    conf.write_text(
        f"""daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {work}/nginx-tmp;
  include /etc/nginx/mime.types;
  sendfile on;
  server {{
    listen {listen} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.3;
    root {sites};
  }}
}}
"""
    )
    return conf


def caddyfile(work: Path, sites: Path, cert: Path, key: Path, listen: str) -> Path:
    """caddy serving `sites` over HTTP/2 (and HTTP/1.1) on `listen` (ADDR:PORT)."""
    conf = work / "Caddyfile"
    conf.write_text(
        f"""{{
  admin off
  auto_https disable_redirects
  skip_install_trust
  storage file_system {work}/caddy-data
  servers {{
    protocols h1 h2
  }}
}}
https://{listen} {{
  tls {cert} {key}
  root * {sites}
  file_server
}}
"""
    )
    return conf


def peer_command(name: str, work: Path, sites: Path, cert: Path, key: Path, listen: str) -> str:
    """The server namespace's command for peer `name` (one of PEERS)."""
    work.mkdir(parents=True, exist_ok=True)
    if name == "nginx":
        return _CUBIC + f"exec nginx -c {nginx_conf(work, sites, cert, key, listen)}"
    if name == "caddy":
        return _CUBIC + (
            f"HOME={work} XDG_DATA_HOME={work} XDG_CONFIG_HOME={work} exec caddy run --adapter caddyfile "
            f"--config {caddyfile(work, sites, cert, key, listen)}"
        )
    raise ValueError(f"peer must be one of {', '.join(PEERS)}, got {name!r}")
