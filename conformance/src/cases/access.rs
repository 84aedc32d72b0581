//! Access control: per-vhost configure/write/read permissions on every path of both protocols
//! and the management API's tag rules, with RabbitMQ 4.0.5's refusals. Each case creates its
//! own user through the management API (`PUT /api/users`, `PUT /api/permissions`), so it runs
//! against any broker with RabbitMQ's API.

use std::time::Duration;

use lapin::options::{BasicConsumeOptions, BasicGetOptions, QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use crate::broker::Broker;
use crate::cases::amqp10_attach::session_of;
use crate::dlx_kit::{self as dk, text};
use crate::lapin_kit::{self as lk, expect_error};
use crate::raw::{Handshake, RawConn, basic_publish, body, channel_open, content_header, queue_declare_exclusive};
use crate::raw10::link::error_parts;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};
use fe2o3_amqp_types::definitions::SenderSettleMode;
use fe2o3_amqp_types::performatives::Performative;

const WAIT: Duration = Duration::from_secs(5);

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "access.declare_and_delete_need_configure",
            "queue.declare and exchange.declare of a name the configure pattern does not match, and queue.delete, get 403 'configure access to queue ... refused for user ...'",
            ["access"],
            declare_and_delete_need_configure
        ),
        case!(
            "access.publish_needs_write",
            "basic.publish to the default exchange without write on amq.default closes the channel with 403 'write access to exchange 'amq.default' ...'; a method pipelined behind it is ignored",
            ["access"],
            publish_needs_write
        ),
        case!(
            "access.consume_get_purge_need_read",
            "basic.consume, basic.get and queue.purge without read on the queue get 403 'read access to queue ...'",
            ["access"],
            consume_get_purge_need_read
        ),
        case!(
            "access.bind_needs_write_on_queue_and_read_on_exchange",
            "queue.bind checks write on the queue first, then read on the exchange",
            ["access"],
            bind_needs_write_and_read
        ),
        case!(
            "access.dead_letter_rule_at_declare",
            "declaring a new queue with x-dead-letter-exchange needs read on the queue and write on the DLX (the DLX page's rule); redeclaring an existing one does not",
            ["access", "dlx"],
            dead_letter_rule_at_declare
        ),
        case!(
            "access.vhost_without_permissions_refused",
            "connection.open of a vhost the user has no permissions in closes with 530 'access to vhost ... refused for user ...'",
            ["access"],
            vhost_without_permissions_refused
        ),
        case!(
            "access.amqp10_attach_refused",
            "AMQP 1.0: attaching a sender to an exchange without write, or a receiver to a queue without read, ends the session with amqp:unauthorized-access and RabbitMQ's text",
            ["access", "amqp10"],
            amqp10_attach_refused
        ),
        case!(
            "access.password_hash_import",
            "a user created with RabbitMQ's exported password_hash (rabbit_password_hashing_sha256, salted) logs in with its password and not with another",
            ["access"],
            password_hash_import
        ),
        case!(
            "access.deleting_a_user_closes_its_connections",
            "DELETE /api/users/u closes u's open connections with 320 'CONNECTION_FORCED - user 'u' is deleted'",
            ["access"],
            deleting_a_user_closes_its_connections
        ),
        case!(
            "access.deleting_a_user_closes_its_amqp10_connections",
            "DELETE /api/users/u closes u's AMQP 1.0 connections with amqp:internal-error 'Connection forced: \"user 'u' is deleted\"', as 4.0.5 does",
            ["access", "amqp10"],
            deleting_a_user_closes_its_amqp10_connections
        ),
        case!(
            "access.deleting_a_vhost_closes_its_connections",
            "DELETE /api/vhosts/v closes the connections open on v with 320 'CONNECTION_FORCED - vhost 'v' is deleted' (4.0.5 sometimes says 'is down')",
            ["access"],
            deleting_a_vhost_closes_its_connections
        ),
        case!(
            "access.topic_permissions",
            "topic permissions on a topic exchange: publishing with a routing key the write pattern ({username} filled in) does not match, and binding with a key the read pattern does not match, get 403 'write|read access to topic ...'",
            ["access"],
            topic_permissions
        ),
        case!(
            "access.management_tags",
            "the management API refuses users without a management tag (401 'Not management user') and user administration to non-administrators (401 'Not administrator user')",
            ["access"],
            management_tags
        ),
    ]
}

