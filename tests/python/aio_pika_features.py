"""aio-pika (asyncio, on aiormq) against the features applications rely on: RPC over direct
reply-to, a priority work queue (x-max-priority), single-active-consumer failover
(x-single-active-consumer) and transactions. Takes the AMQP port; guest/guest on 127.0.0.1.
Exit status 0 = pass; the whole run is bounded by a hard timeout."""
import asyncio
import sys

import aio_pika

REPLY_TO = "amq.rabbitmq.reply-to"
TIMEOUT = 30.0


async def connect(port: int) -> aio_pika.abc.AbstractConnection:
    return await aio_pika.connect(host="127.0.0.1", port=port, login="guest", password="guest",
                                  virtualhost="/")


async def next_message(messages: asyncio.Queue, what: str) -> aio_pika.abc.AbstractIncomingMessage:
    try:
        return await asyncio.wait_for(messages.get(), 5)
    except asyncio.TimeoutError:
        raise AssertionError(f"no {what} within 5 s") from None


async def rpc_over_direct_reply_to(port: int) -> None:
    """A server answers requests on a queue; the client receives the answers on
    amq.rabbitmq.reply-to (never declared) and matches them by correlation id."""
    server_conn = await connect(port)
    server = await server_conn.channel()
    requests = await server.declare_queue("", exclusive=True)

    async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            assert message.reply_to.startswith(REPLY_TO + "."), message.reply_to
            answer = str(int(message.body) * 2).encode()
            await server.default_exchange.publish(
                aio_pika.Message(answer, correlation_id=message.correlation_id),
                routing_key=message.reply_to)

    await requests.consume(serve)

    client_conn = await connect(port)
    client = await client_conn.channel()
    replies: asyncio.Queue = asyncio.Queue()
    # The pseudo-queue is consumed without a declare, as RabbitMQ's documentation describes.
    reply_queue = await client.get_queue(REPLY_TO, ensure=False)
    await reply_queue.consume(replies.put, no_ack=True)
    for i in range(10):
        await client.default_exchange.publish(
            aio_pika.Message(str(i).encode(), reply_to=REPLY_TO, correlation_id=f"c{i}"),
            routing_key=requests.name)
    got = {}
    for _ in range(10):
        reply = await next_message(replies, "RPC reply")
        assert reply.routing_key.startswith(REPLY_TO + "."), reply.routing_key
        got[reply.correlation_id] = reply.body.decode()
    assert got == {f"c{i}": str(i * 2) for i in range(10)}, got
    await client_conn.close()
    await server_conn.close()


async def priority_work_queue(port: int) -> None:
    """Low priorities published first, high ones after: a prefetch-1 worker gets them highest
    first, first-in first-out within a priority."""
    conn = await connect(port)
    channel = await conn.channel()
    queue = await channel.declare_queue("", exclusive=True, arguments={"x-max-priority": 10})
    sent = [("low-a", 1), ("low-b", 1), ("none", None), ("mid", 5), ("high-a", 9), ("high-b", 9),
            ("over-max", 200)]
    for body, priority in sent:
        await channel.default_exchange.publish(aio_pika.Message(body.encode(), priority=priority),
                                               routing_key=queue.name)
    await channel.set_qos(prefetch_count=1)
    messages: asyncio.Queue = asyncio.Queue()
    await queue.consume(messages.put)
    order = []
    for _ in sent:
        message = await next_message(messages, "prioritised message")
        order.append(message.body.decode())
        await message.ack()
    # A priority above x-max-priority (10) counts as 10, ahead of the 9s; none counts as 0.
    assert order == ["over-max", "high-a", "high-b", "mid", "low-a", "low-b", "none"], order
    await conn.close()


async def single_active_consumer_failover(port: int) -> None:
    """Two consumers on a single-active-consumer queue: only the first receives. When its
    channel closes, the second takes over and gets everything, the unacked deliveries of the
    first redelivered ahead of the rest."""
    conn = await connect(port)
    setup = await conn.channel()
    queue_name = "aio-pika-sac"
    await setup.queue_delete(queue_name)
    await setup.declare_queue(queue_name, arguments={"x-single-active-consumer": True})

    first_channel = await conn.channel()
    await first_channel.set_qos(prefetch_count=2)
    first_messages: asyncio.Queue = asyncio.Queue()
    await (await first_channel.get_queue(queue_name)).consume(first_messages.put)
    second_channel = await conn.channel()
    second_messages: asyncio.Queue = asyncio.Queue()
    second_queue = await second_channel.get_queue(queue_name)
    second_tag = await second_queue.consume(second_messages.put)

    for i in range(5):
        await setup.default_exchange.publish(aio_pika.Message(f"m{i}".encode()), routing_key=queue_name)
    first = [(await next_message(first_messages, "delivery to the active consumer")).body.decode()
             for _ in range(2)]
    assert first == ["m0", "m1"], first
    await asyncio.sleep(0.5)
    assert first_messages.empty(), "the active consumer exceeded its prefetch"
    assert second_messages.empty(), "the waiting consumer received while the first was active"

    await first_channel.close()
    second = []
    for _ in range(5):
        message = await next_message(second_messages, "delivery after failover")
        second.append((message.body.decode(), message.redelivered))
        await message.ack()
    assert second == [("m0", True), ("m1", True), ("m2", False), ("m3", False), ("m4", False)], second
    await second_queue.cancel(second_tag)
    await setup.queue_delete(queue_name)
    await conn.close()


async def transactions(port: int) -> None:
    """Publishes inside a committed transaction are delivered; rolled-back ones are not."""
    conn = await connect(port)
    channel = await conn.channel(publisher_confirms=False)
    queue = await channel.declare_queue("", exclusive=True)
    tx = channel.transaction()
    await tx.select()
    for i in range(3):
        await channel.default_exchange.publish(aio_pika.Message(f"c{i}".encode()), routing_key=queue.name)
    await tx.commit()
    for i in range(2):
        await channel.default_exchange.publish(aio_pika.Message(f"r{i}".encode()), routing_key=queue.name)
    await tx.rollback()
    # The context manager commits on a clean exit.
    async with channel.transaction():
        await channel.default_exchange.publish(aio_pika.Message(b"c3"), routing_key=queue.name)

    checker = await conn.channel()
    declared = await checker.declare_queue(queue.name, passive=True)
    assert declared.declaration_result.message_count == 4, declared.declaration_result
    bodies = []
    while (message := await declared.get(no_ack=True, fail=False)) is not None:
        bodies.append(message.body.decode())
    assert bodies == ["c0", "c1", "c2", "c3"], bodies
    await conn.close()


async def main(port: int) -> None:
    await rpc_over_direct_reply_to(port)
    await priority_work_queue(port)
    await single_active_consumer_failover(port)
    await transactions(port)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(int(sys.argv[1])), TIMEOUT))
    except asyncio.TimeoutError:
        sys.exit(f"aio-pika features timed out after {TIMEOUT} s")
    print("aio-pika features ok")
