#!/usr/bin/env bash
# The runs behind BENCHMARKS.md's current tables: a freshly started release Charon beside
# RabbitMQ 4.3.6 (5683) and 4.0.5 (5682), alternated round by round in one charon-bench run per
# scenario, so the three columns share the machine's hour. Writes bench/results/<UTC date>.txt.
#
#   ../shared/tools/reference-rabbitmq.sh start; RABBITMQ=4.0 ../shared/tools/reference-rabbitmq.sh start
#   bench/current.sh            # everything (about 80 minutes on 2 cores)
#   bench/current.sh s1a s1b    # only these groups (see the groups below)
#
# Nothing else may run meanwhile: the load generator shares the machine with the broker.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked -p charon -p charon-bench
BENCH=target/release/charon-bench
PORT=5691
DATA=$(mktemp -d /tmp/charon-bench-XXXX)
target/release/charon --data-dir "$DATA" --listen 127.0.0.1:$PORT --http-listen 127.0.0.1:15691 \
  --prometheus-listen 127.0.0.1:15791 --no-zaqar >"$DATA.log" 2>&1 &
CHARON=$!
trap 'kill $CHARON 2>/dev/null; wait $CHARON 2>/dev/null; rm -rf "$DATA"' EXIT
sleep 1

beam_on() { # the beam.smp listening on port $1
  ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2
}
R43=$(beam_on 5683)
R40=$(beam_on 5682)
[ -n "$R43" ] && [ -n "$R40" ] || { echo "start both reference brokers first" >&2; exit 1; }

OUT=bench/results/$(date -u +%Y-%m-%d).txt
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
  echo "# A = Charon (release, 127.0.0.1:$PORT), B = RabbitMQ 4.3.6 (5683), C = RabbitMQ 4.0.5 (5682)"
} >>"$OUT"

run() { # scenario flags...
  echo "## charon-bench $*" | tee -a "$OUT"
  $BENCH "$@" --url amqp://guest:guest@127.0.0.1:$PORT/%2f --pid $CHARON \
    --compare amqp://guest:guest@127.0.0.1:5683/%2f --pid2 "$R43" \
    --compare2 amqp://guest:guest@127.0.0.1:5682/%2f --pid3 "$R40" 2>&1 | tee -a "$OUT"
}

WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=(s1a s1b s3 s10 s5 s6 s7 raw latency)
for group in "${WANT[@]}"; do
  case $group in
    s1a) run s1a --rounds 3; run s1a --consumer amqprs --publisher amqprs --rounds 3 ;;
    s1b) run s1b --rounds 3; run s1b --consumer amqprs --publisher amqprs --rounds 3 ;;
    s3) run s3x10 s3x100 --rounds 3; run s3x10 s3x100 --consumer amqprs --rounds 3 ;;
    s10) run s10 --rounds 3; run s10 --nodelay --rounds 3 ;;
    s5) run s5 --rounds 1 ;;                       # 1M: RabbitMQ takes ~6 minutes
    s6) run s6 --rounds 3; run s6 --consumer amqprs --rounds 3 ;;
    s7) run s7-drop-head s7-reject --messages 2000000 --rounds 1 ;;
    raw) run s1a-raw --seconds 10 --rounds 2; run s2-drain --rounds 1 ;;
    latency) run s1a --rate 20000 --rounds 2; run s1b --rate 10000 --messages 100000 --rounds 2 ;;
    *) echo "unknown group $group" >&2; exit 2 ;;
  esac
done
echo "peak RSS of the Charon process: $(grep VmHWM /proc/$CHARON/status)" | tee -a "$OUT"
