// amqplib (AMQP 0.9.1) closing under load, as applications do at shutdown:
// - a confirm channel closed right after a burst of publishes: close() resolves, every publish
//   callback is answered, and no frame arrives for the freed channel (amqplib fails the
//   connection with "Frame on unknown channel" for one). amqplib itself ignores acks that
//   arrive after it sent channel.close and answers the callbacks still waiting at close-ok
//   with "channel closed", so how many are acks depends on timing;
// - a connection closed while megabytes of publishes are still buffered in the client: close()
//   resolves and the connection emits no error (a broker that drops the socket at close-ok
//   makes the kernel reset it under the client's remaining writes: EPIPE / ECONNRESET).
// Usage: node amqplib_close_under_load.js <port>  (guest/guest on 127.0.0.1). Exit status 0 =
// pass; the last line printed is "amqplib close under load ok".
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib');

const TIMEOUT_MS = 60000;
const ROUNDS = 5;
const CONFIRMED = 5000;
const BUFFERED = 20000;

const port = Number(process.argv[2]);
if (!Number.isInteger(port)) {
  console.error('usage: node amqplib_close_under_load.js <port>');
  process.exit(2);
}
setTimeout(() => {
  console.error(`amqplib close under load timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS).unref();

const connect = () => amqp.connect(`amqp://guest:guest@127.0.0.1:${port}/`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Records every error `emitter` emits (an unhandled one would end the process). */
function errorsOf(emitter) {
  const errors = [];
  emitter.on('error', (error) => errors.push(error));
  return errors;
}

async function confirmsBeforeChannelClose(connection, connectionErrors) {
  const setup = await connection.createChannel();
  const queue = 'amqplib-close-confirms';
  await setup.deleteQueue(queue);
  await setup.assertQueue(queue);
  const body = Buffer.alloc(100, 'c');
  for (let round = 0; round < ROUNDS; round++) {
    const channel = await connection.createConfirmChannel();
    const channelErrors = errorsOf(channel);
    let acked = 0;
    const refused = [];
    for (let i = 0; i < CONFIRMED; i++) {
      // Every other one unroutable: those are confirmed at once, the others when queued.
      const key = i % 2 === 0 ? queue : 'amqplib-close-nowhere';
      channel.publish('', key, body, {}, (error) => {
        if (error) refused.push(String(error));
        else acked += 1;
      });
    }
    await channel.close();
    assert.equal(acked + refused.length, CONFIRMED, `round ${round}: publish callbacks answered`);
    assert.ok(refused.every((error) => error === 'Error: channel closed'), `round ${round}: ${refused[0]}`);
    // A late frame for the freed channel would surface as an error now.
    await sleep(200);
    assert.deepEqual(channelErrors.map(String), [], `round ${round}: channel errors`);
    assert.deepEqual(connectionErrors.map(String), [], `round ${round}: connection errors`);
  }
  assert.equal((await setup.checkQueue(queue)).messageCount, (ROUNDS * CONFIRMED) / 2);
  await setup.deleteQueue(queue);
  await setup.close();
}

async function closeWithPublishesBuffered() {
  const connection = await connect();
  const errors = errorsOf(connection);
  const channel = await connection.createChannel();
  const queue = 'amqplib-close-buffered';
  await channel.assertQueue(queue);
  const body = Buffer.alloc(1024, 'b');
  // publish() only buffers: with 20 MB queued in the client, close() goes out while most of
  // the publishes are still to be written.
  for (let i = 0; i < BUFFERED; i++) channel.publish('', queue, body);
  let closed = false;
  connection.on('close', () => {
    closed = true;
  });
  await connection.close();
  await sleep(300);
  assert.deepEqual(errors.map(String), [], 'connection errors');
  assert.ok(closed, 'the close event');
  const check = await connect();
  const checkChannel = await check.createChannel();
  await checkChannel.deleteQueue(queue);
  await check.close();
}

async function main() {
  const connection = await connect();
  const connectionErrors = errorsOf(connection);
  await confirmsBeforeChannelClose(connection, connectionErrors);
  await connection.close();
  await closeWithPublishesBuffered();
  console.log('amqplib close under load ok');
  process.exit(0);
}

main().catch((error) => {
  console.error('amqplib close under load failed:', error);
  process.exit(1);
});
