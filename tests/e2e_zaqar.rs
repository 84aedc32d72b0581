//! The Zaqar v2 gateway on the real binary: python-zaqarclient as shipped through the
//! claim-count dead-letter flow, HTTP and AMQP 0.9.1 / 1.0 on the same queues, and `kill -9`
//! during claim-count dead-letter moves leaving every message in exactly one queue.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value as Amqp;
use fe2o3_amqp::{Receiver, Session};
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{Value, json};

const CLIENT: &str = "0123456789abcdef0123456789abcdef";

/// One blocking request to the Zaqar gateway as project `/` (the default vhost); status and
/// body.
fn zaqar(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let call = support::http::Call::new(port, method, path).header("client-id", CLIENT).header("x-project-id", "/");
    let reply = call.header("content-type", "application/json").body(body).send_blocking();
    (reply.status, reply.body)
}

async fn zaqar_async(port: u16, method: &'static str, path: String, body: String) -> (u16, String) {
    tokio::task::spawn_blocking(move || zaqar(port, method, &path, &body)).await.unwrap()
}

fn python() -> PathBuf {
    if let Ok(path) = std::env::var("CHARON_PYTHON") {
        return PathBuf::from(path);
    }
    support::workspace_root().join(".venv/bin/python")
}

#[test]
fn python_zaqarclient_drives_the_claim_count_dead_letter_flow() {
    let python = python();
    assert!(python.exists(), "{} is missing: run scripts/test.sh", python.display());
    let charon = support::Charon::start();
    let script = support::workspace_root().join("tests/python/zaqar_flow.py");
    let output = Command::new(&python)
        .arg(&script)
        .args([charon.zaqar_port.unwrap().to_string(), charon.port.to_string(), charon.http_port.to_string()])
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "zaqar_flow.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("zaqar flow ok"), "{stdout}");
}

/// Token mode: python-zaqarclient's Keystone backend gets its token from the gateway itself
/// (`/v3/auth/tokens`, a broker user's password) and uses it; a wrong password and a request
/// without a token are refused.
#[test]
fn python_zaqarclient_authenticates_with_a_broker_users_token() {
    let python = python();
    assert!(python.exists(), "{} is missing: run scripts/test.sh", python.display());
    let charon = support::Charon::start_with(&["--zaqar-auth", "tokens"]);
    let script = support::workspace_root().join("tests/python/zaqar_tokens.py");
    let output =
        Command::new(&python).arg(&script).arg(charon.zaqar_port.unwrap().to_string()).output().expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "zaqar_tokens.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("zaqar tokens ok"), "{stdout}");
}

#[tokio::test]
async fn http_posts_are_consumed_over_0_9_1_and_1_0_and_amqp_publishes_are_claimed_over_http() {
    let charon = support::Charon::start();
    let port = charon.zaqar_port.unwrap();
    let (status, _) = zaqar_async(
        port,
        "POST",
        "/v2/queues/cross/messages".into(),
        r#"{"messages":[{"ttl":120,"body":{"n":1}},{"body":"two"}]}"#.into(),
    )
    .await;
    assert_eq!(status, 201);
    // 0.9.1: the JSON body, content type, TTL as expiration, persistent.
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let got = ch.basic_get("cross".into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("a message");
    let body: Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(body, json!({"n": 1}));
    let properties = &got.delivery.properties;
    assert_eq!(properties.content_type().as_ref().map(|s| s.as_str()), Some("application/json"));
    assert_eq!(properties.expiration().as_ref().map(|s| s.as_str()), Some("120000"));
    assert_eq!(*properties.delivery_mode(), Some(2));
    let headers = properties.headers().clone().unwrap();
    assert_eq!(headers.inner().get("x-zaqar-client-id"), Some(&AMQPValue::LongString(CLIENT.into())));
    // 1.0: the same payload as a data section.
    let mut amqp10 = charon.open_amqp10("zaqar-cross").await;
    let mut session = Session::begin(&mut amqp10).await.unwrap();
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/cross").await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), receiver.recv::<Body<Amqp>>()).await.unwrap().unwrap();
    let Body::Data(batch) = delivery.body() else { panic!("a data body, got {:?}", delivery.body()) };
    let bytes: Vec<u8> = batch.iter().flat_map(|data| data.0.to_vec()).collect();
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), json!("two"));
    receiver.accept(&delivery).await.unwrap();
    receiver.close().await.unwrap();
    session.end().await.unwrap();
    let _ = amqp10.close().await;
    // AMQP publishes (confirmed), claimed over HTTP.
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for payload in [&br#"{"from":"amqp"}"#[..], b"not json"] {
        let properties = BasicProperties::default().with_delivery_mode(2);
        let confirm = ch.basic_publish("".into(), "cross".into(), BasicPublishOptions::default(), payload, properties);
        assert!(confirm.await.unwrap().await.unwrap().is_ack());
    }
    let (status, claimed) = zaqar_async(port, "POST", "/v2/queues/cross/claims?limit=5".into(), String::new()).await;
    assert_eq!(status, 201, "{claimed}");
    let claimed: Value = serde_json::from_str(&claimed).unwrap();
    let bodies: Vec<Value> = claimed["messages"].as_array().unwrap().iter().map(|m| m["body"].clone()).collect();
    assert_eq!(bodies, vec![json!({"from": "amqp"}), json!("not json")]);
    for m in claimed["messages"].as_array().unwrap() {
        let href = m["href"].as_str().unwrap().to_owned();
        assert_eq!(zaqar_async(port, "DELETE", href, String::new()).await.0, 204);
    }
    let (_, stats) = zaqar_async(port, "GET", "/v2/queues/cross/stats".into(), String::new()).await;
    assert_eq!(serde_json::from_str::<Value>(&stats).unwrap()["messages"]["total"], 0);
    let _ = conn.close(200, "bye".into()).await;
}

