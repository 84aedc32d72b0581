//! The session's numbering, windows and link bookkeeping, driven without a connection.

use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role, SenderSettleMode};
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Flow, Transfer};
use serde_bytes::ByteBuf;

use super::*;

fn begin(next_outgoing_id: u32, incoming_window: u32, handle_max: u32) -> Begin {
    Begin {
        remote_channel: None,
        next_outgoing_id,
        incoming_window,
        outgoing_window: u32::MAX,
        handle_max: Handle(handle_max),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// Our attach reply: `Role::Receiver` makes a publisher link, `Role::Sender` a consumer link.
fn reply(handle: u32, role: Role) -> Attach {
    Attach {
        name: format!("link-{handle}"),
        handle: Handle(handle),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: Default::default(),
        source: None,
        target: None,
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

fn transfer(handle: u32, delivery_id: u32) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(ByteBuf::from(vec![1])),
        message_format: Some(0),
        settled: Some(true),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

fn flow(next_incoming_id: Option<u32>, incoming_window: u32, handle: Option<u32>) -> Flow {
    let mut flow = hot::empty_flow();
    flow.next_incoming_id = next_incoming_id;
    flow.incoming_window = incoming_window;
    flow.handle = handle.map(Handle);
    flow
}

/// A session on channel 1 with a publisher link on handle 0 granted `credit`.
fn publishing(credit: u32) -> Session {
    let mut session = Session::new(1, &begin(1000, 100, 10));
    session.attach(&reply(0, Role::Receiver));
    let grant = session.grant_credit(0, 0, credit);
    assert_eq!((grant.handle, grant.delivery_count, grant.link_credit), (Some(Handle(0)), Some(0), Some(credit)));
    session
}

fn receive(session: &mut Session, id: u32) -> Option<Flow> {
    let (event, flow) = session.on_transfer(transfer(0, id), Bytes::from_static(b"m"), 100, false).unwrap().unwrap();
    assert!(matches!(event, Event::Transfer { channel: 1, handle: 0, delivery_id, .. } if delivery_id == id));
    flow
}

#[test]
fn begin_reply_announces_our_numbering() {
    let session = Session::new(3, &begin(7, 100, 1000));
    let reply = session.begin_reply();
    assert_eq!(reply.remote_channel, Some(3));
    assert_eq!(reply.next_outgoing_id, u32::MAX - 3);
    assert_eq!(reply.incoming_window, 400);
    assert_eq!(reply.outgoing_window, u32::MAX);
    assert_eq!(reply.handle_max, Handle(255));
    assert_eq!(Session::new(3, &begin(7, 100, 10)).begin_reply().handle_max, Handle(10));
    assert_eq!(session.next_incoming_id, 7);
    assert_eq!(session.remote_incoming_window, 100);
}

#[test]
fn incoming_window_widens_at_half_of_max_incoming_window() {
    let mut session = publishing(MAX_LINK_CREDIT);
    for id in 1..200 {
        let flow = receive(&mut session, id);
        match id {
            // Link credit down to 85: topped up, with the session's fields as they are.
            85 | 170 => {
                let flow = flow.unwrap();
                assert_eq!(flow.handle, Some(Handle(0)));
                assert_eq!(flow.delivery_count, Some(id));
                assert_eq!(flow.link_credit, Some(170));
                assert_eq!(flow.incoming_window, 400 - id);
                assert_eq!(flow.next_incoming_id, Some(1000 + id));
            }
            _ => assert_eq!(flow, None, "transfer {id}"),
        }
    }
    assert_eq!(session.incoming_window, 201);
    // The 200th transfer leaves 200 = 400 / 2: widened back to 400 and announced alone.
    let flow = receive(&mut session, 200).unwrap();
    assert_eq!(flow.handle, None);
    assert_eq!(flow.link_credit, None);
    assert_eq!(flow.next_incoming_id, Some(1200));
    assert_eq!(flow.incoming_window, 400);
    assert_eq!(flow.next_outgoing_id, u32::MAX - 3);
    assert_eq!(flow.outgoing_window, u32::MAX);
    assert_eq!(session.incoming_window, 400);
}

#[test]
fn a_regrant_with_the_widening_carries_the_wider_window() {
    // Credit 285 reaches 85 on the 200th transfer, when the window is widened too.
    let mut session = publishing(285);
    for id in 1..200 {
        assert_eq!(receive(&mut session, id), None);
    }
    let flow = receive(&mut session, 200).unwrap();
    assert_eq!((flow.handle, flow.delivery_count, flow.link_credit), (Some(Handle(0)), Some(200), Some(170)));
    assert_eq!((flow.next_incoming_id, flow.incoming_window), (Some(1200), 400));
}

#[test]
fn a_frame_in_the_middle_of_a_message_announces_no_widening() {
    let mut session = publishing(MAX_LINK_CREDIT);
    session.incoming_window = 201;
    let mut first = transfer(0, 9);
    first.more = true;
    assert!(session.on_transfer(first, Bytes::from_static(b"a"), 100, false).unwrap().is_none());
    assert_eq!(session.incoming_window, 400);
    assert_eq!(session.next_incoming_id, 1001);
}

#[test]
fn blocked_frames_go_out_when_a_flow_opens_the_window() {
    let mut session = Session::new(1, &begin(0, 0, 10));
    session.attach(&reply(2, Role::Sender));
    assert_eq!(
        [session.start_delivery(2), session.start_delivery(2), session.start_delivery(2)],
        [Some(0), Some(1), Some(2)]
    );
    let mut out = BytesMut::new();
    for frame in [b"a", b"b", b"c"] {
        session.send_transfer_frame(&mut out, Bytes::from_static(frame));
    }
    assert!(out.is_empty());
    assert_eq!(session.blocked_len(), 3);
    // The client has taken nothing yet and opens a window of 2.
    assert!(session.on_flow(&flow(Some(u32::MAX - 3), 2, None)).unwrap().is_none());
    assert_eq!(session.remote_incoming_window, 2);
    // Frames keep their order: with some blocked, a new one waits even in an open window.
    session.send_transfer_with(&mut out, 1, |frame| frame.put_u8(b'd'));
    assert!(out.is_empty());
    session.release_blocked(&mut out);
    assert_eq!(&out[..], b"ab");
    assert_eq!((session.blocked_len(), session.remote_incoming_window), (2, 0));
    assert_eq!(session.next_outgoing_id, u32::MAX - 1);
    // The client took 2 and opens 5.
    session.on_flow(&flow(Some(u32::MAX - 1), 5, None)).unwrap();
    session.release_blocked(&mut out);
    assert_eq!(&out[..], b"abcd");
    assert_eq!((session.blocked_len(), session.remote_incoming_window), (0, 3));
    // Transfer ids wrap: u32::MAX - 3, .., u32::MAX, 0 went out.
    assert_eq!(session.next_outgoing_id, 0);
    // With the window open and nothing blocked, a frame goes straight out.
    session.send_transfer_with(&mut out, 1, |frame| frame.put_u8(b'e'));
    assert_eq!(&out[..], b"abcde");
    assert_eq!((session.next_outgoing_id, session.remote_incoming_window), (1, 2));
}

#[test]
fn the_remote_window_counts_across_the_wrap() {
    let mut session = Session::new(1, &begin(0, 0, 10));
    session.next_outgoing_id = 1;
    // The client received up to u32::MAX - 2 and grants 10: 7 of them are still free.
    session.on_flow(&flow(Some(u32::MAX - 1), 10, None)).unwrap();
    assert_eq!(session.remote_incoming_window, 7);
    // Without next-incoming-id the window counts from our initial id: long used up.
    session.on_flow(&flow(None, 3, None)).unwrap();
    assert_eq!(session.remote_incoming_window, 0);
}

#[test]
fn delivery_ids_count_per_session_and_only_for_attached_links() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    session.next_delivery_id = u32::MAX;
    assert_eq!(session.start_delivery(4), None);
    session.attach(&reply(4, Role::Sender));
    session.attach(&reply(5, Role::Sender));
    assert_eq!(session.start_delivery(4), Some(u32::MAX));
    assert_eq!(session.start_delivery(5), Some(0));
    assert_eq!(session.next_delivery_id, 1);
}

#[test]
fn handles_above_handle_max_end_the_session() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    let text = "link handle value (11) exceeds maximum link handle value (10)";
    assert_eq!(session.on_attach(11), Err(Failure::Session(1, error("amqp:connection:framing-error", text))));
    assert_eq!(session.on_attach(10), Ok(false));
    session.attach(&reply(10, Role::Receiver));
    // The same handle again replaces the link.
    assert_eq!(session.on_attach(10), Ok(true));
    assert_eq!(session.on_attach(10), Ok(false));
}

#[test]
fn a_flow_reports_consumer_credit() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    session.attach(&reply(0, Role::Receiver));
    session.attach(&reply(1, Role::Sender));
    let mut credit = flow(Some(u32::MAX - 3), 10, Some(1));
    credit.delivery_count = Some(3);
    credit.link_credit = Some(50);
    credit.drain = true;
    let event = session.on_flow(&credit).unwrap();
    assert!(matches!(
        event,
        Some(Event::Credit {
            channel: 1,
            handle: 1,
            delivery_count: Some(3),
            link_credit: 50,
            drain: true,
            echo: false
        })
    ));
    assert!(session.on_flow(&flow(Some(u32::MAX - 3), 10, Some(0))).unwrap().is_none());
}

#[test]
fn a_detached_handle_stays_in_use_until_the_client_answers() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    session.attach(&reply(3, Role::Sender));
    session.detach(3);
    // Frames the client sent before it saw our detach are dropped.
    assert!(session.on_flow(&flow(None, 10, Some(3))).unwrap().is_none());
    assert!(session.on_transfer(transfer(3, 0), Bytes::new(), 100, false).unwrap().is_none());
    assert_eq!(session.on_detach(&Detach { handle: Handle(3), closed: true, error: None }), None);
    // Now the handle is free: frames on it end the session.
    let unattached = error("amqp:session:unattached-handle", "Unattached link handle: 3");
    assert_eq!(session.on_flow(&flow(None, 10, Some(3))).err(), Some(Failure::Session(1, unattached)));
    let unknown = error("amqp:session:unattached-handle", "Unknown link handle: 3");
    let refused = session.on_transfer(transfer(3, 0), Bytes::new(), 100, false);
    assert_eq!(refused.err(), Some(Failure::Session(1, unknown)));
}

