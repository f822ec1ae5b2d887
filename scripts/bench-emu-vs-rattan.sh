#!/usr/bin/env bash
# Reruns docs/emu.md "rattan 0.1.1 side by side": gearbox's emulator and rattan, back to
# back on the same machine, on the same two cases, with iperf3 TCP through each, and
# prints the table of that section (goodput and the emulator's CPU, per case).
#
# The two cases are the first two of gearbox-emu's `emu_bench` example:
#   1. "50 Mbit/s, 2 x 20 ms": 50 Mbit/s each way, 20 ms one-way delay each way, a
#      drop-tail queue of 300 packets each way;
#   2. "100 Gbit/s link, no delay": a 100 Gbit/s link and no delay, so the emulator itself
#      is the bottleneck.
# gearbox: `emu_bench SECONDS CASE` (iperf3 -s -1 in the server namespace, iperf3 -c -J
# -t SECONDS -O 1 in the client's; relay CPU = the relay thread's user + system time over
# the transfer). rattan: `rattan run` in its isolated mode (left and right namespaces it
# creates, veth pairs into a third where its cells run) with the same link, `iperf3 -s -1`
# on the right and `iperf3 -c $RATTAN_BASE -t SECONDS -O 1 -J` on the left; rattan CPU =
# the rattan process's user + system time (all its threads) over seconds 3.5 to 8.5 of
# the transfer.
set -euo pipefail
# Command substitutions ($(...)) stop at a failure too.
shopt -s inherit_errexit

usage() {
  cat <<'EOF'
usage: scripts/bench-emu-vs-rattan.sh [RATTAN]
       RATTAN=/path/to/rattan scripts/bench-emu-vs-rattan.sh

Runs gearbox's emulator (crates/gearbox-emu, example emu_bench) and rattan 0.1.1 on the
cases of docs/emu.md "rattan 0.1.1 side by side" and prints its table. Needs root,
/dev/net/tun, iperf3 and jq (scripts/setup.sh installs them), and a rattan binary.

This script downloads nothing. To get rattan 0.1.1 (about 10 minutes on 2 cores), build
it in a scratch folder outside the repository, e.g.:

    cargo install rattan --version 0.1.1 --root /tmp/rattan-0.1.1
    sudo RATTAN=/tmp/rattan-0.1.1/bin/rattan scripts/bench-emu-vs-rattan.sh

Environment:
  RATTAN      the rattan binary (or give it as the first argument)
  EMU_BENCH   a built emu_bench example; without it the script runs
              `cargo build --release --locked -p gearbox-emu --example emu_bench`
              (run that first as your own user when root has no cargo)
  SECONDS_PER_RUN  length of each iperf3 transfer after its 1-s omitted start (default 8)
EOF
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
esac
rattan=${1:-${RATTAN:-}}
if [ -z "$rattan" ]; then
  usage >&2
  exit 2
fi
if [ ! -x "$rattan" ]; then
  echo "bench-emu-vs-rattan: $rattan is not an executable file (see --help for how to build rattan 0.1.1)" >&2
  exit 2
fi
seconds=${SECONDS_PER_RUN:-8}
case "$seconds" in
  ''|*[!0-9]*) echo "bench-emu-vs-rattan: SECONDS_PER_RUN must be a whole number of seconds >= 6, got '$seconds'" >&2; exit 2 ;;
esac
if [ "$seconds" -lt 6 ]; then
  echo "bench-emu-vs-rattan: SECONDS_PER_RUN must be at least 6 (rattan's CPU is sampled over seconds 3.5-8.5 of an 8-s run, scaled to the run), got $seconds" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "bench-emu-vs-rattan: needs root (both emulators create network namespaces)" >&2
  exit 2
fi
for tool in iperf3 jq; do
  command -v "$tool" >/dev/null || { echo "bench-emu-vs-rattan: $tool is missing; run scripts/setup.sh" >&2; exit 2; }
done
[ -e /dev/net/tun ] || { echo "bench-emu-vs-rattan: /dev/net/tun is missing (gearbox's emulator needs it)" >&2; exit 2; }

cd "$(dirname "$0")/.."
if [ -n "${EMU_BENCH:-}" ]; then
  emu_bench=$EMU_BENCH
else
  command -v cargo >/dev/null || {
    echo "bench-emu-vs-rattan: no cargo for root; build the example as your user" \
         "(cargo build --release --locked -p gearbox-emu --example emu_bench) and pass EMU_BENCH=PATH" >&2
    exit 2
  }
  cargo build --release --locked -q -p gearbox-emu --example emu_bench
  emu_bench="${CARGO_TARGET_DIR:-target}/release/examples/emu_bench"
