//! The open connections, by user and vhost, so that deleting a vhost or a user closes theirs,
//! as RabbitMQ's connection tracking does; and, for the management API, what each one is
//! ([`ConnectionInfo`]) and, asked on demand, what it is doing ([`ConnectionReport`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::connection_info::{ConnectionInfo, ConnectionReport};
use crate::session::{SessionEvent, SessionId, SessionSink};

/// How long a listing waits for a connection's report; one that does not answer by then (its
/// task is held up, e.g. behind a full socket) is listed without it.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// One tracked connection.
#[derive(Debug)]
struct Tracked {
    user: String,
    vhost: String,
    sink: SessionSink,
    /// Set once the connection finished its handshake ([`Registration::describe`]).
    info: Option<Arc<ConnectionInfo>>,
}

/// Every connection that opened a vhost.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<HashMap<SessionId, Tracked>>,
}

/// A connection's entry; dropping it (the connection ends) forgets the connection.
#[derive(Debug)]
pub struct Registration {
    connections: Weak<Connections>,
    id: SessionId,
}

impl Registration {
    /// Records what the connection is, for the management API (once its handshake is done).
    pub fn describe(&self, info: ConnectionInfo) {
        if let Some(connections) = self.connections.upgrade()
            && let Some(tracked) = connections.open.lock().get_mut(&self.id)
        {
            tracked.info = Some(Arc::new(info));
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(connections) = self.connections.upgrade() {
            connections.open.lock().remove(&self.id);
        }
    }
}

/// A described connection as a listing sees it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The connection's id.
    pub id: SessionId,
    /// What it is.
    pub info: Arc<ConnectionInfo>,
    sink: SessionSink,
}

/// RabbitMQ 4.0.5's line for a connection that ends, over either protocol: its name, the user
/// and vhost once it opened one (`opened`), and how long it lasted.
pub fn log_closing(name: &str, opened: Option<(&str, &str)>, lasted: Duration) {
    let duration = lasted.as_millis();
    match opened {
        Some((user, vhost)) => tracing::info!(
            "closing AMQP connection ({name}, vhost: '{vhost}', user: '{user}', duration: '{duration}ms')"
        ),
        None => tracing::info!("closing AMQP connection ({name}, duration: '{duration}ms')"),
    }
}

impl Connections {
    /// Tracks the connection behind `sink`, of `user` on `vhost`.
    #[must_use]
    pub fn register(self: &Arc<Self>, sink: &SessionSink, user: &str, vhost: &str) -> Registration {
        let tracked = Tracked { user: user.to_owned(), vhost: vhost.to_owned(), sink: sink.clone(), info: None };
        self.open.lock().insert(sink.id, tracked);
        Registration { connections: Arc::downgrade(self), id: sink.id }
    }

    /// How many connections are open.
    #[must_use]
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The described connections (those past their handshake), oldest first.
    #[must_use]
    pub fn list(&self) -> Vec<Listed> {
        let mut listed: Vec<Listed> = self
            .open
            .lock()
            .iter()
            .filter_map(|(id, t)| {
                t.info.as_ref().map(|info| Listed { id: *id, info: Arc::clone(info), sink: t.sink.clone() })
            })
            .collect();
        listed.sort_by_key(|l| (l.info.connected_at, l.id));
        listed
    }

    /// The connection RabbitMQ names `name` (see [`ConnectionInfo::name`]).
    #[must_use]
    pub fn find(&self, name: &str) -> Option<Listed> {
        self.list().into_iter().find(|l| l.info.name() == name)
    }