#[test]
fn a_client_detach_of_an_attached_link_is_answered() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    session.attach(&reply(6, Role::Receiver));
    let answer = session.on_detach(&Detach { handle: Handle(6), closed: false, error: None });
    assert_eq!(answer, Some(Detach { handle: Handle(6), closed: false, error: None }));
    assert_eq!(session.start_delivery(6), None);
}

#[test]
fn link_refusals_name_the_link_or_the_session() {
    let mut session = publishing(0);
    let refused = session.on_transfer(transfer(0, 0), Bytes::new(), 100, false);
    let limit = error("amqp:link:transfer-limit-exceeded", "");
    assert_eq!(refused.err(), Some(Failure::Link(1, 0, limit)));
    // A transfer on a consumer link is one on no publisher link.
    session.attach(&reply(2, Role::Sender));
    let refused = session.on_transfer(transfer(2, 0), Bytes::new(), 100, false);
    let unknown = error("amqp:session:unattached-handle", "Unknown link handle: 2");
    assert_eq!(refused.err(), Some(Failure::Session(1, unknown)));
}

#[test]
fn ending_forgets_the_links_once() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    session.attach(&reply(0, Role::Sender));
    assert!(!session.is_ending());
    assert!(session.end());
    assert!(session.is_ending());
    assert!(!session.end());
    assert_eq!(session.start_delivery(0), None);
}