async fn channel_of(broker: &Broker) -> Result<(Connection, Channel), CaseError> {
    let conn = Connection::connect(&broker.url_with_vhost(&broker.vhost), ConnectionProperties::default())
        .await
        .map_err(|e| CaseError::from(e).context("lapin connect as user"))?;
    let ch = conn.create_channel().await?;
    Ok((conn, ch))
}

fn refused(action: &str, kind: &str, name: &str, broker: &Broker) -> String {
    format!(
        "ACCESS_REFUSED - {action} access to {kind} '{name}' in vhost '{}' refused for user '{}'",
        broker.vhost, broker.user
    )
}

async fn declare_and_delete_need_configure(ctx: Ctx) -> CaseResult {
    let allowed = ctx.queue("mine");
    let user = ctx.user_with("", Some((&format!("^{allowed}$"), ".*", ".*"))).await?;
    let (_conn, ch) = channel_of(&user).await?;
    ch.queue_declare(allowed.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
    let other = ctx.queue("other");
    let res = ch.queue_declare(other.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    expect_error(res, 403, &refused("configure", "queue", &other, &user))?;
    let (_conn, ch) = channel_of(&user).await?;
    let x = ctx.exchange("x");
    let options = lapin::options::ExchangeDeclareOptions::default();
    let res = ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Fanout, options, FieldTable::default()).await;
    expect_error(res, 403, &refused("configure", "exchange", &x, &user))?;
    // The queue the admin declared cannot be deleted by the user.
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&admin_ch, &other).await?;
    let (_conn, ch) = channel_of(&user).await?;
    let res = ch.queue_delete(other.as_str().into(), Default::default()).await;
    expect_error(res, 403, &refused("configure", "queue", &other, &user))?;
    // A passive declare needs no permission.
    let (_conn, ch) = channel_of(&user).await?;
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    ch.queue_declare(other.as_str().into(), passive, FieldTable::default()).await?;
    Ok(())
}

async fn publish_needs_write(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (admin, admin_ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&admin_ch, &q).await?;
    let user = ctx.user_with("", Some((".*", "^$", ".*"))).await?;
    // Raw frames: the close is read as it comes, whatever a client library would do meanwhile.
    let mut raw = RawConn::open_with_channel(&user).await?;
    let mut publish = basic_publish(1, "", &q);
    publish.extend(content_header(1, 2));
    publish.extend(body(1, b"no"));
    // A method pipelined behind the refused publish is ignored once the channel is closing:
    // one channel.close comes, and the connection goes on.
    publish.extend(queue_declare_exclusive(1));
    raw.send(&publish).await?;
    raw.expect_channel_close(1).await?.expect(403, &refused("write", "exchange", "amq.default", &user), 60, 40)?;
    raw.send(&channel_open(2)).await?;
    raw.expect_method(2, 20, 11).await?;
    check_eq!(lk::message_count(&admin, &q).await?, 0, "messages in the queue");
    Ok(())
}

async fn consume_get_purge_need_read(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&admin_ch, &q).await?;
    lk::publish(&admin_ch, "", &q, b"kept").await?;
    let user = ctx.user_with("", Some((".*", ".*", "^$"))).await?;
    let expected = refused("read", "queue", &q, &user);
    let (_conn, ch) = channel_of(&user).await?;
    let res =
        ch.basic_consume(q.as_str().into(), "c".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    expect_error(res, 403, &expected)?;
    let (_conn, ch) = channel_of(&user).await?;
    expect_error(ch.basic_get(q.as_str().into(), BasicGetOptions::default()).await, 403, &expected)?;
    let (_conn, ch) = channel_of(&user).await?;
    expect_error(ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default()).await, 403, &expected)?;
    lk::eventually(WAIT, "message still there", || async { Ok(lk::message_count(&_admin, &q).await? == 1) }).await
}

