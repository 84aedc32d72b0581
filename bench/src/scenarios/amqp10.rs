//! S10: AMQP 1.0, one sender → one queue → one receiver (the fe2o3-amqp client): durable
//! messages, unsettled with 1000 outcomes awaited in flight, receiver credit 200, each
//! delivery accepted.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Body, Header, Message, Outcome as Disposition};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session, connection::ConnectionHandle};
use lapin::types::AMQPValue;

use super::Params;
use crate::amqp091;
use crate::report::Outcome;
use crate::seqs::{self, Tracker};
use crate::target::Target;

const CREDIT: u32 = 200;
const IN_FLIGHT: usize = 1000;

async fn open(target: &Target, name: &str, nodelay: bool) -> Result<(ConnectionHandle<()>, SessionHandle<()>)> {
    let authority = target.uri()?.authority;
    let host = format!("{}:{}", authority.host, authority.port);
    // fe2o3 leaves Nagle's algorithm on: each small disposition or flow waits for the ACK of
    // the one before, which a broker that delays its ACKs holds for up to 40 ms. That is how
    // users run it, so it is the default here; `--nodelay` shows the other case.
    let stream =
        tokio::net::TcpStream::connect(host.as_str()).await.with_context(|| format!("connecting to {host}"))?;
    stream.set_nodelay(nodelay)?;
    let mut conn = Connection::builder()
        .container_id(name)
        .hostname("vhost:/")
        .sasl_profile(SaslProfile::Plain {
            username: authority.userinfo.username,
            password: authority.userinfo.password,
        })
        .open_with_stream(stream)
        .await
        .map_err(|e| anyhow!("amqp 1.0 open: {e:?}"))?;
    let session = Session::begin(&mut conn).await.map_err(|e| anyhow!("amqp 1.0 begin: {e:?}"))?;
    Ok((conn, session))
}

pub(super) async fn one_to_one(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let queue = format!("bench-s10-{tag}");
    let setup_conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&setup_conn).await?;
    amqp091::declare(&setup, &queue, true, &[("x-queue-type", AMQPValue::LongString("classic".into()))]).await?;
    let address = format!("/queues/{queue}");
    let (mut receiver_conn, mut receiver_session) = open(target, &format!("{queue}-receiver"), params.nodelay).await?;
    let mut receiver = Receiver::builder()
        .name("bench-receiver")
        .source(address.as_str())
        .credit_mode(CreditMode::Auto(CREDIT))
        .attach(&mut receiver_session)
        .await
        .map_err(|e| anyhow!("attach receiver: {e:?}"))?;
    let messages = params.messages;
    let epoch = Instant::now();
    let receiving = tokio::spawn(async move {
        let mut tracker = Tracker::new(messages);
        let mut last = Instant::now();
        while !tracker.complete() {
            let next = tokio::time::timeout(amqp091::IDLE, receiver.recv::<Body<Value>>()).await;
            let Ok(delivery) = next else { break };
            let delivery = delivery.map_err(|e| anyhow!("recv: {e:?}"))?;
            if let Body::Data(batch) = delivery.body()
                && let Some(data) = batch.iter().next()
                && let Some((seq, _)) = seqs::read(&data.0)
                && tracker.saw(seq)
            {
                last = Instant::now();
            }
            receiver.accept(&delivery).await.map_err(|e| anyhow!("accept: {e:?}"))?;
        }
        let _ = receiver.close().await;
        Ok::<_, anyhow::Error>((tracker, last))
    });
    let (mut sender_conn, mut sender_session) = open(target, &format!("{queue}-sender"), params.nodelay).await?;
    let mut sender = Sender::builder()
        .name("bench-sender")
        .target(address.as_str())
        .attach(&mut sender_session)
        .await
        .map_err(|e| anyhow!("attach sender: {e:?}"))?;
    let mut pending = VecDeque::new();
    let mut refused = 0u64;
    for seq in 0..messages {
        let body = seqs::body(seq, seqs::since(epoch));
        let message = Message::builder()
            .header(Header { durable: true, ..Default::default() })
            .data(Binary::from(body.to_vec()))
            .build();
        let outcome = sender.send_batchable(message).await.map_err(|e| anyhow!("send: {e:?}"))?;
        pending.push_back(outcome);
        if pending.len() >= IN_FLIGHT
            && let Some(oldest) = pending.pop_front()
        {
            refused +=
                u64::from(!matches!(oldest.await.map_err(|e| anyhow!("outcome: {e:?}"))?, Disposition::Accepted(_)));
        }
    }
    for outcome in pending {
        refused +=
            u64::from(!matches!(outcome.await.map_err(|e| anyhow!("outcome: {e:?}"))?, Disposition::Accepted(_)));
    }
    let (tracker, last) =
        tokio::time::timeout(Duration::from_secs(120), receiving).await.context("the receiver did not finish")???;
    let _ = sender.close().await;
    let _ = sender_session.end().await;
    let _ = sender_conn.close().await;
    let _ = receiver_session.end().await;
    let _ = receiver_conn.close().await;
    setup.queue_delete(queue.as_str().into(), Default::default()).await?;
    let _ = setup_conn.close(200, "done".into()).await;
    if refused > 0 {
        bail!("{refused} messages were not accepted");
    }
    let mut outcome = Outcome::throughput(messages, last.duration_since(epoch).as_secs_f64());
    outcome.lost = tracker.lost();
    outcome.duplicates = tracker.duplicates;
    Ok(outcome)
}
