#!/usr/bin/env bash
# Runs every test of gearbox: formatting and lints (rustfmt, clippy with warnings
# denied, ruff), the Rust tests (unit, interop with real peers, emulator tests that
# need root), and the Python tests. Sets up what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in seconds since this script began (CI's budget is 30 minutes).
at() { echo "== $1 (at ${SECONDS} s)"; }
# The Python extension in the dev profile, sharing the dependencies the Rust tests build
# (scripts/python-setup.sh).
export GEARBOX_PY_PROFILE="${GEARBOX_PY_PROFILE:-dev}"
scripts/setup.sh

# `gearbox lab` finds Python next to the repository it was built in, which it cannot
# tell when the build lives outside it (CARGO_TARGET_DIR): name the venv's.
export GEARBOX_PYTHON="${GEARBOX_PYTHON:-$PWD/.venv/bin/python}"

at "rustfmt"; cargo fmt --all --check
at "clippy"; cargo clippy --workspace --all-targets --locked -- -D warnings
# `cargo test` builds the gearbox binary itself (gearbox-cli's integration tests need it)
# before any test runs; a separate `cargo build` first compiled it with other features,
# only for the test build to compile it again.
at "cargo test"
cargo_log=$(mktemp)
trap 'rm -f "$cargo_log"' EXIT
GEARBOX_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/gearbox" cargo test --workspace --locked 2>&1 | tee "$cargo_log"
# An ignored Rust test is a skipped one. The only ones allowed are the helpers other
# tests run as child processes, marked #[ignore = "helper: ..."].
ignored=$(grep -E '^test result:' "$cargo_log" | grep -Eo '[0-9]+ ignored' | awk '{s += $1} END {print s + 0}')
helpers=$(grep -rhoE '#\[ignore = "helper: ' crates --include='*.rs' | wc -l)
if [ "$ignored" -ne "$helpers" ]; then
  echo "cargo test ignored $ignored tests; only the $helpers marked #[ignore = \"helper: ...\"] may be" >&2
  exit 1
fi
at "ruff"; .venv/bin/ruff check python && .venv/bin/ruff format --check python
# Everything the tests need is installed above, so a skipped test is a failed one here
# (python/tests/require_all.py).
at "pytest"; GEARBOX_REQUIRE_ALL=1 GEARBOX_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/gearbox" .venv/bin/pytest -q --durations=15 python/tests
echo "all tests passed in ${SECONDS} s"
