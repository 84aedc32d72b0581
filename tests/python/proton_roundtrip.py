"""Interop check with Apache Qpid Proton (python-qpid-proton), an AMQP 1.0 client with its own
C codec. Usage: script.py PORT. Prints 'proton interop ok' and exits 0 only on success.

Steps: declare a queue through RabbitMQ's /management node (HTTP over AMQP on a link pair,
built by hand here), publish 10 messages with properties and application properties to
/queues/<q>, consume them with credit, accept, check every field, then delete the queue.
"""
import sys
import uuid

from proton import Message, symbol
from proton._data import Data
from proton._message import pn_message_body
from proton.reactor import AtMostOnce, LinkOption
from proton.utils import BlockingConnection

COUNT = 10


class Paired(LinkOption):
    """Sets the link property paired=true that the /management node requires."""

    def apply(self, link):
        link.properties = {symbol("paired"): True}


class NullBodyMessage(Message):
    """A message whose body is an amqp-value null.

    Proton leaves the body section out when the body is None, but RabbitMQ 4.0.5's
    /management node needs the section: GET and DELETE requests without one end the session
    with amqp:internal-error (function_clause in rabbit_amqp_management:handle_http_req).
    """

    def _pre_encode(self) -> None:
        super()._pre_encode()
        if self.body is None:
            Data(pn_message_body(self._msg)).put_null()


class Management:
    def __init__(self, conn):
        name = "management-link-pair-" + uuid.uuid4().hex[:6]
        self.sender = conn.create_sender("/management", name=name, options=[Paired(), AtMostOnce()])
        self.receiver = conn.create_receiver("/management", name=name, options=[Paired()], credit=10)
        self.next_id = 0

    def request(self, method, path, body=None):
        self.next_id += 1
        request = NullBodyMessage(id=self.next_id, address=path, subject=method, reply_to="$me", body=body,
                          inferred=False)
        self.sender.send(request)
        # Responses arrive pre-settled: nothing to accept.
        response = self.receiver.receive(timeout=10)
        assert response.correlation_id == self.next_id, response.correlation_id
        assert response.properties == {"http:response": "1.1"}, response.properties
        return response.subject, response.body


def main(port: int) -> None:
    queue = "proton-q-" + uuid.uuid4().hex[:8]
    path = "/queues/" + queue
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", virtual_host="vhost:/",
                              allowed_mechs="PLAIN")
    props = conn.conn.remote_properties or {}
    assert props.get(symbol("product")) == "RabbitMQ", props
    mgmt = Management(conn)
    status, body = mgmt.request("PUT", path, {"durable": False, "exclusive": False,
                                              "auto_delete": False, "arguments": {}})
    assert status == "201", (status, body)
    assert body["name"] == queue and body["message_count"] == 0, body

    sender = conn.create_sender(path)
    for i in range(COUNT):
        sender.send(Message(body=f"m{i}".encode(), id=f"id-{i}", subject="interop",
                            content_type="text/plain", durable=False,
                            properties={"i": i, "s": "text", "b": True}))
    receiver = conn.create_receiver(path, credit=COUNT)
    for i in range(COUNT):
        m = receiver.receive(timeout=10)
        assert m.body == f"m{i}".encode(), m.body
        assert m.id == f"id-{i}", m.id
        assert m.subject == "interop", m.subject
        assert m.content_type == "text/plain", m.content_type
        assert m.properties == {"i": i, "s": "text", "b": True}, m.properties
        assert m.delivery_count == 0 and m.first_acquirer, (m.delivery_count, m.first_acquirer)
        receiver.accept()
    receiver.close()
    sender.close()

    status, body = mgmt.request("GET", path)
    assert status == "200" and body["message_count"] == 0, (status, body)
    status, body = mgmt.request("DELETE", path)
    assert status == "200", (status, body)
    status, body = mgmt.request("GET", path)
    assert status == "404", (status, body)
    conn.close()
    print("proton interop ok")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5672)