    /// Reports of `listed`, asked of all of them at once. A connection that ended meanwhile
    /// is left out; one that does not answer within [`REPORT_TIMEOUT`] comes with `None`.
    pub async fn reports(listed: Vec<Listed>) -> Vec<(Listed, Option<ConnectionReport>)> {
        let pending: Vec<(Listed, oneshot::Receiver<ConnectionReport>)> = listed
            .into_iter()
            .map(|l| {
                let (reply, answer) = oneshot::channel();
                l.sink.send(SessionEvent::Report(reply));
                (l, answer)
            })
            .collect();
        let deadline = tokio::time::Instant::now() + REPORT_TIMEOUT;
        let mut reports = Vec::with_capacity(pending.len());
        for (listed, answer) in pending {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(report)) => reports.push((listed, Some(report))),
                Ok(Err(_)) => {}
                Err(_) => reports.push((listed, None)),
            }
        }
        reports
    }

    /// Asks the connection `id` to close, forced, with `reason`; false if it is not open.
    pub fn close(&self, id: SessionId, reason: &str) -> bool {
        let open = self.open.lock();
        let Some(tracked) = open.get(&id) else {
            return false;
        };
        tracked.sink.send(SessionEvent::ForceClose { reason: reason.to_owned() });
        tracing::info!(reason, "closing connection");
        true
    }

    /// Asks every connection `selected(user, vhost)` picks to close, forced, with `reason`
    /// (see [`SessionEvent::ForceClose`]); returns how many.
    pub fn close_where(&self, selected: impl Fn(&str, &str) -> bool, reason: &str) -> usize {
        let open = self.open.lock();
        let mut closed = 0;
        for tracked in open.values().filter(|t| selected(&t.user, &t.vhost)) {
            tracked.sink.send(SessionEvent::ForceClose { reason: reason.to_owned() });
            closed += 1;
        }
        if closed > 0 {
            tracing::info!(closed, reason, "closing connections");
        }
        closed
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use charon_model::Table;

    use super::*;
    use crate::connection_info::ChannelReport;

    fn info(port: u16, connected_at: i64) -> ConnectionInfo {
        ConnectionInfo {
            protocol: "AMQP 0-9-1",
            user: "ann".into(),
            vhost: "dev".into(),
            auth_mechanism: "PLAIN".into(),
            local: "127.0.0.1:5672".parse().unwrap(),
            peer: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            ssl: false,
            connected_at,
            client_properties: Table::new(),
            timeout: 60,
            frame_max: 131_072,
            channel_max: 2047,
        }
    }

    #[test]
    fn the_selected_connections_are_told_and_dropped_entries_forgotten() {
        let connections = Arc::new(Connections::default());
        let (a, mut a_rx) = SessionSink::new(1, 8);
        let (b, mut b_rx) = SessionSink::new(2, 8);
        let kept_a = connections.register(&a, "ann", "dev");
        let kept_b = connections.register(&b, "bob", "/");
        assert_eq!(connections.close_where(|_, vhost| vhost == "dev", "vhost 'dev' is deleted"), 1);
        assert!(
            matches!(a_rx.try_recv(), Ok(SessionEvent::ForceClose { reason }) if reason == "vhost 'dev' is deleted")
        );
        assert!(b_rx.try_recv().is_err());
        drop(kept_a);
        assert_eq!(connections.len(), 1);
        assert_eq!(connections.close_where(|user, _| user == "ann", "user 'ann' is deleted"), 0);
        drop(kept_b);
        assert!(connections.is_empty());
    }

    #[test]
    fn only_described_connections_are_listed_oldest_first_and_found_by_name() {
        let connections = Arc::new(Connections::default());
        let (a, _a_rx) = SessionSink::new(1, 8);
        let (b, _b_rx) = SessionSink::new(2, 8);
        let (c, _c_rx) = SessionSink::new(3, 8);
        let ra = connections.register(&a, "ann", "dev");
        let rb = connections.register(&b, "ann", "dev");
        let _rc = connections.register(&c, "ann", "dev");
        ra.describe(info(4001, 20));
        rb.describe(info(4002, 10));
        let names: Vec<String> = connections.list().iter().map(|l| l.info.name()).collect();
        assert_eq!(names, ["127.0.0.1:4002 -> 127.0.0.1:5672", "127.0.0.1:4001 -> 127.0.0.1:5672"]);
        assert_eq!(connections.find("127.0.0.1:4001 -> 127.0.0.1:5672").map(|l| l.id), Some(1));
        assert!(connections.find("127.0.0.1:9 -> 127.0.0.1:5672").is_none());
        drop(ra);
        assert_eq!(connections.list().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn reports_come_from_the_connections_and_ended_ones_are_left_out() {
        let connections = Arc::new(Connections::default());
        let (a, mut a_rx) = SessionSink::new(1, 8);
        let (b, b_rx) = SessionSink::new(2, 8);
        let ra = connections.register(&a, "ann", "dev");
        let rb = connections.register(&b, "ann", "dev");
        let (c, _c_rx) = SessionSink::new(3, 8);
        let rc = connections.register(&c, "ann", "dev");
        ra.describe(info(4001, 1));
        rb.describe(info(4002, 2));
        rc.describe(info(4003, 3));
        // b ended; c is alive but never answers.
        drop(b_rx);
        let answering = tokio::spawn(async move {
            if let Some(SessionEvent::Report(reply)) = a_rx.recv().await {
                let channel = ChannelReport { number: 1, prefetch_count: 7, ..ChannelReport::default() };
                let _ = reply.send(ConnectionReport { state: "running", channels: vec![channel] });
            }
        });
        let reports = Connections::reports(connections.list()).await;
        answering.await.unwrap();
        assert_eq!(reports.len(), 2);
        assert_eq!((reports[1].0.id, reports[1].1.is_none()), (3, true), "a silent connection is listed without");
        let (listed, report) = &reports[0];
        let report = report.as_ref().unwrap();
        assert_eq!((listed.id, report.state, report.channels[0].prefetch_count), (1, "running", 7));
        assert!(connections.close(1, "Closed via management plugin"));
        assert!(!connections.close(9, "nobody"));
    }
}
