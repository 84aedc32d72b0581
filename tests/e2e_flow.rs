//! Flow control through the real binary: a publisher flooding a queue whose consumer falls
//! behind is held (its connection shows `flow` and its socket is not read, or its link gets no
//! credit) and goes on once the consumer catches up; the queue's backlog stays bounded meanwhile,
//! over fan-out and dead-lettering too. Nothing here measures a rate: only that the publisher
//! stops, that depths stay under a bound, and that the publisher goes on.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conformance::raw::{self, Enc, RawConn};
use support::http::Call;

/// Ready messages a held queue may show: its flow mark (1,024) plus what its mailbox held when
/// it decided to hold, at most 256 publishes of one socket read each (~900 messages of 16 bytes):
/// a queue task that falls behind its mailbox (a debug build under load) takes them all. An
/// unheld flood passes millions.
const BOUND: u64 = 300_000;

fn broker(charon: &support::Charon) -> conformance::broker::Broker {
    conformance::broker::Broker::parse(&format!("amqp://guest:guest@127.0.0.1:{}/", charon.port)).unwrap()
}

async fn declare(c: &mut RawConn, queue: &str, arguments: &[(&str, Vec<u8>)]) {
    c.send(&raw::method(1, 50, 10, &Enc::new().u16(0).shortstr(queue).u8(0).table(arguments).done())).await.unwrap();
    c.expect_method(1, 50, 11).await.unwrap();
}

/// A consumer with no-ack on `queue` that reads nothing until told to: the broker's writes to
/// it stop at its socket's buffers, and its connection's outbound window fills.
async fn stalled_consumer(charon: &support::Charon, queue: &str) -> RawConn {
    let mut c = RawConn::open_with_channel(&broker(charon)).await.unwrap();
    let consume = Enc::new().u16(0).shortstr(queue).shortstr("stalled").u8(0b10).table(&[]).done();
    c.send(&raw::method(1, 60, 20, &consume)).await.unwrap();
    c.expect_method(1, 60, 21).await.unwrap();
    c
}

/// Publishes 16-byte messages to `exchange` with `key` in batches of 1,000, as fast as the
/// socket takes them; the counter says how many it took.
async fn flood(charon: &support::Charon, exchange: &str, key: &str) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let mut c = RawConn::open_with_channel(&broker(charon)).await.unwrap();
    let mut batch = Vec::new();
    for _ in 0..1000 {
        batch.extend(raw::basic_publish(1, exchange, key));
        batch.extend(raw::content_header(1, 16));
        batch.extend(raw::body(1, &[b'x'; 16]));
    }
    let published = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&published);
    let task = tokio::spawn(async move {
        while c.send(&batch).await.is_ok() {
            counter.fetch_add(1000, Ordering::Relaxed);
        }
    });
    (published, task)
}

/// Waits (10 s at most) until the publisher has stopped: two looks 500 ms apart see the same
/// count. Its socket is not read, so its writes stop once the kernel's buffers are full.
async fn stalls(published: &AtomicU64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = published.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = published.load(Ordering::Relaxed);
        if before == after {
            return after;
        }
        assert!(Instant::now() < deadline, "the publisher never stopped ({after} published)");
    }
}

async fn depth(charon: &support::Charon, queue: &str) -> u64 {
    let reply = Call::api(charon.http_port, "GET", &format!("/api/queues/%2F/{queue}")).send().await;
    reply.json()["messages"].as_u64().unwrap_or_else(|| panic!("{queue}: {}", reply.body))
}

