#!/usr/bin/env bash
# Makes the Python environment of gearbox: .venv at the repository root with maturin, the
# dev, lab, wisetrans (xgboost-cpu, scikit-learn), sim (gymnasium), floo (jax, flax, optax)
# and control (fastapi, uvicorn, httptools, uvloop, orjson, httpx, psycopg, duckdb, pyarrow)
# extras, and the gearbox package: the Rust extension gearbox._native built in release mode (or $GEARBOX_PY_PROFILE),
# the Python sources under python/ installed editable (used in place).
# Idempotent: reuses .venv, pip skips what is installed, the cargo build is incremental.
#   scripts/python-setup.sh                        # dev, lab, wisetrans, sim, floo and control extras
#   GEARBOX_PY_EXTRAS=dev scripts/python-setup.sh  # fewer extras
#   GEARBOX_PY_PROFILE=dev scripts/python-setup.sh # the extension in cargo's dev profile
# `make test` uses the dev profile: its dependencies are the ones cargo builds for the
# Rust tests anyway (a release build compiled all of them a second time), and the
# simulator's crates are optimised in dev builds too (Cargo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

extras=${GEARBOX_PY_EXTRAS:-dev,lab,wisetrans,sim,floo,control}
py=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  echo "python-setup: creating .venv with $("$py" --version)"
  "$py" -m venv .venv
fi
if ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "python-setup: .venv has $(.venv/bin/python --version); gearbox needs Python 3.11+" >&2
  exit 1
fi
if ! .venv/bin/maturin --version >/dev/null 2>&1; then
  .venv/bin/pip install --quiet 'maturin>=1.7,<2'
fi

# maturin builds with cargo's default target dir (target/), shared with the workspace,
# and pip-installs the extras' packages listed in pyproject.toml.
profile=${GEARBOX_PY_PROFILE:-release}
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop --profile "$profile" --extras "$extras"
.venv/bin/python -c 'import gearbox; print("python-setup: gearbox", gearbox.__version__, "ready in .venv")'
