// amqplib (AMQP 0.9.1) against the features applications rely on: RPC over direct reply-to, a
// priority work queue (x-max-priority), single-active-consumer failover
// (x-single-active-consumer) and consumer priorities (x-priority).
// Usage: node amqplib_features.js <port>  (guest/guest on 127.0.0.1). Exit status 0 = pass;
// the last line printed is "amqplib features ok".
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib');

const REPLY_TO = 'amq.rabbitmq.reply-to';
const TIMEOUT_MS = 30000;

const port = Number(process.argv[2]);
if (!Number.isInteger(port)) {
  console.error('usage: node amqplib_features.js <port>');
  process.exit(2);
}
setTimeout(() => {
  console.error(`amqplib features timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS).unref();

const connect = () => amqp.connect(`amqp://guest:guest@127.0.0.1:${port}/`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Deliveries of one consumer, awaited one at a time. */
class Inbox {
  constructor() {
    this.messages = [];
    this.waiters = [];
  }

  /** The consume callback. */
  get push() {
    return (message) => {
      const waiter = this.waiters.shift();
      if (waiter) waiter(message);
      else this.messages.push(message);
    };
  }

  get size() {
    return this.messages.length;
  }

  /** The next delivery; fails naming `what` when none comes within 5 s. */
  next(what) {
    if (this.messages.length > 0) return Promise.resolve(this.messages.shift());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within 5 s`)), 5000);
      this.waiters.push((message) => {
        clearTimeout(timer);
        resolve(message);
      });
    });
  }
}

/** A server answers requests on a queue; the client gets the answers on
 * amq.rabbitmq.reply-to (never declared) and matches them by correlation id. */
async function rpcOverDirectReplyTo() {
  const serverConn = await connect();
  assert.equal(serverConn.connection.serverProperties.capabilities.direct_reply_to, true);
  const server = await serverConn.createChannel();
  const { queue: requests } = await server.assertQueue('', { exclusive: true });
  await server.consume(requests, (message) => {
    assert.ok(message.properties.replyTo.startsWith(`${REPLY_TO}.`), message.properties.replyTo);
    const answer = String(Number(message.content.toString()) * 2);
    server.sendToQueue(message.properties.replyTo, Buffer.from(answer), {
      correlationId: message.properties.correlationId,
    });
    server.ack(message);
  });

  const clientConn = await connect();
  const client = await clientConn.createChannel();
  const replies = new Inbox();
  await client.consume(REPLY_TO, replies.push, { noAck: true });
  for (let i = 0; i < 10; i++) {
    client.sendToQueue(requests, Buffer.from(String(i)), { replyTo: REPLY_TO, correlationId: `c${i}` });
  }
  const got = {};
  for (let i = 0; i < 10; i++) {
    const reply = await replies.next('RPC reply');
    assert.equal(reply.fields.exchange, '');
    assert.ok(reply.fields.routingKey.startsWith(`${REPLY_TO}.`), reply.fields.routingKey);
    got[reply.properties.correlationId] = reply.content.toString();
  }
  const expected = {};
  for (let i = 0; i < 10; i++) expected[`c${i}`] = String(i * 2);
  assert.deepEqual(got, expected);
  await clientConn.close();
  await serverConn.close();
}

/** Low priorities published first, high ones after: a prefetch-1 worker gets them highest
 * first, first-in first-out within a priority. */
async function priorityWorkQueue() {
  const conn = await connect();
  const publisher = await conn.createConfirmChannel();
  const { queue } = await publisher.assertQueue('', { exclusive: true, maxPriority: 10 });
  const sent = [['low-a', 1], ['low-b', 1], ['none', undefined], ['mid', 5], ['high-a', 9], ['high-b', 9], ['top', 10]];
  for (const [body, priority] of sent) {
    publisher.sendToQueue(queue, Buffer.from(body), priority === undefined ? {} : { priority });
  }
  await publisher.waitForConfirms();
  const worker = await conn.createChannel();
  await worker.prefetch(1);
  const inbox = new Inbox();
  await worker.consume(queue, inbox.push);
  const order = [];
  for (let i = 0; i < sent.length; i++) {
    const message = await inbox.next('prioritised message');
    order.push(message.content.toString());
    worker.ack(message);
  }
  assert.deepEqual(order, ['top', 'high-a', 'high-b', 'mid', 'low-a', 'low-b', 'none']);
  await conn.close();
}

/** Two consumers on a single-active-consumer queue: only the first receives; when its channel
 * closes the second takes over and gets everything, the first's unacked deliveries
 * redelivered ahead of the rest. */
async function singleActiveConsumerFailover() {
  const conn = await connect();
  const setup = await conn.createConfirmChannel();
  const queue = 'amqplib-sac';
  await setup.deleteQueue(queue);
  await setup.assertQueue(queue, { arguments: { 'x-single-active-consumer': true } });

  const first = await conn.createChannel();
  await first.prefetch(2);
  const firstInbox = new Inbox();
  await first.consume(queue, firstInbox.push);
  const second = await conn.createChannel();
  const secondInbox = new Inbox();
  const { consumerTag } = await second.consume(queue, secondInbox.push);

  for (let i = 0; i < 5; i++) setup.sendToQueue(queue, Buffer.from(`m${i}`));
  await setup.waitForConfirms();
  const firstGot = [];
  for (let i = 0; i < 2; i++) firstGot.push((await firstInbox.next('delivery to the active consumer')).content.toString());
  assert.deepEqual(firstGot, ['m0', 'm1']);
  await sleep(500);
  assert.equal(firstInbox.size, 0, 'the active consumer exceeded its prefetch');
  assert.equal(secondInbox.size, 0, 'the waiting consumer received while the first was active');

  await first.close();
  const secondGot = [];
  for (let i = 0; i < 5; i++) {
    const message = await secondInbox.next('delivery after failover');
    secondGot.push([message.content.toString(), message.fields.redelivered]);
    second.ack(message);
  }
  assert.deepEqual(secondGot, [['m0', true], ['m1', true], ['m2', false], ['m3', false], ['m4', false]]);
  await second.cancel(consumerTag);
  await setup.deleteQueue(queue);
  await conn.close();
}

/** The higher-priority consumer gets the messages while it has prefetch room; only then does
 * the lower one receive. Once the high one acks, it is served first again. */
async function consumerPriorities() {
  const conn = await connect();
  const setup = await conn.createConfirmChannel();
  const { queue } = await setup.assertQueue('', { exclusive: true });

  const low = await conn.createChannel();
  await low.prefetch(10);
  const lowInbox = new Inbox();
  await low.consume(queue, lowInbox.push, { priority: 1 });
  const high = await conn.createChannel();
  await high.prefetch(2);
  const highInbox = new Inbox();
  await high.consume(queue, highInbox.push, { priority: 10 });

  for (let i = 0; i < 6; i++) setup.sendToQueue(queue, Buffer.from(`m${i}`));
  await setup.waitForConfirms();
  const highGot = [];
  for (let i = 0; i < 2; i++) highGot.push(await highInbox.next('delivery to the high-priority consumer'));
  const lowGot = [];
  for (let i = 0; i < 4; i++) lowGot.push(await lowInbox.next('delivery to the low-priority consumer'));
  assert.deepEqual(highGot.map((m) => m.content.toString()), ['m0', 'm1']);
  assert.deepEqual(lowGot.map((m) => m.content.toString()), ['m2', 'm3', 'm4', 'm5']);
  for (const message of lowGot) low.ack(message);

  // The acks reach the queue before the passive declare that follows them on the same channel.
  high.ackAll();
  await high.checkQueue(queue);
  for (let i = 6; i < 8; i++) setup.sendToQueue(queue, Buffer.from(`m${i}`));
  await setup.waitForConfirms();
  const again = [];
  for (let i = 0; i < 2; i++) again.push((await highInbox.next('delivery after the high consumer acked')).content.toString());
  assert.deepEqual(again, ['m6', 'm7']);
  await sleep(200);
  assert.equal(lowInbox.size, 0, 'the low-priority consumer received while the high one had room');
  await conn.close();
}

async function main() {
  await rpcOverDirectReplyTo();
  await priorityWorkQueue();
  await singleActiveConsumerFailover();
  await consumerPriorities();
  console.log('amqplib features ok');
  process.exit(0);
}

main().catch((error) => {
  console.error('amqplib features failed:', error);
  process.exit(1);
});
