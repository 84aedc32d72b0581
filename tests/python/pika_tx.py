"""Transactions through pika: 3 publishes committed and 2 rolled back deliver exactly the 3;
acks inside a transaction that is rolled back leave the deliveries unacked (a recover
redelivers them), and committed acks settle. Exit status 0 = pass."""
import sys

import pika


def main(port: int) -> None:
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                       credentials=pika.PlainCredentials("guest", "guest"))
    connection = pika.BlockingConnection(params)
    publisher = connection.channel()
    queue = publisher.queue_declare(queue="", exclusive=True).method.queue
    publisher.tx_select()
    for i in range(3):
        publisher.basic_publish(exchange="", routing_key=queue, body=f"c{i}".encode())
    publisher.tx_commit()
    for i in range(2):
        publisher.basic_publish(exchange="", routing_key=queue, body=f"r{i}".encode())
    publisher.tx_rollback()

    consumer = connection.channel()
    consumer.tx_select()
    received = []
    for method, _properties, body in consumer.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        received.append((body.decode(), method.delivery_tag, method.redelivered))
    assert received == [("c0", 1, False), ("c1", 2, False), ("c2", 3, False)], received

    # Acked in the transaction, then rolled back: still unacked, so a recover redelivers.
    consumer.basic_ack(delivery_tag=3, multiple=True)
    consumer.tx_rollback()
    consumer.basic_recover(requeue=True)
    again = []
    for method, _properties, body in consumer.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        again.append((body.decode(), method.delivery_tag, method.redelivered))
    assert again == [("c0", 4, True), ("c1", 5, True), ("c2", 6, True)], again

    # Committed acks settle: nothing is left for a fresh channel.
    consumer.basic_ack(delivery_tag=6, multiple=True)
    consumer.tx_commit()
    consumer.cancel()
    checker = connection.channel()
    assert checker.queue_declare(queue=queue, passive=True).method.message_count == 0
    assert checker.basic_get(queue, auto_ack=True) == (None, None, None)

    # Without tx.select, commit is refused with RabbitMQ's text.
    try:
        checker.tx_commit()
        raise AssertionError("tx.commit without tx.select must fail")
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 406, e
        assert e.reply_text == "PRECONDITION_FAILED - channel is not transactional", e.reply_text
    connection.close()
    print("pika tx ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
