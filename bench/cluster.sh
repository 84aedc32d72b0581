#!/usr/bin/env bash
# What the cluster costs (issue 41 item 7), side by side with RabbitMQ 4.3.6's three-node
# cluster on this machine (../shared/tools/rmq-cluster.sh start, as root: 5801-5803):
#
#   declare   a durable exchange declare's latency, one at a time, through each node of a
#             three-node Charon cluster (release build, 5901-5903, cluster 25901-25903) against
#             the same node of RabbitMQ's (a Raft write in both: Charon's metadata group,
#             RabbitMQ's Khepri); and a single Charon node's, for what the cluster adds.
#
#   s1b       S1b (200k persistent 16 B messages, 1000 confirms in flight, qos 1000) into a
#             classic queue of node 1: A through node 1 itself (the home node), then through
#             node 2 (proxied to node 1), B a single Charon node, C RabbitMQ's cluster the same
#             way (node 1, then node 2 to a queue of node 1); with lapin, then amqprs.
#
#   qq        S1b into a quorum queue declared through node 1 (issue 42 item 7): replicated to
#             three members in both clusters; published through node 1 (the leader's) and
#             through node 2 (a follower's), against a single Charon node's quorum queue; each run
#             alone, with the CPU seconds of every node of its cluster summed (per 1M messages).
#             3 rounds with lapin, then 3 with amqprs.
#
#   bench/cluster.sh [declare] [s1b] [qq]   # declare and s1b when none is named
#
# Writes bench/results/<UTC date>-cluster.txt. Nothing else may run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
ss -ltnH "sport = :5802" | grep -q . || { echo "start RabbitMQ's cluster first: ../shared/tools/rmq-cluster.sh start" >&2; exit 1; }
cargo build --release --locked -p charon -p charon-bench
BENCH=target/release/charon-bench
BASE=$(mktemp -d /tmp/charon-cluster-bench-XXXX)
echo CLUSTERBENCHCOOKIE >"$BASE/secret"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$BASE"' EXIT
PEERS=()
for n in 1 2 3; do PEERS+=(--cluster-peer "charon-$n@localhost=127.0.0.1:2590$n"); done
for n in 1 2 3; do
  target/release/charon --node-name "charon-$n@localhost" --cluster-listen "127.0.0.1:2590$n" "${PEERS[@]}" \
    --cluster-secret-file "$BASE/secret" --data-dir "$BASE/node-$n" --listen "127.0.0.1:590$n" \
    --http-listen "127.0.0.1:1590$n" --prometheus-listen "127.0.0.1:1591$n" --no-zaqar >"$BASE/node-$n.log" 2>&1 &
  PIDS+=($!)
  echo $! >"$BASE/pid-$n"
done
target/release/charon --data-dir "$BASE/single" --listen 127.0.0.1:5904 --http-listen 127.0.0.1:15904 \
  --prometheus-listen 127.0.0.1:15914 --no-zaqar >"$BASE/single.log" 2>&1 &
PIDS+=($!)
echo $! >"$BASE/pid-single"
# The cluster takes a metadata change (it formed and has a leader) before the runs.
for _ in $(seq 1 60); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -u guest:guest -X PUT -H 'content-type: application/json' \
    -d '{"name":"bench"}' http://127.0.0.1:15901/api/cluster-name || true)
  [ "$code" = 204 ] && break
  sleep 1