const CYCLES: u64 = 20;

/// Posts batches and claims-then-releases until the broker dies (every second claim of a
/// message moves it to the DLQ); records the bodies whose post was confirmed (201).
fn churn(port: u16, next: Arc<Mutex<u64>>, confirmed: Arc<Mutex<BTreeSet<u64>>>) {
    loop {
        let batch: Vec<u64> = {
            let mut next = next.lock().unwrap();
            (0..10)
                .map(|_| {
                    *next += 1;
                    *next
                })
                .collect()
        };
        let messages: Vec<Value> = batch.iter().map(|n| json!({"ttl": 3600, "body": n})).collect();
        let (status, _) = zaqar(port, "POST", "/v2/queues/src/messages", &json!({ "messages": messages }).to_string());
        if status != 201 {
            return;
        }
        confirmed.lock().unwrap().extend(batch);
        let (status, claim) = zaqar(port, "POST", "/v2/queues/src/claims?limit=20", r#"{"ttl":60,"grace":60}"#);
        match status {
            201 => {
                let claim: Value = serde_json::from_str(&claim).unwrap();
                let href = claim["messages"][0]["href"].as_str().unwrap();
                let cid = href.rsplit('=').next().unwrap();
                if zaqar(port, "DELETE", &format!("/v2/queues/src/claims/{cid}"), "").0 != 204 {
                    return;
                }
            }
            204 => {}
            _ => return,
        }
    }
}

/// Every body left in `queue`, taken over AMQP.
async fn drain(conn: &Connection, queue: &str) -> Vec<u64> {
    let ch = conn.create_channel().await.unwrap();
    let mut bodies = Vec::new();
    while let Some(got) = ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        bodies.push(serde_json::from_slice::<u64>(&got.delivery.data).unwrap());
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_claim_count_dead_letter_moves_leaves_each_message_in_exactly_one_queue() {
    let data = tempfile::tempdir().unwrap();
    let next = Arc::new(Mutex::new(0u64));
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    for cycle in 0..CYCLES {
        let mut charon = support::Charon::start_on(data.path(), &[]);
        let port = charon.zaqar_port.unwrap();
        if cycle == 0 {
            let meta =
                r#"{"_max_claim_count": 1, "_dead_letter_queue": "dlq", "_dead_letter_queue_messages_ttl": 3600}"#;
            assert_eq!(zaqar_async(port, "PUT", "/v2/queues/src".into(), meta.into()).await.0, 201);
        }
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (next, confirmed) = (Arc::clone(&next), Arc::clone(&confirmed));
                tokio::task::spawn_blocking(move || churn(port, next, confirmed))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300 + (cycle * 97) % 500)).await;
        charon.kill9();
        for worker in workers {
            worker.await.unwrap();
        }
    }
    let charon = support::Charon::start_on(data.path(), &[]);
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let mut found: BTreeSet<u64> = drain(&conn, "src").await.into_iter().collect();
    let dead = drain(&conn, "dlq").await;
    assert!(!dead.is_empty(), "some messages were moved to the DLQ");
    let both: Vec<&u64> = dead.iter().filter(|n| found.contains(n)).collect();
    assert!(both.is_empty(), "{} messages are in both the source and the DLQ: {both:?}", both.len());
    let unique: BTreeSet<u64> = dead.iter().copied().collect();
    assert_eq!(unique.len(), dead.len(), "no message is in the DLQ twice");
    found.extend(dead);
    let confirmed = confirmed.lock().unwrap().clone();
    let lost: Vec<&u64> = confirmed.difference(&found).collect();
    assert!(lost.is_empty(), "{} of {} confirmed messages lost: {:?}", lost.len(), confirmed.len(), lost);
    assert!(confirmed.len() >= 200, "the loop posted {} messages", confirmed.len());
}

