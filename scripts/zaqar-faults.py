#!/usr/bin/env python3
"""The fault run of Zaqar in a cluster (issue 41): three real `charon` nodes with their Zaqar
gateways; a Zaqar queue `zq` on node 1 whose claim-count dead-letter queue `zdlq` is on node 2
(so each move crosses nodes: at least once). Posters post through random nodes' gateways,
claimers claim and release through random nodes (every second claim of a message moves it to
`zdlq`), while a random node is killed with `kill -9` and restarted or (as root) cut off. A
checker counts every post a gateway answered 201: at the end each must be in `zq` or `zdlq`
(drained over AMQP through their nodes). Lost must be 0; duplicates are reported.

    cargo build --release -p charon
    sudo .venv/bin/python scripts/zaqar-faults.py --cycles 20
    .venv/bin/python scripts/zaqar-faults.py --cycles 20 --no-partitions

pika (scripts/test.sh installs it into .venv). The nodes are cluster-faults.py's, with Zaqar on
127.0.0.1:18881-18883: run one at a time.
"""

import importlib.util
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

spec = importlib.util.spec_from_file_location("cluster_faults", os.path.join(os.path.dirname(__file__), "cluster-faults.py"))
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)
queues = faults.load("queue_faults", "queue-faults.py")
NODES = faults.NODES
CLIENT = "0123456789abcdef0123456789abcdef"


def zaqar(n, method, path, body=None, timeout=10):
    """(status, parsed JSON or None); 0 when the node did not answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:1888{n}{path}", data=data, method=method)
    for name, value in (("client-id", CLIENT), ("x-project-id", "/"), ("content-type", "application/json")):
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            text = reply.read()
            return reply.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        return e.code, None
    except OSError:
        return 0, None


class Poster(threading.Thread):
    def __init__(self, name):
        super().__init__(daemon=True)
        self.name, self.confirmed, self.running = name, set(), True

    def run(self):
        k = 0
        while self.running:
            keys = [f"{self.name}-{k + i}" for i in range(10)]
            k += 10
            status, _ = zaqar(random.choice(NODES), "POST", "/v2/queues/zq/messages",
                              {"messages": [{"body": {"k": key}, "ttl": 3600} for key in keys]})
            if status == 201:
                self.confirmed.update(keys)
            time.sleep(0.05 if status == 201 else 0.1)


class Claimer(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.claims, self.running = 0, True

    def run(self):
        while self.running:
            status, body = zaqar(random.choice(NODES), "POST", "/v2/queues/zq/claims?limit=10",
                                 {"ttl": 60, "grace": 60})
            if status == 201:
                self.claims += 1
                claim = body["messages"][0]["href"].rsplit("claim_id=", 1)[1]
                zaqar(random.choice(NODES), "DELETE", f"/v2/queues/zq/claims/{claim}")
            else:
                time.sleep(0.1)


def main():
    args, partitions = faults.arguments(__doc__, 20)
    base = tempfile.mkdtemp(prefix="charon-zaqar-faults-")
    cluster = faults.Cluster(args.binary, base, zaqar=True)
    cluster.start_all("zaqar-faults")
    while zaqar(2, "PUT", "/v2/queues/zdlq", {})[0] not in (201, 204):
        time.sleep(0.5)
    metadata = {"_max_claim_count": 1, "_dead_letter_queue": "zdlq"}
    while zaqar(1, "PUT", "/v2/queues/zq", metadata)[0] not in (201, 204):
        time.sleep(0.5)
    for n in NODES:
        for queue in ("zq", "zdlq"):
            while faults.call(n, "GET", f"/api/queues/%2F/{queue}")[0] != 200:
                time.sleep(0.2)
    posters = [Poster(f"p{i}") for i in range(2)]
    claimers = [Claimer() for _ in range(4)]
    started = time.time()
    done = cluster.under_faults(posters + claimers, args.cycles, partitions, lambda: (
        f"{sum(len(p.confirmed) for p in posters)} posted, {sum(c.claims for c in claimers)} claims"))
    # Claims expire (60 s at most) or were released; unfinished moves went back: drain once
    # nothing is claimed any more.
    deadline = time.time() + 150
    while time.time() < deadline:
        status, stats = zaqar(1, "GET", "/v2/queues/zq/stats")
        if status == 200 and stats["messages"]["claimed"] == 0:
            break
        print(f"waiting for claims to end: {status} {stats}", flush=True)
        time.sleep(5)
    found = []
    take = lambda body: found.append(json.loads(body)["k"])
    left, moved = queues.drain(1, "zq", take), queues.drain(2, "zdlq", take)
    confirmed = set().union(*(p.confirmed for p in posters))
    lost = sorted(confirmed - set(found))
    duplicates = len(found) - len(set(found))
    print(f"{args.cycles} cycles in {time.time() - started:.0f} s ({done['kill -9']} kill -9, "
          f"{done['partition']} partitions): {len(confirmed)} posts confirmed, "
          f"{sum(c.claims for c in claimers)} claims; {left} left in zq, {moved} moved to zdlq, {duplicates} duplicates")
    cluster.verdict(lost)


if __name__ == "__main__":
    main()
