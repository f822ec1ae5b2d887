#!/usr/bin/env bash
# Installs everything gearbox's demo and tests need on a fresh Debian 12 machine
# that already has Rust (rustup) and Python 3.11: the Debian packages used as real
# peers in tests and to build the BPF programs, the Rust components, and the Python
# virtual environment (.venv) with the gearbox package built by maturin. Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
for pair in caddy:caddy nginx:nginx gtlsclient:ngtcp2-client gtlsserver:ngtcp2-server \
            chromium:chromium iperf3:iperf3 curl:curl jq:jq node:nodejs npm:npm openssl:openssl; do
  bin=${pair%%:*}; pkg=${pair##*:}
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || need_pkgs+=("$pkg")
done
# The control plane's tests run a real PostgreSQL server (initdb/pg_ctl in a temporary folder).
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || need_pkgs+=(postgresql)
# Build dependencies of crates/gearbox-bpf: clang compiles the BPF programs, and
# libbpf-sys builds its vendored libbpf against libelf and zlib.
for pkg in clang libelf-dev zlib1g-dev pkg-config make; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  # Package scripts must not start the daemons (caddy, nginx, postgresql): tests start their own.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  $SUDO rm -f /usr/sbin/policy-rc.d
fi

rustup component add rustfmt clippy >/dev/null 2>&1 || true

# h2spec, the HTTP/2 conformance suite the edge's tests run (crates/gearbox-edge/tests/h2spec.rs),
# is a Go module, not a Debian package: built with `go install` from the Go module proxy into
# .tools/bin of this checkout, where the test finds it. Go itself from Debian if missing.
H2SPEC_VERSION=v2.2.1+incompatible
if [ ! -x .tools/bin/h2spec ]; then
  if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
    echo "setup: installing Debian package golang-go (to build h2spec)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go >/dev/null
  fi
  GO=$(command -v go || echo /usr/local/go/bin/go)
  echo "setup: building h2spec $H2SPEC_VERSION into .tools/bin"
  GOBIN="$PWD/.tools/bin" GOFLAGS=-mod=mod "$GO" install "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION"
fi

# Lighthouse for Speed Index in Chromium (docs/flexhttp.md), pinned exactly (12.x runs on Node 20;
# 13.x needs Node 22) with its lock file, into the project-local tools/lighthouse.
if [ "$(node -p "try{require('./tools/lighthouse/node_modules/lighthouse/package.json').version}catch(e){''}" 2>/dev/null)" != "12.2.3" ]; then
  echo "setup: installing lighthouse 12.2.3 into tools/lighthouse"
  (cd tools/lighthouse && npm ci --no-audit --no-fund --loglevel=error)
fi

scripts/python-setup.sh
