// rhea (AMQP 1.0) on two paths applications take with RabbitMQ 4:
// - connecting with a user name and no password: rhea then logs in with SASL ANONYMOUS,
//   which RabbitMQ 4 accepts as guest from the machine itself; a message goes to a queue and
//   comes back;
// - a consumer giving up on a poison message with modified{delivery-failed,
//   undeliverable-here, message-annotations}: the quorum queue dead-letters it, and the dead
//   letter carries the consumer's annotations beside its x-opt-deaths.
// Usage: node rhea_client_paths.js <port>  (guest/guest on 127.0.0.1). Exit status 0 = pass;
// the last line printed is "rhea client paths ok".
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib');
const rhea = require('rhea');

const TIMEOUT_MS = 30000;

const port = Number(process.argv[2]);
if (!Number.isInteger(port)) {
  console.error('usage: node rhea_client_paths.js <port>');
  process.exit(2);
}
setTimeout(() => {
  console.error(`rhea client paths timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS).unref();

/** Resolves with the first `event` of `emitter`; rejects on its errors and closes. */
function once(emitter, event) {
  return new Promise((resolve, reject) => {
    const fail = (context) => {
      const error = context && (context.error || (context.receiver && context.receiver.error)
        || (context.sender && context.sender.error) || (context.connection && context.connection.error));
      reject(new Error(`${event} not reached: ${JSON.stringify(error)}`));
    };
    emitter.once(event, resolve);
    for (const bad of ['error', 'connection_error', 'sender_error', 'receiver_error', 'disconnected']) {
      if (bad !== event) emitter.once(bad, fail);
    }
  });
}

async function open(options) {
  const container = rhea.create_container({ id: 'charon-rhea-paths' });
  const connection = container.connect({ host: '127.0.0.1', port, hostname: 'vhost:/', reconnect: false, ...options });
  await once(connection, 'connection_open');
  return connection;
}

/** Sends one message to `address` and waits for it to be accepted. */
async function send(connection, address, message) {
  const sender = connection.open_sender({ target: { address } });
  await once(sender, 'sendable');
  sender.send(message);
  await once(sender, 'accepted');
  sender.close();
}

/** The next message on a receiver from `address` with manual settlement: [message, delivery]. */
async function next(connection, address) {
  const receiver = connection.open_receiver({ source: { address }, autoaccept: false });
  const context = await once(receiver, 'message');
  return [context.message, context.delivery, receiver];
}

async function anonymous(channel) {
  const queue = 'rhea-anonymous';
  await channel.deleteQueue(queue);
  await channel.assertQueue(queue);
  // A user name without a password: rhea logs in with ANONYMOUS (the name is its trace).
  const connection = await open({ username: 'anonymous' });
  await send(connection, `/queues/${queue}`, { body: 'hello' });
  const [message, delivery, receiver] = await next(connection, `/queues/${queue}`);
  assert.equal(message.body, 'hello');
  delivery.accept();
  receiver.close();
  connection.close();
  await once(connection, 'connection_close');
  await channel.deleteQueue(queue);
}

async function poison(channel) {
  const queue = 'rhea-poison';
  const dlq = 'rhea-poison-dlq';
  await channel.deleteQueue(queue);
  await channel.deleteQueue(dlq);
  await channel.assertQueue(dlq);
  await channel.assertQueue(queue, {
    durable: true,
    arguments: { 'x-queue-type': 'quorum', 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dlq },
  });
  const connection = await open({ username: 'guest', password: 'guest' });
  await send(connection, `/queues/${queue}`, { body: 'bad payload' });
  const [, delivery, receiver] = await next(connection, `/queues/${queue}`);
  delivery.modified({
    delivery_failed: true,
    undeliverable_here: true,
    message_annotations: { 'x-opt-reason': 'schema mismatch', 'x-opt-attempts': 3 },
  });
  receiver.close();
  const [dead, deadDelivery] = await next(connection, `/queues/${dlq}`);
  assert.equal(dead.body, 'bad payload');
  const annotations = dead.message_annotations || {};
  assert.equal(annotations['x-opt-reason'], 'schema mismatch', JSON.stringify(annotations));
  assert.equal(Number(annotations['x-opt-attempts']), 3, JSON.stringify(annotations));
  const deaths = annotations['x-opt-deaths'];
  assert.ok(Array.isArray(deaths) && deaths.length === 1, JSON.stringify(annotations));
  deadDelivery.accept();
  connection.close();
  await once(connection, 'connection_close');
  await channel.deleteQueue(queue);
  await channel.deleteQueue(dlq);
}

async function main() {
  const amqpConnection = await amqp.connect(`amqp://guest:guest@127.0.0.1:${port}/`);
  const channel = await amqpConnection.createChannel();
  await anonymous(channel);
  await poison(channel);
  await amqpConnection.close();
  console.log('rhea client paths ok');
  process.exit(0);
}

main().catch((error) => {
  console.error('rhea client paths failed:', error);
  process.exit(1);
});