async fn bind_needs_write_and_read(ctx: Ctx) -> CaseResult {
    let (q, x) = (ctx.queue("q"), ctx.exchange("x"));
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&admin_ch, &q).await?;
    let options = lapin::options::ExchangeDeclareOptions::default();
    admin_ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Direct, options, FieldTable::default()).await?;
    // Neither write on the queue nor read on the exchange: the queue is checked first.
    let user = ctx.user_with("", Some((".*", "^$", "^$"))).await?;
    let (_conn, ch) = channel_of(&user).await?;
    let res = lk::bind(&ch, &q, &x, "k", FieldTable::default()).await;
    check!(res.is_err(), "bind without write must fail");
    let (_conn, ch) = channel_of(&user).await?;
    let res = ch
        .queue_bind(q.as_str().into(), x.as_str().into(), "k".into(), Default::default(), FieldTable::default())
        .await;
    expect_error(res, 403, &refused("write", "queue", &q, &user))?;
    // Write on the queue, no read on the exchange.
    let reader = ctx.user_with("", Some((".*", ".*", "^$"))).await?;
    let (_conn, ch) = channel_of(&reader).await?;
    let res = ch
        .queue_bind(q.as_str().into(), x.as_str().into(), "k".into(), Default::default(), FieldTable::default())
        .await;
    expect_error(res, 403, &refused("read", "exchange", &x, &reader))
}

async fn dead_letter_rule_at_declare(ctx: Ctx) -> CaseResult {
    let dlx = ctx.exchange("dlx");
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    let options = lapin::options::ExchangeDeclareOptions::default();
    admin_ch.exchange_declare(dlx.as_str().into(), lapin::ExchangeKind::Fanout, options, FieldTable::default()).await?;
    let args = || dk::args(&[("x-dead-letter-exchange", text(&dlx))]);
    // Write only on the case's queues (named `...-q<n>`), not on the DLX.
    let writer = ctx.user_with("", Some((".*", "-q[0-9]+$", ".*"))).await?;
    let q = ctx.queue("q");
    let (_conn, ch) = channel_of(&writer).await?;
    let res = ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args()).await;
    expect_error(res, 403, &refused("write", "exchange", &dlx, &writer))?;
    let reader = ctx.user_with("", Some((".*", ".*", "^$"))).await?;
    let (_conn, ch) = channel_of(&reader).await?;
    let res = ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args()).await;
    expect_error(res, 403, &refused("read", "queue", &q, &reader))?;
    check!(!lk::queue_exists(&_admin, &q).await?, "a refused declare creates nothing");
    // Once the queue exists, the same declare by the same users is only an equivalence check.
    admin_ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args()).await?;
    let (_conn, ch) = channel_of(&writer).await?;
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args()).await?;
    let (_conn, ch) = channel_of(&reader).await?;
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args()).await?;
    Ok(())
}

async fn vhost_without_permissions_refused(ctx: Ctx) -> CaseResult {
    let user = ctx.user_with("", None).await?;
    let res = Connection::connect(&user.url_with_vhost(&user.vhost), ConnectionProperties::default()).await;
    expect_error(res, 530, &format!("NOT_ALLOWED - access to vhost '{}' refused for user '{}'", user.vhost, user.user))
}

/// Attaches one link as `user` and expects the session to end with `amqp:unauthorized-access`.
async fn expect_unauthorized(user: &Broker, sender: bool, addr: &str, desc: &str) -> CaseResult {
    let mut c = session_of(user).await?;
    let mode = SenderSettleMode::Unsettled;
    if sender {
        c.send_attach_sender(0, 0, "l", Some(addr), mode).await?;
    } else {
        c.send_attach_receiver(0, 0, "l", Some(addr), mode).await?;
    }
    let mut seen = Vec::new();
    let end = loop {
        let (ch, p, _) = c.next(WAIT).await?;
        match p {
            Performative::End(e) if ch == 0 => break error_parts(&e.error),
            Performative::Close(e) => return Err(CaseError::new(format!("expected end, got close {:?}", e.error))),
            other => seen.push(crate::raw10::conn::short(&other)),
        }
    };
    check_eq!(end, ("amqp:unauthorized-access".to_owned(), Some(desc.to_owned())), "end error (after {seen:?})");
    c.close().await
}

