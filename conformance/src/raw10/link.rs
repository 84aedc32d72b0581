//! Sessions, links, transfers and dispositions on a [`Conn10`].

use super::{
    codec,
    conn::{Conn10, WAIT},
};
use crate::error::CaseError;
use fe2o3_amqp_types::{
    definitions::{Error as AmqpError, Handle, ReceiverSettleMode, Role, SenderSettleMode},
    messaging::{DeliveryState, Source, Target, TargetArchetype},
    performatives::{Attach, Begin, Detach, Disposition, End, Flow, Performative, Transfer},
    primitives::Binary,
};
use std::time::Duration;

/// A delivery as it arrived: the first transfer and the whole reassembled payload.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Channel it arrived on.
    pub channel: u16,
    /// The first transfer frame of the delivery.
    pub transfer: Transfer,
    /// Concatenated payload of all its transfer frames.
    pub payload: Vec<u8>,
    /// How many transfer frames carried it.
    pub frames: usize,
}

impl Delivery {
    /// The delivery id (the broker always sets it on the first transfer).
    pub fn id(&self) -> u32 {
        self.transfer.delivery_id.unwrap_or_default()
    }
    /// Whether the broker sent it pre-settled.
    pub fn settled(&self) -> bool {
        self.transfer.settled.unwrap_or(false)
    }
}

/// How the link ended when the broker refused or dropped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A detach (closed flag, condition symbol, description).
    Detach(bool, String, Option<String>),
    /// An end of the whole session (condition symbol, description).
    End(String, Option<String>),
    /// A close of the whole connection (condition symbol, description).
    Close(String, Option<String>),
}

/// Condition symbol and description of an optional error (`("", None)` when absent).
pub fn error_parts(e: &Option<AmqpError>) -> (String, Option<String>) {
    match e {
        Some(e) => (codec::condition_symbol(&e.condition), e.description.clone()),
        None => (String::new(), None),
    }
}

impl Conn10 {
    /// Begins a session on `channel` and waits for the broker's begin.
    pub async fn begin(&mut self, channel: u16) -> Result<Begin, CaseError> {
        let b = Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 5000,
            outgoing_window: 5000,
            handle_max: Handle(255),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.sessions.insert(channel, Default::default());
        self.perf(channel, &b).await?;
        let got = self
            .expect("begin", WAIT, |ch, p, _| match p {
                Performative::Begin(b) if ch == channel => Some(b.clone()),
                _ => None,
            })
            .await?;
        if let Some(ids) = self.sessions.get_mut(&channel) {
            ids.next_incoming = got.next_outgoing_id;
        }
        Ok(got)
    }

    /// Sends attach for a sending link (the client sends to `target`).
    pub async fn send_attach_sender(
        &mut self,
        channel: u16,
        handle: u32,
        name: &str,
        target: Option<&str>,
        settle: SenderSettleMode,
    ) -> Result<(), CaseError> {
        let a = attach_frame(name, handle, Role::Sender, settle, None, Some(target_of(target)));
        self.perf(channel, &a).await
    }

    /// Sends attach for a receiving link (the client consumes from `source`).
    pub async fn send_attach_receiver(
        &mut self,
        channel: u16,
        handle: u32,
        name: &str,
        source: Option<&str>,
        settle: SenderSettleMode,
    ) -> Result<(), CaseError> {
        let mut s = Source::builder().build();
        s.address = source.map(str::to_owned);
        let a = attach_frame(name, handle, Role::Receiver, settle, Some(s), Some(target_of(None)));
        self.perf(channel, &a).await
    }

    /// Waits for the broker's attach answering handle `handle` on `channel`.
    pub async fn expect_attach(&mut self, channel: u16, handle: u32) -> Result<Attach, CaseError> {
        let what = format!("attach for handle {handle}");
        let a = self
            .expect(&what, WAIT, |ch, p, _| match p {
                Performative::Attach(a) if ch == channel && a.handle.0 == handle => Some(a.clone()),
                _ => None,
            })
            .await?;
        if let (Role::Sender, Some(dc)) = (&a.role, a.initial_delivery_count) {
            self.delivery_counts.insert((channel, handle), dc);
        }
        Ok(a)
    }

    /// The delivery-count of receiving link `handle` as this receiver knows it.
    pub fn delivery_count(&self, channel: u16, handle: u32) -> u32 {
        self.delivery_counts.get(&(channel, handle)).copied().unwrap_or_default()
    }

