//! The properties Charon's decoders must keep whatever a peer sends, one function each, so the
//! cargo-fuzz targets in `fuzz/` and the proptests of `cargo test` check exactly the same
//! thing. Each function panics when its property fails; any other panic (or a stack overflow)
//! is a finding too.
//!
//! - Nothing a client sends makes a protocol engine panic or recurse without bound.
//! - What an engine accepts as a message, the store encodes and reads back exactly: a message
//!   the broker confirms is never one its own log cannot read.
//! - The store's decoder never panics on any bytes, and what it decodes re-encodes to itself.
//! - A JSON body the HTTP API accepts converts to a value the store reads back.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use charon_model::{Body, Message, Routing, Table, Value};
use fe2o3_amqp_types::definitions::Role;

/// Accepts `guest`/`guest` on vhost `/`, as the broker's defaults do.
struct Guest;

impl charon_amqp091::proto::Host for Guest {
    fn authenticate(&mut self, _mechanism: &str, username: &str, password: &str) -> bool {
        username == "guest" && password == "guest"
    }

    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        if vhost == "/" { Ok(()) } else { Err(format!("vhost {vhost} not found")) }
    }
}

impl charon_amqp10::proto::Host for Guest {
    fn authenticate(&mut self, _mechanism: &str, username: &str, password: &str) -> bool {
        username == "guest" && password == "guest"
    }

    fn anonymous_user(&mut self) -> Option<String> {
        None
    }

    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        if vhost == "/" { Ok(()) } else { Err(format!("vhost {vhost} not found")) }
    }
}

/// Feeds all of `data` to `feed` in pieces of 1 to 16 bytes (the size comes from the data's last
/// byte), so that frames split across reads are exercised, and a client's frames reach the
/// engine about as they would from a client that waits for answers (a 1.0 client transfers
/// only once its attach is answered; a harness that fed everything at once would see every
/// session end on its first transfer).
fn in_pieces(data: &[u8], mut feed: impl FnMut(&[u8])) {
    let piece = usize::from(data.last().copied().unwrap_or(0) % 16) + 1;
    for chunk in data.chunks(piece) {
        feed(chunk);
    }
}

/// The client's bytes after the 8-byte protocol header, into a 0.9.1 connection: no panic, and
/// every publish it accepts is a message the store reads back. Returns how many it accepted.
pub fn amqp091_connection(data: &[u8]) -> usize {
    let mut accepted = 0;
    let now = Instant::now();
    let mut conn = charon_amqp091::proto::Connection::new(charon_amqp091::proto::ConnectionConfig::default(), now);
    let mut input = BytesMut::new();
    in_pieces(data, |chunk| {
        input.extend_from_slice(chunk);
        conn.handle_input(&mut input, now, &mut Guest);
        while let Some(event) = conn.poll_event() {
            if let charon_amqp091::proto::Event::Publish(_, command) = event {
                let mut message = Message::new(Routing::default(), Body::Data(command.body.clone()));
                message.set_boxed_properties(command.properties.properties.clone());
                message.headers = command.properties.headers.clone();
                store_reads_back(&message);
                accepted += 1;
            }
        }
        let _ = conn.output().split();
    });
    conn.handle_timeout(now + Duration::from_secs(10));
    accepted
}

/// The client's bytes after the SASL protocol header, into a 1.0 connection that accepts every
/// link: no panic, and every message it accepts is one the store reads back. Returns how many
/// messages it accepted.
pub fn amqp10_connection(data: &[u8]) -> usize {
    let mut accepted = 0;
    let now = Instant::now();
    let mut conn = charon_amqp10::proto::Connection::new(charon_amqp10::proto::Config::default(), false, now);
    let mut input = BytesMut::new();
    in_pieces(data, |chunk| {
        input.extend_from_slice(chunk);
        conn.handle_input(&mut input, now, &mut Guest);
        while let Some(event) = conn.poll_event() {
            match event {
                charon_amqp10::proto::Event::Attach { channel, attach } => {
                    let publishing = attach.role == Role::Sender;
                    let role = if publishing { Role::Receiver } else { Role::Sender };
                    let handle = attach.handle.0;
                    let delivery_count = attach.initial_delivery_count.unwrap_or(0);
                    conn.attach(channel, fe2o3_amqp_types::performatives::Attach { role, ..*attach });
                    if publishing {
                        conn.grant_initial_credit(channel, handle, delivery_count);
                    }
                }
                charon_amqp10::proto::Event::Transfer { payload, .. } => {
                    amqp10_message(&payload);
                    accepted += 1;
                }
                _ => {}
            }
        }
        let _ = conn.output().split();
    });
    conn.handle_timeout(now + Duration::from_secs(10));
    accepted
}

/// A 0.9.1 property list: no panic, and properties that decode make a message the store reads
/// back.
pub fn amqp091_properties(data: &[u8]) {
    if let Ok(decoded) = charon_amqp091::codec::decode_properties(&Bytes::copy_from_slice(data)) {
        let mut message = Message::new(Routing::default(), Body::Data(Bytes::new()));
        message.set_boxed_properties(decoded.properties);
        message.headers = decoded.headers;
        store_reads_back(&message);
    }
}

/// A 1.0 message (its sections): no panic, and a message that parses is one the store reads
/// back.
pub fn amqp10_message(data: &[u8]) {
    if let Ok(parsed) = charon_amqp10::codec::parse_message(&Bytes::copy_from_slice(data)) {
        store_reads_back(&charon_amqp10::mapping::to_model(&parsed, "x", "key".to_owned()));
    }
}

/// Any bytes as a stored message: no panic, and what decodes re-encodes to itself.
pub fn store_message(data: &[u8]) {
    if let Ok(message) = charon_store::codec::decode_message(Bytes::copy_from_slice(data)) {
        store_reads_back(&message);
    }
    let mut table_bytes = Bytes::copy_from_slice(data);
    if let Ok(table) = charon_store::codec::decode_table(&mut table_bytes) {
        table_reads_back(&table);
    }
}

/// A JSON request body: a definition the HTTP API accepts is a table the store reads back.
pub fn http_json(data: &[u8]) {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    if let Some(Value::Table(table)) = charon_management::json::from_json(&json) {
        table_reads_back(&table);
    }
}

/// Encodes `message` as the log does, decodes it, and checks the result encodes to the same
/// bytes (bytes, not `==`: a NaN header is equal to nothing, itself included).
fn store_reads_back(message: &Message) {
    let mut first = BytesMut::new();
    charon_store::codec::encode_message(message, &mut first);
    let first = first.freeze();
    let decoded = match charon_store::codec::decode_message(first.clone()) {
        Ok(decoded) => decoded,
        Err(error) => panic!("an accepted message does not read back from the store: {error}"),
    };
    let mut second = BytesMut::new();
    charon_store::codec::encode_message(&decoded, &mut second);
    assert_eq!(first, second.freeze(), "the store changed an accepted message");
}

fn table_reads_back(table: &Table) {
    let mut first = BytesMut::new();
    charon_store::codec::encode_table(table, &mut first);
    let first = first.freeze();
    let mut input = first.clone();
    let decoded = match charon_store::codec::decode_table(&mut input) {
        Ok(decoded) => decoded,
        Err(error) => panic!("an accepted table does not read back from the store: {error}"),
    };
    let mut second = BytesMut::new();
    charon_store::codec::encode_table(&decoded, &mut second);
    assert_eq!(first, second.freeze(), "the store changed an accepted table");
}