#[test]
fn resuming_tops_up_only_publishers_at_half_credit_or_less() {
    let mut session = publishing(MAX_LINK_CREDIT);
    session.attach(&reply(1, Role::Receiver));
    session.grant_credit(1, 0, MAX_LINK_CREDIT);
    session.attach(&reply(2, Role::Sender));
    // Paused: handle 0 goes down to 85 without a regrant.
    for id in 0..85 {
        let received = session.on_transfer(transfer(0, id), Bytes::new(), 100, true).unwrap().unwrap();
        assert_eq!(received.1, None, "transfer {id}");
    }
    let flows = session.top_up_publishers();
    assert_eq!(flows.len(), 1);
    let flow = flows.first().unwrap();
    assert_eq!((flow.handle.clone(), flow.delivery_count, flow.link_credit), (Some(Handle(0)), Some(85), Some(170)));
    assert_eq!((flow.next_incoming_id, flow.incoming_window), (Some(1085), 315));
    assert!(session.top_up_publishers().is_empty());
}

#[test]
fn a_consumer_flow_carries_the_brokers_count() {
    let mut session = Session::new(1, &begin(0, 10, 10));
    assert_eq!(session.consumer_flow(2, 9, 0, true, 4), None);
    session.attach(&reply(2, Role::Sender));
    let flow = session.consumer_flow(2, 9, 0, true, 4).unwrap();
    assert_eq!(
        (flow.handle, flow.delivery_count, flow.link_credit, flow.drain, flow.available),
        (Some(Handle(2)), Some(9), Some(0), true, Some(4))
    );
    assert_eq!((flow.next_incoming_id, flow.next_outgoing_id), (Some(0), u32::MAX - 3));
}
