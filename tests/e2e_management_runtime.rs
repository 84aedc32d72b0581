//! The management API's runtime objects against the real binary: a connection the API closes
//! (`DELETE /api/connections/{name}` with an `X-Reason` header) reaches its client as 320
//! CONNECTION_FORCED with that text, as RabbitMQ 4.0.5 closes it.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use lapin::{Connection, ConnectionProperties, ErrorKind, Event};
use serde_json::Value;

/// One blocking request to the API as guest, with extra headers; status and body.
async fn api(charon: &support::Charon, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut call = support::http::Call::new(charon.http_port, method, path).basic("guest", "guest");
    for (key, value) in headers {
        call = call.header(key, value);
    }
    let reply = call.send().await;
    assert_ne!(reply.status, 0, "{method} {path} got no answer");
    (reply.status, reply.body)
}

/// The name of the connection the client called `connection_name`, once the API lists it.
async fn connection_named(charon: &support::Charon, connection_name: &str) -> String {
    for _ in 0..100 {
        let (_, body) = api(charon, "GET", "/api/connections", &[]).await;
        let listed: Value = serde_json::from_str(&body).unwrap();
        if let Some(found) = listed.as_array().unwrap().iter().find(|c| c["user_provided_name"] == connection_name) {
            return found["name"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{connection_name} never listed");
}

fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_connection_closes_it_with_320_and_the_reason() {
    let charon = support::Charon::start();
    let properties = ConnectionProperties::default().with_connection_name("e2e-closed".into());
    let conn = Connection::connect(&charon.url(), properties).await.expect("connect");
    let _channel = conn.create_channel().await.expect("channel");
    let mut events = Box::pin(conn.events_listener());
    let name = connection_named(&charon, "e2e-closed").await;
    let path = format!("/api/connections/{}", segment(&name));
    let (status, one) = api(&charon, "GET", &path, &[]).await;
    assert_eq!(status, 200, "{one}");
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!((one["channels"].clone(), one["protocol"].clone()), (1.into(), "AMQP 0-9-1".into()));
    assert_eq!(one["client_properties"]["product"], "lapin");

    let (status, _) = api(&charon, "DELETE", &path, &[("X-Reason", "maintenance window")]).await;
    assert_eq!(status, 204);
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(Event::Error(error)) = events.next().await {
                return error;
            }
        }
    })
    .await
    .expect("the client was told");
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            assert_eq!((e.get_id(), e.get_message().as_str()), (320, "CONNECTION_FORCED - maintenance window"));
        }
        other => panic!("not a broker close: {other:?}"),
    }
    for _ in 0..100 {
        if api(&charon, "GET", &path, &[]).await.0 == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the closed connection is still listed");
}
