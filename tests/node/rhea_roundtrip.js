// rhea (AMQP 1.0) as shipped, against a queue declared over AMQP 0.9.1 with amqplib: a rhea
// sender puts N messages on /queues/<q> (RabbitMQ's v2 address), a rhea receiver with its
// default credit window (1000, which rhea tops up as it goes, its delivery-count starting at
// 0) receives all N in order; then header priorities sent into an x-max-priority queue come
// out highest first.
// Usage: node rhea_roundtrip.js <port>  (guest/guest on 127.0.0.1). Exit status 0 = pass;
// the last line printed is "rhea roundtrip ok".
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib');
const rhea = require('rhea');

const TIMEOUT_MS = 30000;
// More than twice rhea's default credit window, so the receiver's credit is replenished
// several times.
const COUNT = 2500;

const port = Number(process.argv[2]);
if (!Number.isInteger(port)) {
  console.error('usage: node rhea_roundtrip.js <port>');
  process.exit(2);
}
setTimeout(() => {
  console.error(`rhea roundtrip timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS).unref();

/** Resolves with the first `event` of `emitter`; rejects on its errors and link/connection closes. */
function once(emitter, event) {
  return new Promise((resolve, reject) => {
    const fail = (context) => {
      const error = context && (context.error || (context.receiver && context.receiver.error)
        || (context.sender && context.sender.error) || (context.connection && context.connection.error));
      reject(new Error(`${event} not reached: ${JSON.stringify(error || context && context.error)}`));
    };
    emitter.once(event, resolve);
    for (const bad of ['error', 'connection_error', 'sender_error', 'receiver_error', 'disconnected']) {
      if (bad !== event) emitter.once(bad, fail);
    }
  });
}

async function openConnection() {
  const container = rhea.create_container({ id: 'charon-rhea-interop' });
  const connection = container.connect({
    host: '127.0.0.1', port, username: 'guest', password: 'guest', hostname: 'vhost:/', reconnect: false,
  });
  await once(connection, 'connection_open');
  return connection;
}

/** Sends `messages` on a sender to `address`; resolves once every one is accepted. */
async function sendAll(connection, address, messages) {
  const sender = connection.open_sender({ target: { address } });
  await once(sender, 'sendable');
  let accepted = 0;
  const done = new Promise((resolve, reject) => {
    sender.on('accepted', () => {
      accepted += 1;
      if (accepted === messages.length) resolve();
    });
    for (const bad of ['rejected', 'released', 'modified']) {
      sender.on(bad, (context) => reject(new Error(`a message was ${bad}: ${JSON.stringify(context.delivery.remote_state)}`)));
    }
    sender.on('sender_error', (context) => reject(new Error(`sender error: ${JSON.stringify(context.sender.error)}`)));
  });
  let next = 0;
  const pump = () => {
    while (next < messages.length && sender.sendable()) sender.send(messages[next++]);
  };
  sender.on('sendable', pump);
  pump();
  await done;
  sender.close();
  await once(sender, 'sender_close');
}

/** Receives `count` messages on a receiver from `address` with rhea's defaults (credit window,
 * auto-accept), then detaches it. */
async function receive(connection, address, count) {
  const receiver = connection.open_receiver({ source: { address } });
  const bodies = [];
  await new Promise((resolve, reject) => {
    receiver.on('message', (context) => {
      bodies.push(context.message);
      if (bodies.length === count) resolve();
    });
    receiver.on('receiver_error', (context) => reject(new Error(`receiver error: ${JSON.stringify(context.receiver.error)}`)));
  });
  receiver.close();
  await once(receiver, 'receiver_close');
  return bodies;
}

async function roundtrip(channel, connection) {
  const queue = 'rhea-roundtrip';
  await channel.deleteQueue(queue);
  await channel.assertQueue(queue, { durable: true });
  const address = `/queues/${queue}`;
  const messages = [];
  for (let i = 0; i < COUNT; i++) messages.push({ message_id: i, body: `m${i}` });
  await sendAll(connection, address, messages);
  assert.equal((await channel.checkQueue(queue)).messageCount, COUNT);

  const received = await receive(connection, address, COUNT);
  assert.deepEqual(received.map((m) => m.body), messages.map((m) => m.body));
  // Everything was accepted: nothing returns to the queue when the receiver detaches.
  assert.equal((await channel.checkQueue(queue)).messageCount, 0);
  await channel.deleteQueue(queue);
}

async function priorities(channel, connection) {
  const queue = 'rhea-priorities';
  await channel.deleteQueue(queue);
  await channel.assertQueue(queue, { maxPriority: 10 });
  const address = `/queues/${queue}`;
  const sent = [['low', 1], ['none', undefined], ['mid', 5], ['high', 9], ['low-2', 1]];
  await sendAll(connection, address, sent.map(([body, priority]) => (
    priority === undefined ? { body } : { body, priority })));
  const received = await receive(connection, address, sent.length);
  // A message without a header priority counts as 0 in a RabbitMQ 4.0.5 priority queue (not
  // as 4, AMQP 1.0's default for the header field).
  assert.deepEqual(received.map((m) => m.body), ['high', 'mid', 'low', 'low-2', 'none']);
  await channel.deleteQueue(queue);
}

async function main() {
  const amqpConnection = await amqp.connect(`amqp://guest:guest@127.0.0.1:${port}/`);
  const channel = await amqpConnection.createChannel();
  const connection = await openConnection();
  await roundtrip(channel, connection);
  await priorities(channel, connection);
  connection.close();
  await once(connection, 'connection_close');
  await amqpConnection.close();
  console.log('rhea roundtrip ok');
  process.exit(0);
}

main().catch((error) => {
  console.error('rhea roundtrip failed:', error);
  process.exit(1);
});
