//! Which peers are up, as this node sees them: a ping to each every second over a connection
//! of its own (as Erlang's net ticks), a peer that answered within [`DOWN_AFTER`] is running.

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

/// The peers' last answers; the pinging tasks stop when it is dropped.
pub struct Liveness {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    _pinging: JoinSet<()>,
}

impl Liveness {
    /// Starts pinging every one of `peers` (this node left out) as `identity`.
    #[must_use]
    pub fn start(identity: &Identity, peers: impl IntoIterator<Item = Peer>) -> Self {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let mut pinging = JoinSet::new();
        for peer in peers.into_iter().filter(|p| p.name != identity.name) {
            let (seen, mut connection) = (Arc::clone(&seen), Connection::new(identity.clone(), peer.address));
            pinging.spawn(async move {
                let mut ticks = tokio::time::interval(INTERVAL);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let ping = connection.call(0, Kind::Ping, Vec::new());
                    match tokio::time::timeout(INTERVAL, ping).await {
                        Ok(Ok(_)) => {
                            seen.lock().insert(peer.name.clone(), Instant::now());
                        }
                        Ok(Err(_)) => {}
                        Err(_) => connection.reset(),
                    }
                }
            });
        }
        Self { seen, _pinging: pinging }
    }

    /// Whether `name` answered a ping within [`DOWN_AFTER`].
    #[must_use]
    pub fn running(&self, name: &str) -> bool {
        self.seen.lock().get(name).is_some_and(|at| at.elapsed() < DOWN_AFTER)
    }
}
