#!/usr/bin/env python3
"""The long fault run of queues reached from any node (issue 41 items 4 and 6): three real
`charon` nodes, a durable queue homed on each; publishers with confirms and consumers with
acknowledgements on random nodes (so most go through another node's proxy) while nodes are
killed with `kill -9` and restarted, and (as root) cut off from the others with `ip rule ...
prohibit`. A checker counts every message a broker confirmed: each must be consumed (during
the run, or drained at the end). Lost must be 0; duplicates are allowed (at least once).

    cargo build --release -p charon
    sudo .venv/bin/python scripts/queue-faults.py --cycles 20     # about 4 minutes
    .venv/bin/python scripts/queue-faults.py --cycles 20 --no-partitions

pika (scripts/test.sh installs it into .venv). The nodes are cluster-faults.py's (127.0.0.31-33,
cluster 25951-25953, AMQP 5951-5953, HTTP 15951-15953): run one at a time.
"""

import importlib.util
import os
import random
import sys
import tempfile
import threading
import time

import pika

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("cluster_faults", os.path.join(HERE, "cluster-faults.py"))
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)
NODES, call = faults.NODES, faults.call
QUEUES = {n: f"homed-{n}" for n in NODES}


def connect(n):
    params = pika.ConnectionParameters("127.0.0.1", 5950 + n, credentials=pika.PlainCredentials("guest", "guest"),
                                       socket_timeout=5, blocked_connection_timeout=30, heartbeat=0,
                                       connection_attempts=1)
    return pika.BlockingConnection(params)


class Publisher(threading.Thread):
    """Publishes numbered persistent messages with confirms through random nodes to random
    queues; a message is confirmed once basic_publish returns (pika raises on a nack)."""

    def __init__(self, name):
        super().__init__(daemon=True)
        self.name, self.confirmed, self.refused, self.running = name, set(), 0, True

    def run(self):
        k = 0
        while self.running:
            n = random.choice(NODES)
            try:
                connection = connect(n)
                channel = connection.channel()
                channel.confirm_delivery()
                for _ in range(random.randint(50, 300)):
                    if not self.running:
                        break
                    body = f"{self.name}-{k}"
                    k += 1
                    queue = QUEUES[random.choice(NODES)]
                    try:
                        channel.basic_publish("", queue, body.encode(), pika.BasicProperties(delivery_mode=2),
                                              mandatory=False)
                        self.confirmed.add(body)
                    except pika.exceptions.NackError:
                        self.refused += 1
                connection.close()
            except Exception:  # a kill, a cut, a refusal: maybe published, maybe not
                time.sleep(0.2)


class Consumer(threading.Thread):
    """Consumes a random queue through a random node for a while, acknowledging in batches."""

    def __init__(self):
        super().__init__(daemon=True)
        self.received, self.running = set(), True

    def run(self):
        while self.running:
            n = random.choice(NODES)
            try:
                connection = connect(n)
                channel = connection.channel()
                channel.basic_qos(prefetch_count=50)
                deadline = time.time() + random.uniform(1, 4)
                for method, _, body in channel.consume(QUEUES[random.choice(NODES)], inactivity_timeout=0.5):
                    if method is not None:
                        self.received.add(body.decode())
                        if method.delivery_tag % 10 == 0:
                            channel.basic_ack(method.delivery_tag, multiple=True)
                    if not self.running or time.time() > deadline:
                        break
                connection.close()
            except Exception:
                time.sleep(0.2)


def drain(n, queue, take):
    """Takes every message of `queue` through node n, handing each body to `take`; the count
    taken."""
    connection = connect(n)
    channel = connection.channel()
    taken = 0
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        take(body)
        taken += 1
    connection.close()
    return taken


def main():
    args, partitions = faults.arguments(__doc__, 20)
    base = tempfile.mkdtemp(prefix="charon-queue-faults-")
    cluster = faults.Cluster(args.binary, base)
    cluster.start_all("queue-faults")
    for n in NODES:
        connection = connect(n)
        connection.channel().queue_declare(QUEUES[n], durable=True)
        connection.close()
    for n in NODES:
        for m in NODES:
            while call(m, "GET", f"/api/queues/%2F/{QUEUES[n]}")[0] != 200:
                time.sleep(0.2)
    publishers = [Publisher(f"p{i}") for i in range(3)]
    consumers = [Consumer() for _ in range(2)]
    started = time.time()
    done = cluster.under_faults(publishers + consumers, args.cycles, partitions, lambda: (
        f"{sum(len(p.confirmed) for p in publishers)} confirmed, "
        f"{len(set().union(*(c.received for c in consumers)))} consumed"))
    # Every node up and serving its queue again; what is left is drained through its home.
    received = set().union(*(c.received for c in consumers))
    deadline = time.time() + 60
    drained = 0
    for n in NODES:
        while True:
            try:
                drained += drain(n, QUEUES[n], lambda body: received.add(body.decode()))
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1)
    # Unacknowledged deliveries of consumers that went away come back a moment later.
    time.sleep(3)
    for n in NODES:
        drained += drain(n, QUEUES[n], lambda body: received.add(body.decode()))
    confirmed = set().union(*(p.confirmed for p in publishers))
    lost = sorted(confirmed - received)
    refused = sum(p.refused for p in publishers)
    print(f"{args.cycles} cycles in {time.time() - started:.0f} s ({done['kill -9']} kill -9, "
          f"{done['partition']} partitions): {len(confirmed)} messages confirmed, {refused} refused (nacked: the "
          f"queue's node down), {len(received)} distinct consumed ({drained} drained at the end)")
    cluster.verdict(lost)


if __name__ == "__main__":
    main()
