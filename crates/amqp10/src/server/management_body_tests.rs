//! Unit tests of request parsing, with texts observed on RabbitMQ 4.0.5.

use super::*;

fn refused(uri: &str) -> String {
    match parse_target(uri) {
        Err(Status(_, text)) => text,
        Ok(t) => format!("accepted {t:?}"),
    }
}

#[test]
fn targets_are_normalized_like_uris() {
    let t = parse_target("/queues/../queues/./a%2Fb?x=1&y=a+b#frag").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(t.segments, vec!["queues", "a%2Fb"]);
    assert_eq!(t.query.get("y").map(String::as_str), Some("a b"));
    let t = parse_target("http://host/queues/x").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(t.segments, vec!["queues", "x"]);
    assert_eq!(refused("/queues/a b"), "failed to normalize URI '/queues/a b': invalid_uri \" \"");
    assert_eq!(refused("/queues/é b"), "failed to normalize URI '/queues/é b': invalid_uri \"é\"");
    assert_eq!(refused("/queues/a\"b"), "failed to normalize URI '/queues/a\"b': invalid_uri \"\\\"\"");
    assert_eq!(refused("/queues/a\u{7f}b"), "failed to normalize URI '/queues/a\u{7f}b': invalid_uri [127]");
    assert_eq!(refused("/queues/a\tb"), "failed to normalize URI '/queues/a\tb': invalid_uri \"\\t\"");
    assert_eq!(refused("/queues/a%zz"), "failed to normalize URI '/queues/a%zz': invalid_percent_encoding <<\"%zz\">>");
    assert_eq!(refused("/queues/x?a=b#c d"), "failed to normalize URI '/queues/x?a=b#c d': invalid_uri \" \"");
}

#[test]
fn bodies_refuse_unknown_keys_with_the_erlang_term() {
    let body = map(vec![("unknown", text("bla"))]);
    let err = decode_queue(&body).err();
    assert_eq!(err, Some(bad("bad queue property {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}")));
    let body = map(vec![("type", Amqp::Symbol("direct".into()))]);
    let err = decode_exchange(&body).err();
    assert_eq!(err, Some(bad("bad exchange property {{utf8,<<\"type\">>},{symbol,<<\"direct\">>}}")));
    let mut args = OrderedMap::new();
    args.insert(Amqp::Ulong(1), text("v"));
    let err = decode_queue(&map(vec![("arguments", Amqp::Map(args))])).err();
    assert_eq!(err, Some(bad("unsupported argument {{ulong,1},{utf8,<<\"v\">>}}")));
}

#[test]
fn arguments_convert_like_mc_amqpl() {
    let mut args = OrderedMap::new();
    args.insert(text("s"), Amqp::Symbol("sym".into()));
    args.insert(text("u"), Amqp::Ulong(5));
    args.insert(text("b"), Amqp::Binary(vec![1u8].into()));
    let body = decode_queue(&map(vec![("arguments", Amqp::Map(args))])).unwrap_or_else(|e| panic!("{e:?}"));
    let back = arguments_map(&body.arguments);
    assert_eq!(back, map(vec![("s", text("sym")), ("u", Amqp::Long(5)), ("b", text("\u{1}"))]));
}

#[test]
fn binding_locations_round_trip() {
    let location = binding_location("e 1", &Destination::Queue("q/1".into()), "k", &Table::new());
    assert_eq!(location, "/bindings/src=e%201;dstq=q%2F1;key=k;args=");
    let segment = location.trim_start_matches("/bindings/");
    assert_eq!(
        parse_binding_segment(segment),
        Some(("e 1".into(), Destination::Queue("q/1".into()), "k".into(), String::new()))
    );
    let mut args = Table::new();
    args.insert("x", Value::long_str("y"));
    assert_eq!(charon_engine::exchange::arguments_hash(&args).len(), 6);
    assert_eq!(parse_binding_segment("src=;dstq=x;key=k;args="), None);
    assert_eq!(parse_binding_segment("src=a;dstq=;key=k;args="), None);
    assert_eq!(parse_binding_segment("src=a;dstx=q;key=k;args="), None);
    assert_eq!(parse_binding_segment("src=e1;dstq=q1;invalidkey=k1;args="), None);
}

#[test]
fn names_with_line_breaks_are_refused() {
    assert_eq!(
        prohibit_cr_lf("a\nb"),
        Err(bad("Bad name 'a\nb': line feed and carriage return characters not allowed"))
    );
}