fi
[ -x "$emu_bench" ] || { echo "bench-emu-vs-rattan: $emu_bench is not an executable file" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ticks_per_s=$(getconf CLK_TCK)

# Formats bits/s the way docs/emu.md's table does: Gbit/s with two decimals from 1 Gbit/s
# up, Mbit/s with one decimal below.
rate() {
  awk -v b="$1" 'BEGIN { if (b >= 1e9) printf "%.2f Gbit/s", b / 1e9; else printf "%.1f Mbit/s", b / 1e6 }'
}

# User + system CPU of a process, all its threads, in clock ticks (/proc/PID/stat fields
# 14 and 15; the fields are counted after the command name, which may hold spaces).
cpu_ticks() {
  local stat rest
  stat=$(cat "/proc/$1/stat") || return 1
  rest=${stat##*) }
  read -r -a f <<<"$rest"
  echo $(( f[11] + f[12] ))
}

# gearbox: one case of emu_bench. Prints "BITS_PER_S CPU_PERCENT".
gearbox_case() {
  local row
  row=$("$emu_bench" "$seconds" "$1" | { grep '^| [^c]' || true; } | tail -n 1)
  case "$row" in
    '') echo "bench-emu-vs-rattan: $emu_bench printed no result row for case $1" >&2; return 1 ;;
    *failed:*) echo "bench-emu-vs-rattan: gearbox-emu case $1: $row" >&2; return 1 ;;
  esac
  # "| name | 0.048 Gbit/s (47.7 Mbit/s) | 20.9% (relay ran 9.4 s) |"
  awk -F'|' '{
    split($3, g, "(");  split(g[2], m, " ");
    split($4, c, "%");
    printf "%.0f %.1f\n", m[1] * 1e6, c[1]
  }' <<<"$row"
}

# rattan: one case, the cells of the link given as TOML (uplink then downlink, ending in
# cells named up_last and down_last). Prints "BITS_PER_S CPU_PERCENT".
rattan_case() {
  local name=$1 cells=$2 dir="$work/$1"
  mkdir -p "$dir"
  cat >"$dir/rattan.toml" <<EOF
[env]
mode = "Isolated"
left_veth_count = 1
right_veth_count = 1
# docs/emu.md's runs pinned everything to the two cores of a 2-core VM.
client_cores = [0]
server_cores = [1]

[resource]
cpu = [1]

$cells

[commands]
left = ["/bin/sh", "-c", 'sleep 1; : >"$dir/started"; exec iperf3 -c "\$RATTAN_BASE" -t $seconds -O 1 -J >"$dir/iperf3.json"']
right = ["iperf3", "-s", "-1"]
EOF
  "$rattan" run -c "$dir/rattan.toml" >"$dir/rattan.log" 2>&1 &
  local pid=$!
  local waited=0
  while [ ! -e "$dir/started" ]; do
    if ! kill -0 "$pid" 2>/dev/null || [ "$waited" -ge 300 ]; then
      echo "bench-emu-vs-rattan: rattan ($name) did not start its client; its log ends:" >&2
      tail -n 20 "$dir/rattan.log" >&2
      kill "$pid" 2>/dev/null || true
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  # Seconds 3.5-8.5 of an 8-s transfer (1 s omitted first), scaled for other lengths.
  local from span c0 c1
  from=$(awk -v s="$seconds" 'BEGIN { printf "%.2f", 3.5 * s / 8 }')
  span=$(awk -v s="$seconds" 'BEGIN { printf "%.2f", 5.0 * s / 8 }')
  sleep "$from"
  c0=$(cpu_ticks "$pid")
  sleep "$span"
  c1=$(cpu_ticks "$pid")
  if ! wait "$pid"; then
    echo "bench-emu-vs-rattan: rattan ($name) failed; its log ends:" >&2
    tail -n 20 "$dir/rattan.log" >&2
    return 1
  fi
  local bps
  bps=$(jq -e '.end.sum_received.bits_per_second' "$dir/iperf3.json") || {
    echo "bench-emu-vs-rattan: rattan ($name): no iperf3 result in $dir/iperf3.json" >&2
    return 1
  }
  awk -v b="$bps" -v d="$((c1 - c0))" -v hz="$ticks_per_s" -v t="$span" \
    'BEGIN { printf "%.0f %.1f\n", b, d / hz / t * 100 }'
}

link_50m='[cells.up_bw]
type = "Bw"
bandwidth = "50Mbps"
queue = "DropTail"
queue_config = { packet_limit = 300 }

[cells.up_last]
type = "Delay"
delay = "20ms"

[cells.down_bw]
type = "Bw"
bandwidth = "50Mbps"
queue = "DropTail"
queue_config = { packet_limit = 300 }

[cells.down_last]
type = "Delay"
delay = "20ms"

[links]
left = "up_bw"
up_bw = "up_last"
up_last = "right"
right = "down_bw"
down_bw = "down_last"
down_last = "left"'

link_max='[cells.up_last]
type = "Bw"
bandwidth = "100Gbps"

[cells.down_last]
type = "Bw"
bandwidth = "100Gbps"

[links]
left = "up_last"
up_last = "right"
right = "down_last"
down_last = "left"'

echo "gearbox-emu vs rattan ($("$rattan" --version 2>/dev/null | head -n 1)): iperf3 TCP, ${seconds} s after 1 s omitted, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo
echo "| case | gearbox-emu goodput | gearbox-emu relay CPU | rattan goodput | rattan CPU |"
echo "|---|---|---|---|---|"
row() {
  local title=$1 gearbox rattan_figures g_bps g_cpu r_bps r_cpu
  gearbox=$(gearbox_case "$2")
  rattan_figures=$(rattan_case "$3" "$4")
  read -r g_bps g_cpu <<<"$gearbox"
  read -r r_bps r_cpu <<<"$rattan_figures"
  echo "| $title | $(rate "$g_bps") | ${g_cpu}% | $(rate "$r_bps") | ${r_cpu}% |"
}
row "50 Mbit/s, 2 x 20 ms" 2 50m "$link_50m"
row "100 Gbit/s link, no delay" 1 max "$link_max"