done
[ "$code" = 204 ] || { echo "the Charon cluster did not form" >&2; exit 1; }
leader() { curl -s http://127.0.0.1:1591"$1"/metrics | awk '/^charon_raft_leader/ {print $2}'; }

OUT=bench/results/$(date -u +%Y-%m-%d)-cluster.txt
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
  echo "# A = a node of a 3-node Charon cluster (release), B = the same node of RabbitMQ 4.3.6's (rmq-cluster.sh)"
} >>"$OUT"
MODES=("$@")
[ ${#MODES[@]} -eq 0 ] && MODES=(declare s1b)
wants() { [[ " ${MODES[*]} " == *" $1 "* ]]; }
pid() { cat "$BASE/pid-$1"; }

# CPU ticks (1/100 s) of the processes named, summed.
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }

if wants qq; then
  rmq_pids=($(for n in 1 2 3; do ../shared/tools/rmq-cluster.sh pid $n; done))
  charon_pids=($(pid 1) $(pid 2) $(pid 3))
  for client in lapin amqprs; do
    echo "## qq: S1b (200k, $client) into a quorum queue of node 1; CPU = every node of the cluster" | tee -a "$OUT"
    for round in 1 2 3; do
      for run in "charon-leader 5901 - charon" "charon-follower 5902 5901 charon" "single 5904 - single" \
                 "rabbitmq-leader 5801 - rabbitmq" "rabbitmq-follower 5802 5801 rabbitmq"; do
        set -- $run
        case $4 in
          charon) pids=("${charon_pids[@]}") ;;
          rabbitmq) pids=("${rmq_pids[@]}") ;;
          single) pids=($(pid single)) ;;
        esac
        home=(); [ "$3" != - ] && home=(--home "amqp://guest:guest@127.0.0.1:$3/%2f")
        before=$(ticks "${pids[@]}")
        line=$($BENCH s1b-quorum --rounds 1 --consumer $client --publisher $client \
          --url "amqp://guest:guest@127.0.0.1:$2/%2f" "${home[@]}" 2>&1 | grep -m1 'msg/s' || true)
        after=$(ticks "${pids[@]}")
        rate=$(echo "$line" | grep -o '= [0-9]* msg/s' | grep -o '[0-9]*' || echo 0)
        cpu=$(awk -v t=$((after - before)) 'BEGIN { printf "%.1f", t * 0.05 }')
        echo "round $round $1: $rate msg/s, $cpu CPU-s per 1M (all nodes) | $line" | tee -a "$OUT"
      done
    done
  done
fi

if wants s1b; then
  rmq_pid=$(../shared/tools/rmq-cluster.sh pid 1 || true)
  rmq_pid2=$(../shared/tools/rmq-cluster.sh pid 2 || true)
  for client in lapin amqprs; do
    echo "## s1b ($client): A = Charon node 1, its own queue; B = a single Charon node; C = RabbitMQ node 1, its own" | tee -a "$OUT"
    $BENCH s1b --rounds 3 --consumer $client --publisher $client \
      --url amqp://guest:guest@127.0.0.1:5901/%2f --pid "$(pid 1)" \
      --compare amqp://guest:guest@127.0.0.1:5904/%2f --pid2 "$(pid single)" \
      --compare2 amqp://guest:guest@127.0.0.1:5801/%2f --pid3 "$rmq_pid" 2>&1 | tee -a "$OUT"
    echo "## s1b ($client): A = Charon node 2 to a queue of node 1; B = a single Charon node; C = RabbitMQ node 2 to a queue of node 1" | tee -a "$OUT"
    $BENCH s1b --rounds 3 --consumer $client --publisher $client \
      --url amqp://guest:guest@127.0.0.1:5902/%2f --home amqp://guest:guest@127.0.0.1:5901/%2f --pid "$(pid 2)" \
      --compare amqp://guest:guest@127.0.0.1:5904/%2f --pid2 "$(pid single)" \
      --compare2 amqp://guest:guest@127.0.0.1:5802/%2f --home3 amqp://guest:guest@127.0.0.1:5801/%2f \
      --pid3 "$rmq_pid2" 2>&1 | tee -a "$OUT"
  done
fi

wants declare || exit 0
for n in 1 2 3; do
  echo "## declare through node $n (Charon's metadata leader here: $(leader $n))" | tee -a "$OUT"
  $BENCH declare --rounds 3 --url "amqp://guest:guest@127.0.0.1:590$n/%2f" \
    --compare "amqp://guest:guest@127.0.0.1:580$n/%2f" 2>&1 | tee -a "$OUT"
done
echo "## declare: A = a single Charon node, B = node 1 of the Charon cluster" | tee -a "$OUT"
$BENCH declare --rounds 3 --url amqp://guest:guest@127.0.0.1:5904/%2f \
  --compare amqp://guest:guest@127.0.0.1:5901/%2f 2>&1 | tee -a "$OUT"
