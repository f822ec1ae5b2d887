"""Other people's HTTP/2 servers serving a page kit's sites, as peers of our edge (docs/flexhttp.md,
"HTTP/2 on the demo's WiFi" and "Speed Index in Chromium"): Debian's nginx and caddy with their
defaults, on TLS 1.3, in the emulator's server namespace. A comparison of HTTP/2 with HTTP/3 is fair
only when our HTTP/2 is as fast as what its users would deploy; these are what they would deploy.

Each function returns the shell command that runs the server in the foreground (`exec`, so that the
emulator's stop reaches it), writing its configuration under `work`. Neither server can choose its
congestion controller: they run the namespace's default, which a new network namespace takes from the
host, and which only the host can set to a controller outside `net.ipv4.tcp_allowed_congestion_control`
(a namespace's `sysctl -w net.ipv4.tcp_congestion_control=cubic` is refused with EPERM on a host that
allows only reno and BBR). So compare them with our edge on the same controller (`gearbox pages measure
--edge-arg=--tcp-cc=system`), not with its default Cubic: otherwise the comparison is one of controllers.
"""

from __future__ import annotations

from pathlib import Path

#: The servers, each with the protocols it is run with.
PEERS = ("nginx", "caddy")


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
    """caddy serving `sites` over HTTP/2 (and HTTP/1.1) on `listen` (ADDR:PORT), to any host name: a
    site address with a host would answer other names (Chromium's `gearbox.test`) with an empty 200."""
    address, _, port = listen.rpartition(":")
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
https://:{port} {{
  bind {address}
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
        return f"exec nginx -c {nginx_conf(work, sites, cert, key, listen)}"
    if name == "caddy":
        return (
            f"HOME={work} XDG_DATA_HOME={work} XDG_CONFIG_HOME={work} exec caddy run --adapter caddyfile "
            f"--config {caddyfile(work, sites, cert, key, listen)}"
        )
    raise ValueError(f"peer must be one of {', '.join(PEERS)}, got {name!r}")
