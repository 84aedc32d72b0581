#!/usr/bin/env python3
"""The long fault run of the metadata cluster (issue 41 item 6): three real `charon` nodes,
exchanges declared and deleted through any node while nodes are killed with `kill -9` and
restarted, and (as root) cut off from the others with `ip rule ... prohibit`; a checker then
counts every change the cluster acknowledged. Lost (an acknowledged declare missing on a node)
and resurrected (an acknowledged delete present on a node) must both be 0.

    cargo build --release -p charon
    sudo scripts/cluster-faults.py --cycles 30          # about 6 minutes
    scripts/cluster-faults.py --cycles 30 --no-partitions

Standard library only. The nodes listen on 127.0.0.31-33 (cluster 25951-25953, AMQP
5951-5953, HTTP 15951-15953). A change answered 201/204 is acknowledged; one answered otherwise
(500 on the minority side, a connection reset by a kill) may or may not have been made, and
either is accepted. The tests' short version of this is tests/e2e_cluster.rs.
"""

import argparse
import importlib.util
import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

NODES = (1, 2, 3)
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def address(n):
    return f"127.0.0.3{n}"


def call(n, method, path, body=None, timeout=10):
    """(status, parsed JSON or None); status 0 when the node did not answer, -1 when nothing
    listened (a killed node: the change certainly was not made)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:1595{n}{path}", data=data, method=method)
    request.add_header("authorization", AUTH)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            text = reply.read()
            return reply.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        return e.code, None
    except urllib.error.URLError as e:
        return (-1 if isinstance(e.reason, ConnectionRefusedError) else 0), None
    except OSError:
        return 0, None


def arguments(doc, cycles):
    """The fault runs' command line: `--cycles`, `--binary`, `--no-partitions`; the arguments and
    whether partitions are made (they need root)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=cycles)
    parser.add_argument("--binary", default="target/release/charon")
    parser.add_argument("--no-partitions", action="store_true")
    args = parser.parse_args()
    return args, not args.no_partitions and os.geteuid() == 0


def load(name, file):
    """Another of these scripts as a module (their names have dashes)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)), file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Cluster:
    def __init__(self, binary, base, zaqar=False):
        """`zaqar`: each node's Zaqar gateway on 127.0.0.1:1888n (else none)."""
        self.binary, self.base, self.zaqar = binary, base, zaqar
        self.procs = {}
        with open(os.path.join(base, "secret"), "w") as f:
            f.write("FAULTRUNCOOKIE")

    def start(self, n):
        peers = []
        for m in NODES:
            peers += ["--cluster-peer", f"charon-{m}@localhost={address(m)}:2595{m}"]
        log = open(os.path.join(self.base, f"node-{n}.log"), "ab")
        self.procs[n] = subprocess.Popen(
            [self.binary, "--node-name", f"charon-{n}@localhost", "--cluster-listen", f"{address(n)}:2595{n}",
             *peers, "--cluster-secret-file", os.path.join(self.base, "secret"),
             "--data-dir", os.path.join(self.base, f"node-{n}"), "--listen", f"127.0.0.1:595{n}",
             "--http-listen", f"127.0.0.1:1595{n}", "--prometheus-listen", f"127.0.0.1:1596{n}",
             *(["--zaqar-listen", f"127.0.0.1:1888{n}"] if self.zaqar else ["--no-zaqar"])],
            stdout=log, stderr=log)
        deadline = time.time() + 30
        while call(n, "GET", "/api/overview", timeout=2)[0] != 200:
            if time.time() > deadline:
                sys.exit(f"node {n} did not start: see {self.base}/node-{n}.log")
            time.sleep(0.2)

    def start_all(self, name):
        """Starts the three nodes together and waits until the cluster takes a change."""
        for n in NODES:
            threading.Thread(target=self.start, args=(n,)).start()
        for n in NODES:
            while n not in self.procs or call(n, "GET", "/api/overview", timeout=2)[0] != 200:
                time.sleep(0.2)
        while call(1, "PUT", "/api/cluster-name", {"name": name})[0] != 204:
            time.sleep(0.5)

    def fault(self, partitions, done):
        """One fault on a random node, counted in `done`: cut off for 3-6 s (half the time, when
        `partitions`) or killed with kill -9 and restarted 1-4 s later; then 1-2 s of calm."""
        n = random.choice(NODES)
        if partitions and random.random() < 0.5:
            cut = Partition(n)
            time.sleep(random.uniform(3, 6))
            cut.heal()
            done["partition"] += 1
        else:
            self.kill9(n)
            time.sleep(random.uniform(1, 4))
            self.start(n)
            done["kill -9"] += 1
        time.sleep(random.uniform(1, 2))

    def under_faults(self, workers, cycles, partitions, progress, tend=lambda: None):
        """Starts `workers` (threads with a `running` flag), makes `cycles` faults (calling `tend`
        before and after each and printing `progress()` after it), then stops the workers; the
        faults made, by kind."""
        done = {"kill -9": 0, "partition": 0}
        for worker in workers:
            worker.start()
        try:
            for cycle in range(cycles):
                tend()
                self.fault(partitions, done)
                tend()
                print(f"cycle {cycle + 1}: {progress()}", flush=True)
        finally:
            for worker in workers:
                worker.running = False
            for worker in workers:
                worker.join(timeout=30)
        return done

    def kill9(self, n):
        self.procs[n].send_signal(signal.SIGKILL)
        self.procs[n].wait()

    def stop(self):
        for proc in self.procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def verdict(self, lost):
        """The end of a message-counting run: prints how many confirmed messages were `lost` (a
        sorted list), stops the nodes, and fails the run, keeping its logs, when any was;
        removes the run's files otherwise."""
        print(f"lost: {len(lost)}")
        self.stop()
        if lost:
            print(f"FAILED: lost {len(lost)}, e.g. {lost[:10]}; logs in {self.base}")
            sys.exit(1)
        shutil.rmtree(self.base, ignore_errors=True)