    /// Grants `credit` on receiving link `handle` (optionally draining), using the tracked
    /// delivery-count.
    pub async fn credit(&mut self, channel: u16, handle: u32, credit: u32, drain: bool) -> Result<(), CaseError> {
        let dc = self.delivery_count(channel, handle);
        self.flow(channel, handle, dc, credit, drain).await
    }

    /// Attaches a sending link and waits for its attach and first credit.
    pub async fn attach_sender(&mut self, channel: u16, handle: u32, target: Option<&str>) -> Result<(), CaseError> {
        self.send_attach_sender(channel, handle, &format!("snd-{handle}"), target, SenderSettleMode::Mixed).await?;
        let a = self.expect_attach(channel, handle).await?;
        if a.target.is_none() {
            return Err(CaseError::new(format!("sender attach refused: {a:?}")));
        }
        self.expect_flow(channel, handle).await?;
        Ok(())
    }

    /// Attaches a receiving link (no credit yet) and waits for the broker's attach.
    pub async fn attach_receiver(&mut self, channel: u16, handle: u32, source: &str) -> Result<Attach, CaseError> {
        self.send_attach_receiver(channel, handle, &format!("rcv-{handle}"), Some(source), SenderSettleMode::Unsettled)
            .await?;
        let a = self.expect_attach(channel, handle).await?;
        if a.source.is_none() {
            return Err(CaseError::new(format!("receiver attach refused: {a:?}")));
        }
        Ok(a)
    }

    /// Waits for a link flow on `handle`.
    pub async fn expect_flow(&mut self, channel: u16, handle: u32) -> Result<Flow, CaseError> {
        self.expect(&format!("flow on handle {handle}"), WAIT, |ch, p, _| match p {
            Performative::Flow(f) if ch == channel && f.handle.as_ref().map(|h| h.0) == Some(handle) => Some(f.clone()),
            _ => None,
        })
        .await
    }

    /// A link flow for a receiving link: `delivery_count` as the receiver knows it.
    pub async fn flow(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
    ) -> Result<(), CaseError> {
        let ids = self.sessions.get(&channel).copied().unwrap_or_default();
        let f = Flow {
            next_incoming_id: Some(ids.next_incoming),
            incoming_window: 5000,
            next_outgoing_id: ids.next_outgoing,
            outgoing_window: 5000,
            handle: Some(Handle(handle)),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            available: None,
            drain,
            echo: false,
            properties: None,
        };
        self.perf(channel, &f).await
    }