async fn amqp10_attach_refused(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&admin_ch, &q).await?;
    let user = ctx.user_with("", Some((".*", "^$", "^$"))).await?;
    let plain = |r: String| r.trim_start_matches("ACCESS_REFUSED - ").to_owned();
    let x = "amq.direct";
    let addr = format!("/exchanges/{x}/k");
    expect_unauthorized(&user, true, &addr, &plain(refused("write", "exchange", x, &user))).await?;
    let addr = format!("/queues/{q}");
    expect_unauthorized(&user, true, &addr, &plain(refused("write", "exchange", "amq.default", &user))).await?;
    expect_unauthorized(&user, false, &addr, &plain(refused("read", "queue", &q, &user))).await
}

async fn password_hash_import(ctx: Ctx) -> CaseResult {
    let name = ctx.name("imported");
    ctx.track_user(&name);
    // `rabbitmqctl hash_password test12` with salt 908DC60A (RabbitMQ's documentation example).
    let body = r#"{"password_hash":"kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                   "hashing_algorithm":"rabbit_password_hashing_sha256","tags":""}"#;
    let b = ctx.broker();
    let response = ctx.api_as(b, "PUT", &format!("/api/users/{name}"), Some(body)).await?;
    check_eq!(response.status, 201, "PUT user: {}", response.body);
    let perms = r#"{"configure":".*","write":".*","read":".*"}"#;
    let path = format!("/api/permissions/{}/{name}", crate::fe2o3_kit::pct(&b.vhost));
    let response = ctx.api_as(b, "PUT", &path, Some(perms)).await?;
    check_eq!(response.status, 201, "PUT permissions: {}", response.body);
    let right = b.as_user(&name, "test12");
    let conn = Connection::connect(&right.url_with_vhost(&right.vhost), ConnectionProperties::default()).await?;
    conn.close(200, "bye".into()).await?;
    let wrong = b.as_user(&name, "test13");
    let res = Connection::connect(&wrong.url_with_vhost(&wrong.vhost), ConnectionProperties::default()).await;
    expect_error(
        res,
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.",
    )
}