def ip_rule(*args):
    return subprocess.run(["ip", "rule", *args], capture_output=True).returncode == 0


class Partition:
    """Cuts node n's cluster address off from the others' (both ways) until healed."""

    def __init__(self, n):
        ip_rule("add", "pref", "100", "lookup", "local")
        ip_rule("del", "pref", "0", "lookup", "local")
        self.rules = []
        for m in NODES:
            if m != n:
                self.rules += [(address(n), address(m)), (address(m), address(n))]
        for src, dst in self.rules:
            ip_rule("add", "pref", "10", "from", src, "to", dst, "prohibit")

    def heal(self):
        for src, dst in self.rules:
            ip_rule("del", "pref", "10", "from", src, "to", dst, "prohibit")
        ip_rule("add", "pref", "0", "lookup", "local")
        ip_rule("del", "pref", "100", "lookup", "local")


class Writer(threading.Thread):
    """Declares fault-<k> through a random node, and deletes some acknowledged ones."""

    def __init__(self):
        super().__init__(daemon=True)
        self.created, self.deleted, self.unknown, self.not_reached = set(), set(), 0, 0
        self.running = True

    def run(self):
        k = 0
        while self.running:
            n = random.choice(NODES)
            if self.created - self.deleted and random.random() < 0.2:
                victim = random.choice(sorted(self.created - self.deleted))
                status, _ = call(n, "DELETE", f"/api/exchanges/%2F/{victim}")
                if status == 204:
                    self.deleted.add(victim)
                elif status == -1:
                    self.not_reached += 1
                else:
                    # Maybe deleted: neither kept nor gone is an error.
                    self.unknown += 1
                    self.created.discard(victim)
                continue
            name = f"fault-{k}"
            k += 1
            status, _ = call(n, "PUT", f"/api/exchanges/%2F/{name}", {"type": "direct", "durable": True})
            if status in (201, 204):
                self.created.add(name)
            elif status == -1:
                self.not_reached += 1
            else:
                self.unknown += 1


def exchanges(n):
    status, listed = call(n, "GET", "/api/exchanges/%2F?columns=name", timeout=30)
    return {x["name"] for x in listed if x["name"].startswith("fault-")} if status == 200 else None


def main():
    args, partitions = arguments(__doc__, 30)
    base = tempfile.mkdtemp(prefix="charon-faults-")
    cluster = Cluster(args.binary, base)
    cluster.start_all("faults")
    writer = Writer()
    started = time.time()
    faults = cluster.under_faults([writer], args.cycles, partitions, lambda: (
        f"{len(writer.created)} declares and {len(writer.deleted)} deletes acknowledged, {writer.unknown} unknown"))
    # Every node answers and they agree (a healed or restarted node catches up).
    deadline = time.time() + 60
    while True:
        seen = {n: exchanges(n) for n in NODES}
        if all(s is not None for s in seen.values()) and seen[1] == seen[2] == seen[3]:
            break
        if time.time() > deadline:
            break
        time.sleep(1)
    must = writer.created - writer.deleted
    lost = {n: sorted(must - (seen[n] or set())) for n in NODES}
    resurrected = {n: sorted(writer.deleted & (seen[n] or set())) for n in NODES}
    agree = seen[1] == seen[2] == seen[3]
    print(f"{args.cycles} cycles in {time.time() - started:.0f} s ({faults['kill -9']} kill -9, "
          f"{faults['partition']} partitions): {len(writer.created)} declares and {len(writer.deleted)} deletes "
          f"acknowledged; {writer.unknown} refused or unanswered (500 on the minority side, a kill mid-request), "
          f"{writer.not_reached} sent to a node that was down")
    snapshots = sum(open(os.path.join(base, f"node-{n}.log"), errors="replace").read().count("following a metadata snapshot")
                    for n in NODES)
    print(f"snapshots followed by a node that fell behind: {snapshots}")
    print(f"lost: {sum(len(v) for v in lost.values())}, resurrected: {sum(len(v) for v in resurrected.values())}, "
          f"nodes agree: {agree}")
    cluster.stop()
    failed = any(lost.values()) or any(resurrected.values()) or not agree
    if failed:
        print(f"FAILED: lost {lost}, resurrected {resurrected}; logs in {base}")
        sys.exit(1)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