    /// Sends one message (split into frames of at most the broker's max-frame-size).
    pub async fn transfer(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        payload: &[u8],
    ) -> Result<(), CaseError> {
        let mut t = Transfer {
            handle: Handle(handle),
            delivery_id: Some(delivery_id),
            delivery_tag: Some(Binary::from(delivery_id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled: Some(settled),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        // Room for the frame header and a transfer performative with every field set.
        let room = self.max_frame.saturating_sub(64).max(64);
        let chunks: Vec<&[u8]> = if payload.is_empty() { vec![payload] } else { payload.chunks(room).collect() };
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.into_iter().enumerate() {
            t.more = i < last;
            let f = codec::perf(channel, &t, chunk)?;
            self.send(&f).await?;
            let ids = self.sessions.entry(channel).or_default();
            ids.next_outgoing = ids.next_outgoing.wrapping_add(1);
            if i == 0 {
                t.delivery_id = None;
                t.delivery_tag = None;
                t.message_format = None;
            }
        }
        Ok(())
    }

    /// Sends an unsettled message and waits for the broker's disposition: its state.
    pub async fn publish(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: u32,
        payload: &[u8],
    ) -> Result<Option<DeliveryState>, CaseError> {
        self.transfer(channel, handle, delivery_id, false, payload).await?;
        self.expect_disposition(channel, delivery_id).await.map(|d| d.state)
    }

    /// Waits for a disposition covering `delivery_id`.
    pub async fn expect_disposition(&mut self, channel: u16, delivery_id: u32) -> Result<Disposition, CaseError> {
        self.expect(&format!("disposition for delivery {delivery_id}"), WAIT, |ch, p, _| match p {
            Performative::Disposition(d)
                if ch == channel && d.first <= delivery_id && d.last.unwrap_or(d.first) >= delivery_id =>
            {
                Some(d.clone())
            }
            _ => None,
        })
        .await
    }

    /// Waits for a whole delivery (all its transfer frames) on `channel`.
    pub async fn recv(&mut self, channel: u16, timeout: Duration) -> Result<Delivery, CaseError> {
        let first = self
            .expect("transfer", timeout, |ch, p, payload| match p {
                Performative::Transfer(t) if ch == channel => Some((t.clone(), payload.to_vec())),
                _ => None,
            })
            .await?;
        let (transfer, mut payload) = first;
        let mut frames = 1;
        let mut more = transfer.more;
        while more {
            let (t, p) = self
                .expect("continuation transfer", WAIT, |ch, p, payload| match p {
                    Performative::Transfer(t) if ch == channel => Some((t.clone(), payload.to_vec())),
                    _ => None,
                })
                .await?;
            payload.extend_from_slice(&p);
            frames += 1;
            more = t.more;
        }
        Ok(Delivery { channel, transfer, payload, frames })
    }

    /// Fails if a transfer arrives on `channel` within `wait`.
    pub async fn no_transfer(&mut self, channel: u16, wait: Duration) -> Result<(), CaseError> {
        match self.recv(channel, wait).await {
            Ok(d) => Err(CaseError::new(format!(
                "expected no transfer, got delivery {} ({} bytes)",
                d.id(),
                d.payload.len()
            ))),
            Err(_) => Ok(()),
        }
    }

    /// Settles deliveries `first..=last` with `state` (the receiver's disposition).
    pub async fn settle(&mut self, channel: u16, first: u32, last: u32, state: DeliveryState) -> Result<(), CaseError> {
        let d = Disposition {
            role: Role::Receiver,
            first,
            last: Some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        };
        self.perf(channel, &d).await
    }

    /// Sends detach (closed) for `handle`.
    pub async fn detach(&mut self, channel: u16, handle: u32) -> Result<(), CaseError> {
        self.perf(channel, &Detach { handle: Handle(handle), closed: true, error: None }).await
    }

    /// Sends end on `channel`.
    pub async fn end(&mut self, channel: u16) -> Result<(), CaseError> {
        self.perf(channel, &End { error: None }).await
    }

    /// Waits for the broker to refuse a link: a detach of `handle`, an end or a close.
    pub async fn expect_refusal(&mut self, channel: u16, handle: u32) -> Result<Refusal, CaseError> {
        self.expect("detach, end or close", WAIT, |ch, p, _| match p {
            Performative::Detach(d) if ch == channel && d.handle.0 == handle => {
                let (c, t) = error_parts(&d.error);
                Some(Refusal::Detach(d.closed, c, t))
            }
            Performative::End(e) if ch == channel => {
                let (c, t) = error_parts(&e.error);
                Some(Refusal::End(c, t))
            }
            Performative::Close(e) => {
                let (c, t) = error_parts(&e.error);
                Some(Refusal::Close(c, t))
            }
            _ => None,
        })
        .await
    }
}

/// A target terminus with `address` (`None` = the null target).
pub fn target_of(address: Option<&str>) -> TargetArchetype {
    let mut t = Target::builder().build();
    t.address = address.map(str::to_owned);
    TargetArchetype::Target(t)
}

/// An attach performative with the fields every case varies; the rest left default.
pub fn attach_frame(
    name: &str,
    handle: u32,
    role: Role,
    settle: SenderSettleMode,
    source: Option<Source>,
    target: Option<TargetArchetype>,
) -> Attach {
    let initial_delivery_count = (role == Role::Sender).then_some(0);
    Attach {
        name: name.to_owned(),
        handle: Handle(handle),
        role,
        snd_settle_mode: settle,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: source.map(Box::new),
        target: target.map(Box::new),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A delivery state as a short string: `accepted`, `released`,
/// `rejected(amqp:not-found: no exchange ...)`, `modified(...)`, or `none`.
pub fn outcome(state: &Option<DeliveryState>) -> String {
    match state {
        None => "none".to_owned(),
        Some(DeliveryState::Accepted(_)) => "accepted".to_owned(),
        Some(DeliveryState::Released(_)) => "released".to_owned(),
        Some(DeliveryState::Rejected(r)) => match &r.error {
            None => "rejected".to_owned(),
            Some(e) => {
                let (c, d) = error_parts(&Some(e.clone()));
                format!("rejected({c}: {})", d.unwrap_or_default())
            }
        },
        Some(other) => format!("{other:?}"),
    }
}