/// Waits until `conn` is closed by the broker and returns the close's code and text.
async fn closed_by_broker(conn: &Connection) -> Result<(u16, String), CaseError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = String::new();
    loop {
        match conn.create_channel().await {
            Err(e) => {
                if let Some(found) = lk::amqp_error(&e) {
                    return Ok(found);
                }
                last = e.to_string();
            }
            Ok(ch) => drop(ch),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::new(format!("the connection was not closed by the broker (last: {last:?})")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn deleting_a_user_closes_its_connections(ctx: Ctx) -> CaseResult {
    let user = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let conn = Connection::connect(&user.url_with_vhost(&user.vhost), ConnectionProperties::default()).await?;
    let response = ctx.delete_user(&user.user).await?;
    check_eq!(response.status, 204, "DELETE user: {}", response.body);
    let closed = closed_by_broker(&conn).await?;
    check_eq!(closed, (320, format!("CONNECTION_FORCED - user '{}' is deleted", user.user)), "close");
    Ok(())
}

async fn deleting_a_user_closes_its_amqp10_connections(ctx: Ctx) -> CaseResult {
    let user = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let mut c = session_of(&user).await?;
    let response = ctx.delete_user(&user.user).await?;
    check_eq!(response.status, 204, "DELETE user: {}", response.body);
    let error = c.expect_close(WAIT).await?;
    check_eq!(
        error_parts(&error),
        // 4.0.5's rabbit_amqp_reader renders the forced close as an internal error (observed).
        ("amqp:internal-error".to_owned(), Some(format!("Connection forced: \"user '{}' is deleted\"", user.user))),
        "close"
    );
    Ok(())
}

async fn deleting_a_vhost_closes_its_connections(ctx: Ctx) -> CaseResult {
    let vhost = ctx.name("vhost");
    let b = ctx.broker();
    let path = format!("/api/vhosts/{vhost}");
    let response = ctx.api_as(b, "PUT", &path, Some("{}")).await?;
    check_eq!(response.status, 201, "PUT vhost: {}", response.body);
    // Its creator has full permissions there.
    let handshake = Handshake { vhost: vhost.clone(), ..Handshake::new(b) };
    let opened = RawConn::open(b, &handshake).await;
    let response = ctx.api_as(b, "DELETE", &path, None).await?;
    check_eq!(response.status, 204, "DELETE vhost: {}", response.body);
    let close = opened?.expect_forced_close().await?;
    // 4.0.5 races its `vhost_deleted` and `vhost_down` handlers: either text comes (observed).
    let deleted = format!("CONNECTION_FORCED - vhost '{vhost}' is deleted");
    let down = format!("CONNECTION_FORCED - vhost '{vhost}' is down");
    check!(close.text == deleted || close.text == down, "close text: {:?}", close.text);
    check_eq!((close.code, close.class_id, close.method_id), (320, 0, 0), "close code and ids");
    Ok(())
}

async fn topic_permissions(ctx: Ctx) -> CaseResult {
    let (x, q) = (ctx.exchange("x"), ctx.queue("q"));
    let (_admin, admin_ch) = ctx.lapin_channel().await?;
    let options = lapin::options::ExchangeDeclareOptions::default();
    admin_ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Topic, options, FieldTable::default()).await?;
    lk::declare_queue(&admin_ch, &q).await?;
    let user = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let b = ctx.broker();
    let request = format!(r#"{{"exchange":"{x}","write":"^{{username}}\\.","read":"^public\\."}}"#);
    let path = format!("/api/topic-permissions/{}/{}", crate::fe2o3_kit::pct(&b.vhost), user.user);
    let response = ctx.api_as(b, "PUT", &path, Some(&request)).await?;
    check_eq!(response.status, 201, "PUT topic permissions: {}", response.body);
    // Binding: the read pattern over the binding key.
    let (_conn, ch) = channel_of(&user).await?;
    let bind = |key: &'static str| {
        let (ch, q, x) = (ch.clone(), q.clone(), x.clone());
        async move {
            ch.queue_bind(q.as_str().into(), x.as_str().into(), key.into(), Default::default(), FieldTable::default())
                .await
        }
    };
    bind("public.#").await?;
    let refused = format!(
        "ACCESS_REFUSED - read access to topic 'private.#' in exchange '{x}' in vhost '{}' refused for user '{}'",
        user.vhost, user.user
    );
    expect_error(bind("private.#").await, 403, &refused)?;
    // Publishing: the write pattern, with {username} filled in, over the routing key.
    let mut raw = RawConn::open_with_channel(&user).await?;
    let own = format!("{}.a", user.user);
    for key in [own.as_str(), "other.a"] {
        let mut publish = basic_publish(1, &x, key);
        publish.extend(content_header(1, 1));
        publish.extend(body(1, b"m"));
        raw.send(&publish).await?;
    }
    let refused = format!(
        "ACCESS_REFUSED - write access to topic 'other.a' in exchange '{x}' in vhost '{}' refused for user '{}'",
        user.vhost, user.user
    );
    raw.expect_channel_close(1).await?.expect(403, &refused, 60, 40)
}

async fn management_tags(ctx: Ctx) -> CaseResult {
    let plain = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let response = ctx.api_as(&plain, "GET", "/api/whoami", None).await?;
    check_eq!(response.status, 401, "whoami without a management tag");
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
    check_eq!(body.get("reason").cloned().unwrap_or_default(), serde_json::json!("Not management user"), "reason");
    let managing = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let response = ctx.api_as(&managing, "GET", "/api/whoami", None).await?;
    check_eq!(response.status, 200, "whoami with the management tag: {}", response.body);
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
    check_eq!(body.get("name").cloned().unwrap_or_default(), serde_json::json!(managing.user.as_str()), "whoami name");
    check_eq!(body.get("tags").cloned().unwrap_or_default(), serde_json::json!(["management"]), "whoami tags");
    let response = ctx.api_as(&managing, "GET", "/api/users", None).await?;
    check_eq!(response.status, 401, "user list as a management user");
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
    check_eq!(body.get("error").cloned().unwrap_or_default(), serde_json::json!("not_authorised"), "error");
    check_eq!(body.get("reason").cloned().unwrap_or_default(), serde_json::json!("Not administrator user"), "reason");
    Ok(())
}
