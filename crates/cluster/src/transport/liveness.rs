//! Which peers are up, as this node sees them: a ping to each every second over a connection
//! of its own (as Erlang's net ticks), a peer that answered within [`DOWN_AFTER`] is running.
//! A ping's answer is the peer's report ([`super::NodeDispatch`]); the last one is kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::task::JoinSet;

use super::frame::Kind;
use super::{Connection, Identity};
use crate::Peer;

const INTERVAL: Duration = Duration::from_secs(1);
/// A peer not heard from for this long is down (three missed pings).
pub const DOWN_AFTER: Duration = Duration::from_secs(3);

/// When each peer answered last, and what.
type Seen = HashMap<String, (Instant, Arc<Vec<u8>>)>;

/// The peers' last answers; the pinging tasks stop when it is dropped.
pub struct Liveness {
    identity: Identity,
    seen: Arc<Mutex<Seen>>,
    /// The peers pinged, by name, and their tasks.
    pinging: Mutex<(HashMap<String, String>, JoinSet<()>)>,
}

impl Liveness {
    /// Starts pinging every one of `peers` (this node left out) as `identity`.
    #[must_use]
    pub fn start(identity: &Identity, peers: impl IntoIterator<Item = Peer>) -> Self {
        let liveness = Self {
            identity: identity.clone(),
            seen: Arc::new(Mutex::new(HashMap::new())),
            pinging: Mutex::new((HashMap::new(), JoinSet::new())),
        };
        liveness.watch(peers);
        liveness
    }

    /// Pings the peers of `peers` not pinged yet (members that joined since). Must run inside
    /// the runtime.
    pub fn watch(&self, peers: impl IntoIterator<Item = Peer>) {
        let mut pinging = self.pinging.lock();
        let (known, tasks) = &mut *pinging;
        for peer in peers {
            if peer.name == self.identity.name || known.get(&peer.name) == Some(&peer.address) {
                continue;
            }
            known.insert(peer.name.clone(), peer.address.clone());
            let (seen, mut connection) = (Arc::clone(&self.seen), Connection::new(self.identity.clone(), peer.address));
            tasks.spawn(async move {
                let mut ticks = tokio::time::interval(INTERVAL);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let ping = connection.call(0, Kind::Ping, Vec::new());
                    match tokio::time::timeout(INTERVAL, ping).await {
                        Ok(Ok(report)) => {
                            seen.lock().insert(peer.name.clone(), (Instant::now(), Arc::new(report)));
                        }
                        Ok(Err(_)) => {}
                        Err(_) => connection.reset(),
                    }
                }
            });
        }
    }

    /// Whether `name` answered a ping within [`DOWN_AFTER`].
    #[must_use]
    pub fn running(&self, name: &str) -> bool {
        self.seen.lock().get(name).is_some_and(|(at, _)| at.elapsed() < DOWN_AFTER)
    }

    /// What `name` answered its last ping with, while it runs.
    #[must_use]
    pub fn report(&self, name: &str) -> Option<Arc<Vec<u8>>> {
        let seen = self.seen.lock();
        seen.get(name).filter(|(at, _)| at.elapsed() < DOWN_AFTER).map(|(_, report)| Arc::clone(report))
    }
}
