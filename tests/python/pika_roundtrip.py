"""Interop check with a non-Rust 0.9.1 client: pika publishes with properties and headers,
consumes them back through the broker, and checks every field. Exit status 0 = pass."""
import sys

import pika


def main(port: int) -> None:
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                       credentials=pika.PlainCredentials("guest", "guest"))
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.confirm_delivery()
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    assert queue.startswith("amq.gen-"), queue
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=2, priority=4,
                                 correlation_id="c-1", reply_to="r", expiration="60000",
                                 message_id="m-1", timestamp=1700000000, type="t",
                                 user_id="guest", app_id="pika-test",
                                 headers={"b": True, "i": 42, "s": "text", "nested": {"x": 1},
                                          "list": [1, "two"]})
    for i in range(10):
        channel.basic_publish(exchange="", routing_key=queue, body=f"m{i}".encode(),
                              properties=props, mandatory=True)
    received = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=5):
        assert method is not None, "timed out waiting for a delivery"
        received.append(body.decode())
        assert properties.content_type == "text/plain"
        assert properties.delivery_mode == 2
        assert properties.priority == 4
        assert properties.correlation_id == "c-1"
        assert properties.expiration == "60000"
        assert properties.timestamp == 1700000000
        assert properties.user_id == "guest"
        assert properties.headers == {"b": True, "i": 42, "s": "text", "nested": {"x": 1},
                                      "list": [1, "two"]}, properties.headers
        channel.basic_ack(method.delivery_tag)
        if len(received) == 10:
            break
    assert received == [f"m{i}" for i in range(10)], received
    channel.cancel()
    # A channel error closes only the channel; the connection keeps working.
    try:
        channel.queue_declare(queue="no-such-queue", passive=True)
        raise AssertionError("passive declare of a missing queue must fail")
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        assert e.reply_text == "NOT_FOUND - no queue 'no-such-queue' in vhost '/'", e.reply_text
    second = connection.channel()
    second.queue_declare(queue="", exclusive=True)
    connection.close()
    print("pika interop ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
