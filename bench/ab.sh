#!/usr/bin/env bash
# A change against the build before it, side by side: the working tree's release build (A,
# "new") and REV's (B, "before", built in a git worktree with its own target directory), each
# scenario run twice, once with each build first in its rounds, because the broker that runs
# first in a round is several percent faster or slower at random on this machine. Appends to
# bench/results/<UTC date>-ab.txt; the ratios go in the commit body and BENCHMARKS.md.
#
#   bench/ab.sh 4982244                 # the default scenarios (about 25 minutes on 2 cores)
#   bench/ab.sh 4982244 s1b s10         # only these groups (see below)
#   AB_ROUNDS=7 bench/ab.sh 4982244 s1a # more rounds where one build's rounds spread wide
#
# Nothing else may run meanwhile, builds and tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?"usage: bench/ab.sh REV [group...]"}
shift
WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=(s1a s1b s5 s6 s10 redrive)

# What is built, named before the build (the tree may change while the runs go on).
LABEL="new = $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), before = $REV"
cargo build --release --locked -p charon -p charon-bench
BEFORE_TREE=$(mktemp -d /tmp/charon-ab-XXXX)
git worktree add -q --detach "$BEFORE_TREE" "$REV"
(cd "$BEFORE_TREE" && CARGO_TARGET_DIR=${AB_TARGET:-/tmp/charon-ab-target} cargo build --release --locked -p charon)
BEFORE_BIN=${AB_TARGET:-/tmp/charon-ab-target}/release/charon
BENCH=target/release/charon-bench

start() { # binary port http prometheus: starts a broker on a fresh data directory
  local data
  data=$(mktemp -d /tmp/charon-ab-data-XXXX)
  "$1" --data-dir "$data" --listen "127.0.0.1:$2" --http-listen "127.0.0.1:$3" \
    --prometheus-listen "127.0.0.1:$4" --no-zaqar >"$data.log" 2>&1 &
  echo $!
}
NEW=$(start target/release/charon 5691 15691 15791)
OLD=$(start "$BEFORE_BIN" 5692 15692 15792)
trap 'kill $NEW $OLD 2>/dev/null; git worktree remove --force "$BEFORE_TREE"' EXIT
# Both brokers take connections before the first round (at most 30 s).
for port in 5691 5692; do
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done

OUT=bench/results/$(date -u +%Y-%m-%d)-ab.txt
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): $LABEL" >>"$OUT"

run() { # order scenario flags...
  local order=$1 a=$NEW b=$OLD an=5691 bn=5692
  shift
  if [ "$order" = before-first ]; then a=$OLD b=$NEW an=5692 bn=5691; fi
  echo "## [$order] A=$([ "$a" = "$NEW" ] && echo new || echo before): $*" | tee -a "$OUT"
  $BENCH "$@" --url "amqp://guest:guest@127.0.0.1:$an/%2f" --pid "$a" --api "http://guest:guest@127.0.0.1:1$an" \
    --compare "amqp://guest:guest@127.0.0.1:$bn/%2f" --pid2 "$b" --api2 "http://guest:guest@127.0.0.1:1$bn" 2>&1 | tee -a "$OUT"
}

R=${AB_ROUNDS:-5}
for order in new-first before-first; do
  for group in "${WANT[@]}"; do
    case $group in
      s1a) run $order s1a --messages 1000000 --rounds "$R"
           run $order s1a --messages 1000000 --consumer amqprs --publisher amqprs --rounds "$R" ;;
      s1b) run $order s1b --messages 1000000 --rounds "$R"
           run $order s1b --consumer amqprs --publisher amqprs --rounds 3 ;;
      s5) run $order s5 --rounds 3 ;;
      s6) run $order s6 --rounds 3 ;;
      s10) run $order s10 --rounds "$R" ;;
      redrive) run $order redrive --rounds "$R" ;;
      *) echo "unknown group $group" >&2; exit 2 ;;
    esac
  done
done
