#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ for a given time each (issue 18's fuzzing).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default: 60 s, all targets)
#
# Needs the nightly toolchain (cargo-fuzz builds with -Zsanitizer flags); installs
# cargo-fuzz from crates.io when it is missing. The seed corpus of each target comes
# from the repository's own files (models/, workloads/, scenarios/, fuzz/seeds/);
# the growing corpus lives in out/fuzz/corpus/ and each run's log in out/fuzz/.
# Prints, per target, the executions reached and whether a crash was found (its
# input is then in fuzz/artifacts/TARGET/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(trace edge_config link_config model workload telemetry)
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/fuzz}
mkdir -p out/fuzz/corpus
seed() {
    local t=$1 dir=out/fuzz/corpus/$1
    mkdir -p "$dir"
    [ -d "fuzz/seeds/$t" ] && cp -n fuzz/seeds/"$t"/* "$dir"/ 2>/dev/null || true
    case $t in
        model) find models -name '*.json' -exec cp -n {} "$dir"/ \; ;;
        workload) cp -n workloads/*.toml "$dir"/ ;;
        link_config) cp -n scenarios/*.toml "$dir"/ ;;
    esac
}
status=0
for t in "${targets[@]}"; do
    seed "$t"
    log=out/fuzz/$t.log
    # No sanitizer: the targets are safe Rust, and what is sought is a panic (an abort
    # under libFuzzer), which needs none; the build is then several times faster.
    if cargo +nightly fuzz run --sanitizer none --fuzz-dir fuzz "$t" "out/fuzz/corpus/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1; then
        verdict="no crash"
    else
        verdict="CRASH (see $log and fuzz/artifacts/$t/)"
        status=1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    printf '%-12s %12s executions in %ss: %s\n' "$t" "$execs" "$secs" "$verdict"
done
exit $status
