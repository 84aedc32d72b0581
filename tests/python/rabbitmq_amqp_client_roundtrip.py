"""Interop check with RabbitMQ's official AMQP 1.0 client (rabbitmq-amqp-python-client).

Declares an exchange, a queue and a binding through the client's management API (HTTP over
AMQP on the /management link pair), publishes through the exchange address, consumes and
accepts, checks the queue is empty, then deletes everything. Usage: script.py PORT.
Prints 'rabbitmq-amqp-python-client interop ok' and exits 0 only on success.

The client refuses to connect unless the broker's open frame carries the properties
product = "RabbitMQ" and a version that packaging.version parses as >= 4.0.0.
"""
import sys
import uuid

from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    ClassicQueueSpecification,
    Converter,
    Environment,
    Event,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    Message,
    OutcomeState,
)

COUNT = 10


class Done(Exception):
    """Raised from the handler to leave the consumer's event loop."""


class Collect(AMQPMessagingHandler):
    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[str] = []

    def on_amqp_message(self, event: Event) -> None:
        self.bodies.append(Converter.bytes_to_string(event.message.body))
        self.delivery_context.accept(event)
        if len(self.bodies) == COUNT:
            raise Done()


def main(port: int) -> None:
    suffix = uuid.uuid4().hex[:8]
    exchange, queue, key = f"py-x-{suffix}", f"py-q-{suffix}", "py.key"
    environment = Environment(uri=f"amqp://guest:guest@127.0.0.1:{port}/")
    connection = environment.connection()
    connection.dial()
    management = connection.management()
    management.declare_exchange(ExchangeSpecification(name=exchange))
    management.declare_queue(ClassicQueueSpecification(name=queue, is_durable=False))
    management.bind(ExchangeToQueueBindingSpecification(
        source_exchange=exchange, destination_queue=queue, binding_key=key))

    publisher = connection.publisher(AddressHelper.exchange_address(exchange, key))
    for i in range(COUNT):
        status = publisher.publish(Message(body=Converter.string_to_bytes(f"m{i}")))
        assert status.remote_state == OutcomeState.ACCEPTED, status.remote_state
    publisher.close()

    handler = Collect()
    consumer = connection.consumer(AddressHelper.queue_address(queue), message_handler=handler)
    try:
        consumer.run()
    except Done:
        pass
    consumer.close()
    assert handler.bodies == [f"m{i}" for i in range(COUNT)], handler.bodies

    info = management.queue_info(queue)
    assert info.message_count == 0, info.message_count
    assert management.purge_queue(queue) == 0
    management.unbind(AddressHelper.binding_path_with_exchange_queue(
        ExchangeToQueueBindingSpecification(
            source_exchange=exchange, destination_queue=queue, binding_key=key)))
    management.delete_queue(queue)
    management.delete_exchange(exchange)
    management.close()
    connection.close()
    environment.close()
    print("rabbitmq-amqp-python-client interop ok")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5672)