/// The claim-count move's dead letter over AMQP 1.0: its `x-opt-deaths` entry names the source
/// queue and reason `delivery_limit`, and its `header.delivery-count` is the claim count.
#[tokio::test]
async fn an_amqp_1_0_consumer_of_the_dlq_sees_the_death_and_the_claim_count() {
    use conformance::broker::Broker;
    use conformance::raw10::{Conn10, Received};
    use fe2o3_amqp::types::primitives::Value as V;

    let charon = support::Charon::start();
    let port = charon.zaqar_port.unwrap();
    let meta = r#"{"_max_claim_count": 2, "_dead_letter_queue": "d10-dlq"}"#;
    assert_eq!(zaqar_async(port, "PUT", "/v2/queues/d10".into(), meta.into()).await.0, 201);
    let posted = zaqar_async(port, "POST", "/v2/queues/d10/messages".into(), r#"{"messages":[{"body":"x"}]}"#.into());
    assert_eq!(posted.await.0, 201);
    for _ in 0..2 {
        let (status, claim) = zaqar_async(port, "POST", "/v2/queues/d10/claims".into(), String::new()).await;
        assert_eq!(status, 201);
        let claim: Value = serde_json::from_str(&claim).unwrap();
        let cid = claim["messages"][0]["href"].as_str().unwrap().rsplit('=').next().unwrap().to_owned();
        assert_eq!(zaqar_async(port, "DELETE", format!("/v2/queues/d10/claims/{cid}"), String::new()).await.0, 204);
    }
    assert_eq!(zaqar_async(port, "POST", "/v2/queues/d10/claims".into(), String::new()).await.0, 204);
    let broker = Broker::parse(&charon.url()).unwrap();
    let mut c = Conn10::open(&broker).await.unwrap();
    c.begin(0).await.unwrap();
    c.attach_receiver(0, 0, "/queues/d10-dlq").await.unwrap();
    c.credit(0, 0, 1, false).await.unwrap();
    let d = c.recv(0, Duration::from_secs(5)).await.unwrap();
    let received = Received::parse(&d.payload).unwrap();
    assert_eq!(received.data().unwrap(), br#""x""#);
    let Some(V::Array(entries)) = received.ann("x-opt-deaths") else { panic!("x-opt-deaths") };
    let V::Map(entry) = entries.0[0].clone() else { panic!("entry") };
    let field = |name: &str| {
        entry.iter().find(|(k, _)| matches!(k, V::Symbol(s) if s.0 == name)).map(|(_, v)| v.clone()).unwrap()
    };
    assert_eq!(field("queue"), V::String("d10".into()));
    assert_eq!(field("reason"), V::Symbol("delivery_limit".into()));
    assert_eq!(field("count"), V::Ulong(1));
    assert_eq!(received.header(4), Some(V::Uint(2)), "header.delivery-count = the claim count");
}

/// Claim counts survive a restart: a message claimed and released once before a `kill -9`
/// shows `claim_count` 2 on its next claim, and with `_max_claim_count` 1 is moved instead.
#[tokio::test]
async fn claim_counts_and_metadata_survive_a_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let mut charon = support::Charon::start_on(data.path(), &[]);
    let port = charon.zaqar_port.unwrap();
    assert_eq!(zaqar_async(port, "PUT", "/v2/queues/counted".into(), String::new()).await.0, 201);
    let meta = r#"{"_max_claim_count": 1, "_dead_letter_queue": "moved-dlq"}"#;
    assert_eq!(zaqar_async(port, "PUT", "/v2/queues/moved".into(), meta.into()).await.0, 201);
    for queue in ["counted", "moved"] {
        let post =
            zaqar_async(port, "POST", format!("/v2/queues/{queue}/messages"), r#"{"messages":[{"body":7}]}"#.into());
        assert_eq!(post.await.0, 201);
        let (status, claim) = zaqar_async(port, "POST", format!("/v2/queues/{queue}/claims"), String::new()).await;
        assert_eq!(status, 201);
        let claim: Value = serde_json::from_str(&claim).unwrap();
        let cid = claim["messages"][0]["href"].as_str().unwrap().rsplit('=').next().unwrap().to_owned();
        assert_eq!(zaqar_async(port, "DELETE", format!("/v2/queues/{queue}/claims/{cid}"), String::new()).await.0, 204);
    }
    // The return is logged with the queue's next pass; give it one before the kill.
    tokio::time::sleep(Duration::from_millis(300)).await;
    charon.kill9();
    let charon = support::Charon::start_on(data.path(), &[]);
    let port = charon.zaqar_port.unwrap();
    let (_, meta) = zaqar_async(port, "GET", "/v2/queues/moved".into(), String::new()).await;
    assert_eq!(serde_json::from_str::<Value>(&meta).unwrap()["_max_claim_count"], 1);
    let (status, claim) = zaqar_async(port, "POST", "/v2/queues/counted/claims".into(), String::new()).await;
    assert_eq!(status, 201);
    assert_eq!(serde_json::from_str::<Value>(&claim).unwrap()["messages"][0]["claim_count"], 2);
    assert_eq!(zaqar_async(port, "POST", "/v2/queues/moved/claims".into(), String::new()).await.0, 204);
    let (_, stats) = zaqar_async(port, "GET", "/v2/queues/moved-dlq/stats".into(), String::new()).await;
    assert_eq!(serde_json::from_str::<Value>(&stats).unwrap()["messages"]["total"], 1);
}

/// A delayed message survives a `kill -9` still delayed: after the restart it is neither
/// claimable nor fetched over AMQP before its time (the message posted with it without delay
/// is), and is claimed once due.
#[tokio::test]
async fn a_delayed_message_survives_a_kill_9_still_delayed() {
    const DELAY_S: u64 = 8;
    let data = tempfile::tempdir().unwrap();
    let mut charon = support::Charon::start_on(data.path(), &[]);
    let port = charon.zaqar_port.unwrap();
    let meta = r#"{"_default_message_delay": 1}"#;
    assert_eq!(zaqar_async(port, "PUT", "/v2/queues/later".into(), meta.into()).await.0, 201);
    let posted_at = std::time::Instant::now();
    let body = format!(r#"{{"messages":[{{"body":"d","delay":{DELAY_S}}},{{"body":"r","delay":0}}]}}"#);
    assert_eq!(zaqar_async(port, "POST", "/v2/queues/later/messages".into(), body).await.0, 201);
    charon.kill9();
    let charon = support::Charon::start_on(data.path(), &[]);
    let port = charon.zaqar_port.unwrap();
    let bodies = |claim: &str| -> Vec<Value> {
        let claim: Value = serde_json::from_str(claim).unwrap();
        claim["messages"].as_array().unwrap().iter().map(|m| m["body"].clone()).collect()
    };
    let (status, claim) = zaqar_async(port, "POST", "/v2/queues/later/claims?limit=5".into(), String::new()).await;
    assert!(posted_at.elapsed() < Duration::from_secs(DELAY_S - 1), "the restart took too long to test the delay");
    assert_eq!((status, bodies(&claim)), (201, vec![json!("r")]), "only the message without delay");
    let (_, stats) = zaqar_async(port, "GET", "/v2/queues/later/stats".into(), String::new()).await;
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!((stats["messages"]["free"].clone(), stats["messages"]["total"].clone()), (json!(1), json!(2)));
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    assert!(ch.basic_get("later".into(), BasicGetOptions { no_ack: true }).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_secs(DELAY_S).saturating_sub(posted_at.elapsed()) + Duration::from_millis(300))
        .await;
    let (status, claim) = zaqar_async(port, "POST", "/v2/queues/later/claims?limit=5".into(), String::new()).await;
    assert_eq!((status, bodies(&claim)), (201, vec![json!("d")]), "claimed once due");
    let _ = conn.close(200, "bye".into()).await;
}
