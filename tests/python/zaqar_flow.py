"""python-zaqarclient (4.7, as shipped) against Charon's Zaqar gateway, and pika on the same
queues: the claim-count dead-letter queue end to end.

Usage: zaqar_flow.py ZAQAR_PORT AMQP_PORT HTTP_PORT. Prints "zaqar flow ok" at the end.
"""
import base64
import json
import sys
import time
import urllib.request

import pika
from zaqarclient.queues import client

ZAQAR, AMQP, HTTP = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
PROJECT = "proj-1"

cli = client.Client(
    "http://127.0.0.1:%d" % ZAQAR,
    version=2,
    conf={"auth_opts": {"backend": "noauth", "options": {"os_project_id": PROJECT}}},
)


def grant_guest():
    """The project's vhost was created by the gateway: let guest use it over AMQP."""
    request = urllib.request.Request(
        "http://127.0.0.1:%d/api/permissions/%s/guest" % (HTTP, PROJECT),
        data=json.dumps({"configure": ".*", "write": ".*", "read": ".*"}).encode(),
        method="PUT",
        headers={"content-type": "application/json",
                 "authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    urllib.request.urlopen(request).read()


def check(cond, what):
    if not cond:
        raise SystemExit("FAILED: %s" % what)


# 1. A queue with the DLQ metadata set as the client sets it (GET, then a JSON-patch that
#    removes every reserved key it does not keep).
q = cli.queue("orders", force_create=True)
q.metadata(new_meta={"_max_claim_count": 2, "_dead_letter_queue": "orders_dlq",
                     "_dead_letter_queue_messages_ttl": 3600})
meta = q.metadata(force_reload=True)
check(meta["_max_claim_count"] == 2 and meta["_dead_letter_queue"] == "orders_dlq", "metadata %r" % meta)
check(meta["_dead_letter_queue_messages_ttl"] == 3600, "dlq ttl %r" % meta)

# 2. Post, then claim it beyond the max count: claimed twice, moved by the third claim.
q.post([{"ttl": 300, "body": {"id": 1}}])
for expected in (1, 2):
    claim = q.claim(ttl=60, grace=60, limit=5)
    msgs = list(claim)
    check(len(msgs) == 1 and msgs[0].body == {"id": 1}, "claim %d: %r" % (expected, msgs))
    check(msgs[0].claim_count == expected, "claim count %r" % msgs[0].claim_count)
    check(claim.id and msgs[0].claim_id == claim.id, "claim id from href")
    claim.delete()  # release
third = list(q.claim(ttl=60, grace=60, limit=5))
check(third == [], "third claim moved it: %r" % third)
check(q.stats["messages"]["total"] == 0, "source empty %r" % q.stats)

dlq = cli.queue("orders_dlq")
dead = list(dlq.messages(echo=True))
check(len(dead) == 1 and dead[0].body == {"id": 1} and dead[0].ttl == 3600, "in the DLQ: %r" % dead)

# 3. Over AMQP 0.9.1, with its death record.
grant_guest()
amqp = pika.BlockingConnection(
    pika.ConnectionParameters("127.0.0.1", AMQP, PROJECT, pika.PlainCredentials("guest", "guest"))
)
ch = amqp.channel()
method, props, body = ch.basic_get("orders_dlq", auto_ack=False)
check(method is not None, "AMQP get from the DLQ")
check(json.loads(body) == {"id": 1}, "AMQP body %r" % body)
check(props.content_type == "application/json", "content type %r" % props.content_type)
death = props.headers["x-death"][0]
check(death["queue"] == "orders" and death["reason"] == "delivery_limit", "x-death %r" % death)
check(death["count"] == 1, "x-death count %r" % death)
check(props.headers.get("x-first-death-reason") == "delivery_limit", "x-first-death %r" % props.headers)
check(props.expiration == "3600000", "expiration %r" % props.expiration)
ch.basic_nack(method.delivery_tag, requeue=True)

# 4. Delete with claim ids; renew and release claims.
q.post([{"body": n} for n in range(3)])
claim = q.claim(ttl=60, grace=60, limit=2)
msgs = list(claim)
check(len(msgs) == 2, "claimed two")
claim.update(ttl=120, grace=60)
check(claim.ttl == 120, "renewed")
for m in msgs:
    m.delete()  # DELETE .../messages/{id}?claim_id={cid}
stats = q.stats["messages"]
check({k: stats[k] for k in ("free", "claimed", "total")} == {"free": 1, "claimed": 0, "total": 1},
      "after deletes %r" % stats)
# The oldest and newest message, as Zaqar shows them when the queue holds messages.
check(stats["oldest"] == stats["newest"] and set(stats["oldest"]) == {"age", "created", "href"},
      "oldest/newest %r" % stats)
check(stats["oldest"]["href"].startswith("/v2/queues/orders/messages/"), "stat href %r" % stats)
check(len(stats["oldest"]["created"]) == 20 and stats["oldest"]["created"].endswith("Z"), "created %r" % stats)
claim = q.claim(ttl=60, grace=60, limit=5)
check(len(list(claim)) == 1, "claimed the last one")
claim.delete()
check(q.stats["messages"]["free"] == 1, "released")
q.pop(1)

# 5. Paging with markers: a streaming iterator follows the `next` links.
q.post([{"body": n} for n in range(7)])
seen = [m.body for m in q.messages(echo=True, limit=2).stream()]
check(seen == list(range(7)), "paged %r" % seen)
ids = [m.id for m in q.messages(echo=True, limit=3).stream()]
check(len(ids) == 7 and len(set(ids)) == 7, "ids %r" % ids)
q.delete_messages(*ids[:3])
check(q.stats["messages"]["total"] == 4, "deleted by ids")
check(q.message(ids[3]).body == 3, "message by id")

# 6. Delays: honoured on a queue with `_default_message_delay` (Zaqar drops a message's
#    `delay` elsewhere). Not claimable, listed or popped before it is due; then claimed.
slow = cli.queue("slow", force_create=True)
slow.metadata(new_meta={"_default_message_delay": 1})
posted_at = time.time()
slow.post({"body": {"late": True}, "ttl": 300, "delay": 2})
check(list(slow.claim(ttl=60, grace=60, limit=5)) == [], "claimed before its delay")
check(list(slow.messages(echo=True)) == [], "listed before its delay")
delayed = list(slow.messages(echo=True, include_delayed=True))
check(len(delayed) == 1 and delayed[0].body == {"late": True}, "include_delayed %r" % delayed)
stats = slow.stats["messages"]
check(stats["free"] == 1 and stats["total"] == 1 and "oldest" not in stats, "delayed stats %r" % stats)
time.sleep(max(0.0, posted_at + 2.3 - time.time()))
due = list(slow.claim(ttl=60, grace=60, limit=5))
check(len(due) == 1 and due[0].body == {"late": True}, "claimed once due %r" % due)
due[0].delete()
check(slow.stats["messages"]["total"] == 0, "deleted with its claim")
# Over AMQP too: a delayed message is not delivered before it is due.
slow.post({"body": "amqp", "delay": 2})
check(ch.basic_get("slow", auto_ack=True)[0] is None, "AMQP get before the delay")
time.sleep(2.3)
method, props, body = ch.basic_get("slow", auto_ack=True)
check(method is not None and json.loads(body) == "amqp", "AMQP get once due %r" % body)

amqp.close()
print("zaqar flow ok")
