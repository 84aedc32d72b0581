"""Records the seed corpus of the fuzz targets from real client traffic.

Usage: record_corpus.py BROKER_PORT  (run from the repository root, with .venv's python)

Listens on a free port, forwards every connection to 127.0.0.1:BROKER_PORT (Charon, or the
reference RabbitMQ) and keeps what each client sent. The interop scripts of tests/python (pika
over 0.9.1; Qpid Proton and rabbitmq-amqp-python-client over 1.0) run through it. Then it writes:

- corpus/amqp091_connection/, corpus/amqp10_connection/: each client's bytes after its 8-byte
  protocol header (what the sans-IO engines are fed);
- corpus/amqp091_properties/: the property list of every 0.9.1 content header;
- corpus/amqp10_message/: the message bytes of every 1.0 transfer;
- corpus/http_json/: the JSON bodies RabbitMQ's management API documents for policies.

Files are named by a hash of their content, so recording again adds only what is new.
"""
import hashlib
import os
import socket
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def save(target, data):
    if not data:
        return
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def pump(src, dst, keep):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if keep is not None:
                keep.append(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def frames_091(stream):
    at = 0
    while at + 7 <= len(stream):
        kind, size = stream[at], int.from_bytes(stream[at + 3:at + 7], "big")
        payload = stream[at + 7:at + 7 + size]
        yield kind, payload
        at += 8 + size


def frames_10(stream):
    at = 0
    while at + 8 <= len(stream):
        if stream[at:at + 4] == b"AMQP":
            at += 8
            continue
        size, doff = int.from_bytes(stream[at:at + 4], "big"), stream[at + 4]
        if size < 8:
            break
        yield stream[at + 4 * doff:at + size]
        at += size


def performative_len(body):
    """Length of a described list performative: 0x00 0x53 CODE then list0/list8/list32."""
    if len(body) < 4 or body[0] != 0x00 or body[1] != 0x53:
        return None
    code = body[3]
    if code == 0x45:
        return 4
    if code == 0xC0:
        return 5 + body[4]
    if code == 0xD0:
        return 8 + int.from_bytes(body[4:8], "big")
    return None


def record(stream):
    header, rest = stream[:8], stream[8:]
    if header == b"AMQP\x00\x00\x09\x01":
        save("amqp091_connection", rest)
        for kind, payload in frames_091(rest):
            if kind == 2 and len(payload) > 12:
                save("amqp091_properties", payload[12:])
    elif header.startswith(b"AMQP"):
        save("amqp10_connection", rest)
        for body in frames_10(rest):
            n = performative_len(body)
            if n is not None and body[2] == 0x14 and len(body) > n:
                save("amqp10_message", body[n:])


def main():
    broker_port = int(sys.argv[1])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    streams = []

    def accept():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", broker_port))
            keep = []
            streams.append(keep)
            threading.Thread(target=pump, args=(client, upstream, keep), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    for script in ["pika_roundtrip.py", "proton_roundtrip.py", "rabbitmq_amqp_client_roundtrip.py"]:
        path = os.path.join(ROOT, "tests", "python", script)
        subprocess.run([sys.executable, path, str(port)], check=True, timeout=120)
    listener.close()
    for keep in streams:
        record(b"".join(keep))
    for body in [
        b'{"pattern":"^dlx\\\\.","definition":{"dead-letter-exchange":"dlx","message-ttl":60000},'
        b'"priority":1,"apply-to":"queues"}',
        b'{"pattern":".*","definition":{"max-length":10,"overflow":"reject-publish-dlx"}}',
        b'{"pattern":"q","definition":{"delivery-limit":3,"dead-letter-strategy":"at-least-once"},'
        b'"apply-to":"quorum_queues"}',
    ]:
        save("http_json", body)


if __name__ == "__main__":
    main()
