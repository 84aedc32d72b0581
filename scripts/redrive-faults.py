#!/usr/bin/env python3
"""The fault run of redrive jobs in a cluster (issue 41 item 3): three real `charon` nodes; a
dead-letter queue `dlq` on node 1 takes confirmed publishes through random nodes, and redrive
jobs, each created through a random node (which runs it: it reads `dlq` and writes `final`, on
node 2, through proxies), move them on while nodes are killed with `kill -9` and restarted and
(as root) cut off from the others. After every fault a job that a refusal paused is resumed
through a random node (its runner does it), a finished one is deleted through a random node and
a new one created. At the end the last job empties `dlq`, and a checker counts every confirmed
message: each must have been consumed from `final` or be left in a queue. Lost must be 0;
duplicates are allowed (a job moves at least once).

    cargo build --release -p charon
    sudo .venv/bin/python scripts/redrive-faults.py --cycles 20     # about 4 minutes
    .venv/bin/python scripts/redrive-faults.py --cycles 20 --no-partitions

pika (scripts/test.sh installs it into .venv). The nodes are cluster-faults.py's: run one at a
time.
"""

import importlib.util
import os
import random
import sys
import tempfile
import threading
import time

import pika

spec = importlib.util.spec_from_file_location("cluster_faults", os.path.join(os.path.dirname(__file__), "cluster-faults.py"))
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)
queues = faults.load("queue_faults", "queue-faults.py")
NODES, call, connect, drain = faults.NODES, faults.call, queues.connect, queues.drain
SPEC = {"source": "dlq", "destination": {"type": "queue", "queue": "final"}}


class Publisher(threading.Thread):
    """Confirmed persistent publishes to `dlq` through random nodes."""

    def __init__(self, name):
        super().__init__(daemon=True)
        self.name, self.confirmed, self.running = name, set(), True

    def run(self):
        k = 0
        while self.running:
            try:
                connection = connect(random.choice(NODES))
                channel = connection.channel()
                channel.confirm_delivery()
                for _ in range(random.randint(50, 300)):
                    if not self.running:
                        break
                    body = f"{self.name}-{k}"
                    k += 1
                    try:
                        channel.basic_publish("", "dlq", body.encode(), pika.BasicProperties(delivery_mode=2))
                        self.confirmed.add(body)
                    except pika.exceptions.NackError:
                        pass
                    time.sleep(0.002)
                connection.close()
            except Exception:
                time.sleep(0.2)


class Consumer(queues.Consumer):
    """queue-faults.py's consumer, on `final` only."""

    def run(self):
        queues.QUEUES.update({n: "final" for n in NODES})
        super().run()


def tend(counts):
    """Keeps one job going, asking random live nodes: a paused one resumed, a finished one
    deleted and a new one created."""
    n = random.choice(NODES)
    status, jobs = call(n, "GET", "/api/charon/redrives/%2F")
    if status != 200:
        return
    live = False
    for job in jobs:
        path = f"/api/charon/redrives/%2F/{job['id']}"
        if job["state"] == "paused":
            live = True
            if call(random.choice(NODES), "POST", f"{path}/resume")[0] == 200:
                counts["resumed"] += 1
        elif job["state"] == "running":
            live = True
        elif call(random.choice(NODES), "DELETE", path)[0] == 204:
            counts["deleted"] += 1
    if not live and call(n, "POST", "/api/charon/redrives/%2F", SPEC)[0] == 201:
        counts["created"] += 1


def depth(queue):
    for n in NODES:
        status, body = call(n, "GET", f"/api/queues/%2F/{queue}")
        if status == 200 and body.get("messages") is not None:
            return body["messages"]
    return None


def main():
    args, partitions = faults.arguments(__doc__, 20)
    base = tempfile.mkdtemp(prefix="charon-redrive-faults-")
    cluster = faults.Cluster(args.binary, base)
    cluster.start_all("redrive-faults")
    for n, queue in ((1, "dlq"), (2, "final")):
        connection = connect(n)
        connection.channel().queue_declare(queue, durable=True)
        connection.close()
    for m in NODES:
        for queue in ("dlq", "final"):
            while call(m, "GET", f"/api/queues/%2F/{queue}")[0] != 200:
                time.sleep(0.2)
    publishers = [Publisher(f"p{i}") for i in range(2)]
    consumers = [Consumer() for _ in range(2)]
    counts = {"created": 0, "resumed": 0, "deleted": 0}
    started = time.time()
    done = cluster.under_faults(publishers + consumers, args.cycles, partitions, lambda: (
        f"{sum(len(p.confirmed) for p in publishers)} confirmed, "
        f"{len(set().union(*(c.received for c in consumers)))} consumed from final, jobs {counts}"),
        tend=lambda: tend(counts))
    # Every node up: jobs go on until `dlq` is empty and none runs.
    deadline = time.time() + 180
    while time.time() < deadline:
        tend(counts)
        status, jobs = call(1, "GET", "/api/charon/redrives/%2F")
        running = status == 200 and any(j["state"] in ("running", "paused") for j in jobs)
        if depth("dlq") == 0 and not running:
            break
        time.sleep(1)
    received = set().union(*(c.received for c in consumers))
    time.sleep(3)
    take = lambda body: received.add(body.decode())
    drained = drain(2, "final", take) + drain(1, "dlq", take)
    confirmed = set().union(*(p.confirmed for p in publishers))
    lost = sorted(confirmed - received)
    print(f"{args.cycles} cycles in {time.time() - started:.0f} s ({done['kill -9']} kill -9, "
          f"{done['partition']} partitions): {len(confirmed)} messages confirmed into dlq, {len(received)} distinct "
          f"consumed from final or left ({drained} drained at the end); jobs {counts}")
    cluster.verdict(lost)


if __name__ == "__main__":
    main()