/// The states of the broker's connections, as the management API shows them.
async fn states(charon: &support::Charon) -> Vec<String> {
    let reply = Call::api(charon.http_port, "GET", "/api/connections").send().await;
    reply.json().as_array().unwrap().iter().map(|c| c["state"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Reads and drops everything the stalled consumer was sent, until the test ends.
fn drain(mut consumer: RawConn) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { while consumer.read_frame(Duration::from_secs(30)).await.is_ok_and(|f| f.is_some()) {} })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_publisher_is_held_while_the_consumer_falls_behind_and_goes_on_after() {
    let charon = support::Charon::start();
    let mut setup = RawConn::open_with_channel(&broker(&charon)).await.unwrap();
    declare(&mut setup, "flood", &[]).await;
    let consumer = stalled_consumer(&charon, "flood").await;
    let (published, publisher) = flood(&charon, "", "flood").await;
    let held_at = stalls(&published).await;
    assert!(states(&charon).await.iter().any(|s| s == "flow"), "a connection in flow: {:?}", states(&charon).await);
    let first = depth(&charon, "flood").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = depth(&charon, "flood").await;
    assert!(first <= BOUND && second <= BOUND, "the backlog stays bounded: {first}, then {second}");
    assert_eq!(published.load(Ordering::Relaxed), held_at, "nothing more was taken from the publisher");
    // The consumer reads again: the publisher goes on.
    let draining = drain(consumer);
    let deadline = Instant::now() + Duration::from_secs(10);
    while published.load(Ordering::Relaxed) < held_at + 100_000 {
        assert!(Instant::now() < deadline, "the publisher did not go on ({})", published.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Both at full speed now: the consumer keeps up, and the queue stays short.
    for _ in 0..5 {
        let ready = depth(&charon, "flood").await;
        assert!(ready <= BOUND, "{ready} ready while the consumer keeps up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    publisher.abort();
    draining.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_and_dead_letters_are_held_by_the_same_queue() {
    let charon = support::Charon::start();
    let mut setup = RawConn::open_with_channel(&broker(&charon)).await.unwrap();
    // A fanout exchange to the stalled consumer's queue and to one nobody consumes.
    let declare_x = Enc::new().u16(0).shortstr("spread").shortstr("fanout").u8(0).table(&[]).done();
    setup.send(&raw::method(1, 40, 10, &declare_x)).await.unwrap();
    setup.expect_method(1, 40, 11).await.unwrap();
    for queue in ["watched", "side"] {
        declare(&mut setup, queue, &[]).await;
        let bind = Enc::new().u16(0).shortstr(queue).shortstr("spread").shortstr("").u8(0).table(&[]).done();
        setup.send(&raw::method(1, 50, 20, &bind)).await.unwrap();
        setup.expect_method(1, 50, 21).await.unwrap();
    }
    let consumer = stalled_consumer(&charon, "watched").await;
    let (published, publisher) = flood(&charon, "spread", "").await;
    stalls(&published).await;
    let side = depth(&charon, "side").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(depth(&charon, "side").await, side, "the queue without a consumer stopped growing too");
    assert!(depth(&charon, "watched").await <= BOUND);
    publisher.abort();
    drop(consumer);

    // Dead letters: a queue whose messages expire at once into the watched queue of a second
    // stalled consumer. Its dead letters stop at the held queue and wait in their source.
    declare(&mut setup, "held-dlq", &[]).await;
    let expiring = [
        ("x-message-ttl", Enc::new().u8(b'I').u32(0).done()),
        ("x-dead-letter-exchange", raw::field_longstr("")),
        ("x-dead-letter-routing-key", raw::field_longstr("held-dlq")),
    ];
    declare(&mut setup, "expiring", &expiring).await;
    let consumer = stalled_consumer(&charon, "held-dlq").await;
    let (published, publisher) = flood(&charon, "", "expiring").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while published.load(Ordering::Relaxed) < 60_000 {
        assert!(Instant::now() < deadline, "the source's publisher was held ({})", published.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    publisher.abort();
    // Unheld, every dead letter would be in the DLQ within a second or two.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (dlq, source) = (depth(&charon, "held-dlq").await, depth(&charon, "expiring").await);
    assert!(dlq <= 10_000, "the dead-letter queue stays bounded: {dlq} (its source keeps {source})");
    assert!(source >= 30_000, "the rest wait in their source: {source} (the DLQ has {dlq})");
    drop(consumer);
}

/// AMQP 1.0: the held queue's sending link gets no more credit, and gets it again once the
/// consumer caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_0_link_gets_no_credit_while_its_queue_holds_and_gets_it_back() {
    use conformance::raw10::{Conn10, Msg};
    use fe2o3_amqp_types::performatives::Performative;
    let charon = support::Charon::start();
    let mut setup = RawConn::open_with_channel(&broker(&charon)).await.unwrap();
    declare(&mut setup, "flood10", &[]).await;
    let consumer = stalled_consumer(&charon, "flood10").await;
    let mut sender = Conn10::open(&broker(&charon)).await.unwrap();
    sender.begin(0).await.unwrap();
    let settle = fe2o3_amqp_types::definitions::SenderSettleMode::Mixed;
    sender.send_attach_sender(0, 0, "flood", Some("/queues/flood10"), settle).await.unwrap();
    sender.expect_attach(0, 0).await.unwrap();
    let message = Msg::text("x").encode().unwrap();
    // Sends what the credit allows, reading the flows that top it up, until none comes.
    let first = sender.expect_flow(0, 0).await.unwrap();
    let mut credit = u64::from(first.link_credit.unwrap_or(0));
    let mut sent: u32 = 0;
    let starved = loop {
        while credit > 0 {
            sender.transfer(0, 0, sent, true, &message).await.unwrap();
            sent += 1;
            credit -= 1;
        }
        match sender.next(Duration::from_secs(2)).await {
            // The credit counts from the delivery-count the flow names, not from what was sent.
            Ok((0, Performative::Flow(flow), _)) if flow.handle.is_some() => {
                let limit = flow.delivery_count.unwrap_or(0).wrapping_add(flow.link_credit.unwrap_or(0));
                credit = u64::from(limit.wrapping_sub(sent));
            }
            Ok(_) => {}
            Err(_) => break sent,
        }
        assert!(sent < 10_000_000, "credit never ran out");
    };
    assert!(u64::from(starved) > 2048, "held only past the mark ({starved} sent)");
    let held_depth = depth(&charon, "flood10").await;
    assert!(held_depth <= BOUND, "the queue holds {held_depth} after {starved} sent");
    let draining = drain(consumer);
    let flow = sender
        .expect("a flow with credit", Duration::from_secs(10), |ch, p, _| match p {
            Performative::Flow(f) if ch == 0 && f.handle.is_some() && f.link_credit.unwrap_or(0) > 0 => Some(f.clone()),
            _ => None,
        })
        .await
        .unwrap();
    assert!(flow.link_credit.unwrap_or(0) > 0);
    draining.abort();
}

/// A backlog that formed while nobody consumed (paged) drains once a consumer comes, even
/// while the publisher goes on flooding: the consumer reads the pages faster than the
/// publisher, which the queue holds back while the backlog lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_backlog_drains_under_a_flooding_publisher() {
    let charon = support::Charon::start();
    let mut setup = RawConn::open_with_channel(&broker(&charon)).await.unwrap();
    declare(&mut setup, "burst", &[]).await;
    let (published, publisher) = flood(&charon, "", "burst").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while depth(&charon, "burst").await < 300_000 {
        assert!(Instant::now() < deadline, "no backlog formed ({} published)", published.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The publisher goes on; a consumer comes and reads all it is sent.
    let consumer = stalled_consumer(&charon, "burst").await;
    let draining = drain(consumer);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = depth(&charon, "burst").await;
        if left <= 20_000 {
            break;
        }
        assert!(Instant::now() < deadline, "the backlog did not drain: {left} left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = published.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(published.load(Ordering::Relaxed) > before, "the publisher goes on meanwhile");
    publisher.abort();
    draining.abort();
}
