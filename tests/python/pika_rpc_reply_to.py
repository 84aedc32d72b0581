"""Direct reply-to with pika, as RabbitMQ's RPC tutorial uses it: an RPC server consumes a
request queue on one connection and replies to each request's reply_to; a client on another
connection consumes amq.rabbitmq.reply-to and publishes requests with
reply_to=amq.rabbitmq.reply-to. The replies come back with no reply queue declared.
Exit status 0 = pass."""
import sys

import pika

REPLY_TO = "amq.rabbitmq.reply-to"


def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                     credentials=pika.PlainCredentials("guest", "guest"))


def main(port: int) -> None:
    server_conn = pika.BlockingConnection(params(port))
    assert server_conn._impl.server_properties["capabilities"].get("direct_reply_to") is True
    server = server_conn.channel()
    server.confirm_delivery()
    requests = server.queue_declare(queue="", exclusive=True).method.queue

    def serve(ch, method, props, body):
        assert props.reply_to.startswith(REPLY_TO + "."), props.reply_to
        answer = str(int(body) * 2).encode()
        ch.basic_publish(exchange="", routing_key=props.reply_to, body=answer,
                         properties=pika.BasicProperties(correlation_id=props.correlation_id))
        ch.basic_ack(method.delivery_tag)

    server.basic_consume(queue=requests, on_message_callback=serve)

    client_conn = pika.BlockingConnection(params(port))
    client = client_conn.channel()
    replies = {}

    def on_reply(ch, method, props, body):
        assert method.routing_key.startswith(REPLY_TO + "."), method.routing_key
        assert method.exchange == "", method.exchange
        replies[props.correlation_id] = body.decode()

    client.basic_consume(queue=REPLY_TO, on_message_callback=on_reply, auto_ack=True)
    for i in range(20):
        client.basic_publish(exchange="", routing_key=requests, body=str(i).encode(),
                             properties=pika.BasicProperties(reply_to=REPLY_TO, correlation_id=f"c{i}"))
    for _ in range(200):
        if len(replies) == 20:
            break
        server_conn.process_data_events(time_limit=0.02)
        client_conn.process_data_events(time_limit=0.02)
    assert replies == {f"c{i}": str(i * 2) for i in range(20)}, replies

    # Without a reply consumer on the channel, reply_to=amq.rabbitmq.reply-to is refused.
    other = client_conn.channel()
    other.basic_publish(exchange="", routing_key=requests, body=b"1",
                        properties=pika.BasicProperties(reply_to=REPLY_TO))
    try:
        other.queue_declare(queue="", exclusive=True)
        raise AssertionError("a request without a reply consumer must close the channel")
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 406, e
        assert e.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist", e.reply_text
    client_conn.close()
    server_conn.close()
    print("pika direct reply-to ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
