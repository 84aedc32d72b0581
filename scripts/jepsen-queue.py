#!/usr/bin/env python3
"""A Jepsen-style total-queue check of one quorum queue on a three-node cluster (issue 42 item 6),
for RabbitMQ 4.3.6 (`rmq-cluster.sh`) and Charon's replicated quorum queues: publishers with
confirms through random nodes record every message as ok (confirmed), failed (nacked) or
unknown (the connection broke before its answer); each cycle the queue's leader's node is
killed with `kill -9` and started again or (`--partitions`, Charon only, as root) cut off from
the other nodes for 4-6 s and healed; at the end the queue is drained. The checker: lost (ok,
never drained) must be 0, unexpected (drained, never published) must be 0; duplicates and
recovered (unknown, drained) are reported. Failover time: from each fault to the first confirm
after it.

    sudo ../shared/tools/rmq-cluster.sh start
    sudo .venv/bin/python scripts/jepsen-queue.py --broker rabbitmq --cycles 10
    cargo build --release -p charon
    sudo .venv/bin/python scripts/jepsen-queue.py --broker charon --cycles 50 --partitions

pika (scripts/test.sh installs it into .venv). `--broker charon` runs cluster-faults.py's nodes
(release build unless `--binary`); tests/e2e_cluster.rs runs a short one on every test run.
"""

import argparse
import base64
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pika

HERE = os.path.dirname(os.path.abspath(__file__))
RMQ = os.path.join(HERE, "..", "..", "shared", "tools", "rmq-cluster.sh")
QUEUE = "jepsen"


class RabbitMQ:
    """rmq-cluster.sh's nodes a, b, c."""

    amqp, http = {1: 5801, 2: 5802, 3: 5803}, {1: 15801, 2: 15802, 3: 15803}
    names = {"rmqa@localhost": 1, "rmqb@localhost": 2, "rmqc@localhost": 3}

    def kill(self, n):
        subprocess.run([RMQ, "kill", str(n)], check=True, capture_output=True)

    def start(self, n):
        subprocess.run([RMQ, "restart", str(n)], check=True, capture_output=True)

    def stop(self):
        pass


class Charon:
    """cluster-faults.py's nodes."""

    amqp, http = {1: 5951, 2: 5952, 3: 5953}, {1: 15951, 2: 15952, 3: 15953}
    names = {f"charon-{n}@localhost": n for n in (1, 2, 3)}

    def __init__(self, binary):
        spec = importlib.util.spec_from_file_location("cluster_faults", os.path.join(HERE, "cluster-faults.py"))
        faults = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(faults)
        self.cluster = faults.Cluster(binary, tempfile.mkdtemp(prefix="charon-jepsen-"))
        self.cluster.start_all("jepsen")

        self.faults = faults

    def kill(self, n):
        self.cluster.kill9(n)

    def start(self, n):
        self.cluster.start(n)

    def cut(self, n):
        return self.faults.Partition(n)

    def stop(self):
        self.cluster.stop()


def api(broker, n, path, method="GET", body=None):
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http[n]}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
    request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=5) as reply:
        text = reply.read()
        return json.loads(text) if text else None


def connect(broker, n):
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.amqp[n], credentials=pika.PlainCredentials("guest", "guest"), socket_timeout=5,
        blocked_connection_timeout=30, heartbeat=0, connection_attempts=1))


