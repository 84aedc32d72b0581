"""python-zaqarclient (4.7, as shipped) with its Keystone backend against Charon's Zaqar gateway
in token mode (`--zaqar-auth tokens`): keystoneauth asks the gateway's own `/v3/auth/tokens`
for a token with a broker user's password, and the client sends it on every request.

Usage: zaqar_tokens.py ZAQAR_PORT. Prints "zaqar tokens ok" at the end.
"""
import sys

from zaqarclient.queues import client
from zaqarclient.transport import errors

ZAQAR = int(sys.argv[1])
URL = "http://127.0.0.1:%d" % ZAQAR


def keystone(user, password, project="/"):
    options = {"os_username": user, "os_password": password, "os_project_id": project,
               "os_auth_url": URL + "/v3", "os_user_domain_id": "default",
               "os_project_domain_id": "default"}
    return client.Client(URL, version=2, conf={"auth_opts": {"backend": "keystone", "options": options}})


def check(cond, what):
    if not cond:
        raise SystemExit("FAILED: %s" % what)


queue = keystone("guest", "guest").queue("with-tokens")
queue.post([{"body": {"n": 1}, "ttl": 300}])
claimed = list(queue.claim(ttl=60, grace=60, limit=10))
check([m.body for m in claimed] == [{"n": 1}], "the message posted with a token is claimed: %r" % claimed)
claimed[0].delete()
check(queue.stats["messages"]["total"] == 0, "deleted with its claim")

try:
    keystone("guest", "wrong").queue("with-tokens").post([{"body": 2}])
    raise SystemExit("FAILED: a wrong password was accepted")
except Exception as refused:  # keystoneauth's Unauthorized: the token request failed
    check("401" in str(refused) or "Unauthorized" in type(refused).__name__, "refused with 401: %r" % refused)

# A raw request without a token gets keystonemiddleware's 401 through the client's error type.
try:
    client.Client(URL, version=2, conf={"auth_opts": {"backend": "noauth", "options": {"os_project_id": "/"}}}) \
        .queue("with-tokens").post([{"body": 3}])
    raise SystemExit("FAILED: a request without a token was accepted")
except errors.UnauthorizedError:
    pass

print("zaqar tokens ok")