class Publisher(threading.Thread):
    def __init__(self, broker, name, up):
        super().__init__(daemon=True)
        self.broker, self.name, self.up = broker, name, up
        self.ok, self.failed, self.unknown, self.confirmed_at, self.running = set(), set(), set(), [], True

    def run(self):
        k = 0
        while self.running:
            try:
                connection = connect(self.broker, random.choice(sorted(self.up)))
                channel = connection.channel()
                channel.confirm_delivery()
                while self.running:
                    value = f"{self.name}-{k}"
                    k += 1
                    try:
                        sent = time.time()
                        channel.basic_publish("", QUEUE, value.encode(), pika.BasicProperties(delivery_mode=2))
                        self.ok.add(value)
                        self.confirmed_at.append((sent, time.time()))
                    except pika.exceptions.NackError:
                        self.failed.add(value)
                    except Exception:
                        self.unknown.add(value)
                        raise
            except Exception:
                time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=["rabbitmq", "charon"], default="rabbitmq")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--binary", default="target/release/charon")
    parser.add_argument("--partitions", action="store_true",
                        help="every other fault cuts the leader off instead (Charon, as root)")
    args = parser.parse_args()
    broker = RabbitMQ() if args.broker == "rabbitmq" else Charon(args.binary)
    connection = connect(broker, 1)
    connection.channel().queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()
    up = {1, 2, 3}
    publishers = [Publisher(broker, f"p{i}", up) for i in range(2)]
    for p in publishers:
        p.start()
    failovers = []
    started = time.time()
    try:
        for cycle in range(args.cycles):
            time.sleep(random.uniform(2, 4))
            # The leader most of the nodes name (one just healed may not know of a move yet).
            named = []
            for n in sorted(up):
                try:
                    queue = api(broker, n, f"/api/queues/%2F/{QUEUE}")
                    named.append(queue.get("leader") or queue.get("node"))
                except Exception:
                    pass
            leader = broker.names.get(max(set(named), key=named.count), 1) if named else 1
            partition = args.partitions and cycle % 2 == 1
            killed = time.time()
            if partition:
                cut = broker.cut(leader)
            else:
                up.discard(leader)
                broker.kill(leader)
            deadline = killed + 30
            # The first confirm of a publish sent after the fault (one in flight at the fault
            # may be confirmed a moment after it, by a leader that is going).
            while time.time() < deadline and not any(s > killed for p in publishers for s, _ in p.confirmed_at[-50:]):
                time.sleep(0.01)
            first = min((t for p in publishers for s, t in p.confirmed_at[-200:] if s > killed), default=None)
            failovers.append(first - killed if first else None)
            time.sleep(random.uniform(1, 3))
            if partition:
                cut.heal()
            else:
                broker.start(leader)
                up.add(leader)
            print(f"cycle {cycle + 1}: {'cut off' if partition else 'killed'} node {leader}; first confirm after "
                  f"{'%.2f s' % failovers[-1] if failovers[-1] is not None else 'none within 30 s'}; "
                  f"{sum(len(p.ok) for p in publishers)} ok", flush=True)
    finally:
        for p in publishers:
            p.running = False
        for p in publishers:
            p.join(timeout=30)
    time.sleep(3)
    drained = []
    connection = connect(broker, 1)
    channel = connection.channel()
    while True:
        method, _, body = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        drained.append(body.decode())
    connection.close()
    ok = set().union(*(p.ok for p in publishers))
    unknown = set().union(*(p.unknown for p in publishers))
    attempted = ok | unknown | set().union(*(p.failed for p in publishers))
    seen = set(drained)
    lost, unexpected = ok - seen, seen - attempted
    times = sorted(f for f in failovers if f is not None)
    print(f"{args.broker}, {args.cycles} leader {'kills and partitions' if args.partitions else 'kills'} in {time.time() - started:.0f} s: {len(ok)} ok, "
          f"{sum(len(p.failed) for p in publishers)} failed, {len(unknown)} unknown; drained {len(drained)} "
          f"({len(drained) - len(seen)} duplicates, {len(unknown & seen)} unknown recovered)")
    if times:
        print(f"failover (kill to first confirm): p50 {statistics.median(times):.2f} s, max {times[-1]:.2f} s, "
              f"{len(failovers) - len(times)} without a confirm within 30 s")
    print(f"lost: {len(lost)}, unexpected: {len(unexpected)}")
    broker.stop()
    if lost or unexpected:
        print(f"FAILED: lost e.g. {sorted(lost)[:5]}, unexpected e.g. {sorted(unexpected)[:5]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
