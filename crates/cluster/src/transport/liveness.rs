//! Which peers are up, as this node sees them: a ping to each every second over a connection
//! of its own (as Erlang's net ticks), a peer that answered within [`DOWN_AFTER`] is running.
//! A ping's answer is the peer's report ([`super::NodeDispatch`]); the last one is kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::task::{AbortHandle, JoinSet};

use super::frame::Kind;
use super::{CallError, Connection, Identity};
use crate::Peer;

const INTERVAL: Duration = Duration::from_millis(500);
/// A peer not heard from for this long is down (three missed pings; at once when its
/// address refuses the connection).
pub const DOWN_AFTER: Duration = Duration::from_secs(3);

/// When each peer answered last, and what.
type Seen = HashMap<String, (Instant, Arc<Vec<u8>>)>;

/// The peers pinged: by name, the address and the task pinging it; and the tasks.
type Pinging = (HashMap<String, (String, AbortHandle)>, JoinSet<()>);

/// The peers' last answers; the pinging tasks stop when it is dropped.
pub struct Liveness {
    identity: Identity,
    seen: Arc<Mutex<Seen>>,
    pinging: Mutex<Pinging>,
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

    /// Pings exactly `peers` (this node left out): a peer not pinged yet (a member that
    /// joined since) is from now on; one no longer listed (a member forgotten), or listed at
    /// another address, stops being pinged and is no longer running. Must run inside the
    /// runtime.
    pub fn watch(&self, peers: impl IntoIterator<Item = Peer>) {
        let peers: HashMap<String, String> =
            peers.into_iter().filter(|p| p.name != self.identity.name).map(|p| (p.name, p.address)).collect();
        let mut pinging = self.pinging.lock();
        let (known, tasks) = &mut *pinging;
        known.retain(|name, (address, task)| {
            let keep = peers.get(name) == Some(address);
            if !keep {
                task.abort();
                self.seen.lock().remove(name);
            }
            keep
        });
        // Tasks stopped before (their abort took effect since) leave the set.
        while tasks.try_join_next().is_some() {}
        for (name, address) in peers {
            if known.contains_key(&name) {
                continue;
            }
            let (seen, mut connection) =
                (Arc::clone(&self.seen), Connection::new(self.identity.clone(), address.clone()));
            let peer = name.clone();
            let task = tasks.spawn(async move {
                let mut ticks = tokio::time::interval(INTERVAL);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let mut ping = tokio::time::timeout(INTERVAL, connection.call(0, Kind::Ping, Vec::new())).await;
                    // A connection the peer's end dropped is tried again at once: a node killed
                    // since the last ping then refuses the new one, and is down now.
                    if let Ok(Err(CallError::Unreachable(e))) = &ping
                        && e.kind() != std::io::ErrorKind::ConnectionRefused
                    {
                        ping = tokio::time::timeout(INTERVAL, connection.call(0, Kind::Ping, Vec::new())).await;
                    }
                    match ping {
                        Ok(Ok(report)) => {
                            seen.lock().insert(peer.clone(), (Instant::now(), Arc::new(report)));
                        }
                        // Nothing listens there: the node is down now, not after three pings
                        // (a `kill -9`; what a failover waits for).
                        Ok(Err(CallError::Unreachable(e))) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            if let Some((at, _)) = seen.lock().get_mut(&peer) {
                                *at = Instant::now().checked_sub(DOWN_AFTER).unwrap_or(*at);
                            }
                        }
                        Ok(Err(_)) => {}
                        Err(_) => connection.reset(),
                    }
                }
            });
            known.insert(name, (address, task));
        }
    }

    /// The peers pinged, by name, in order.
    #[must_use]
    pub fn watched(&self) -> Vec<String> {
        let mut names: Vec<String> = self.pinging.lock().0.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether `name` answered a ping within [`DOWN_AFTER`].
    #[must_use]
    pub fn running(&self, name: &str) -> bool {
        self.seen.lock().get(name).is_some_and(|(at, _)| at.elapsed() < DOWN_AFTER)
    }

    /// Whether `name` answered a ping once and is down now: unlike `!running`, never true of a
    /// peer not yet pinged (this node just started), on which a failover must not act.
    #[must_use]
    pub fn down(&self, name: &str) -> bool {
        self.seen.lock().get(name).is_some_and(|(at, _)| at.elapsed() >= DOWN_AFTER)
    }

    /// What `name` answered its last ping with, while it runs.
    #[must_use]
    pub fn report(&self, name: &str) -> Option<Arc<Vec<u8>>> {
        let seen = self.seen.lock();
        seen.get(name).filter(|(at, _)| at.elapsed() < DOWN_AFTER).map(|(_, report)| Arc::clone(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, address: &str) -> Peer {
        Peer { name: name.to_owned(), address: address.to_owned() }
    }

    #[tokio::test]
    async fn it_pings_exactly_the_members_it_is_given() {
        let me = Identity {
            name: "a@h".into(),
            secret: Arc::new(b"s".to_vec()),
            address: "127.0.0.1:0".parse().unwrap(),
            tls: None,
        };
        let liveness =
            Liveness::start(&me, [peer("a@h", "127.0.0.1:1"), peer("b@h", "127.0.0.1:1"), peer("c@h", "127.0.0.1:1")]);
        assert_eq!(liveness.watched(), ["b@h", "c@h"]);
        // c forgotten; d joined; b moved.
        liveness.watch([peer("b@h", "127.0.0.1:2"), peer("d@h", "127.0.0.1:1")]);
        assert_eq!(liveness.watched(), ["b@h", "d@h"]);
        assert_eq!(liveness.pinging.lock().0["b@h"].0, "127.0.0.1:2");
        // The stopped tasks leave the set at a later call, once their abort took effect.
        let deadline = Instant::now() + Duration::from_secs(5);
        while liveness.pinging.lock().1.len() != 2 {
            assert!(Instant::now() < deadline, "stopped tasks kept");
            tokio::task::yield_now().await;
            liveness.watch([peer("b@h", "127.0.0.1:2"), peer("d@h", "127.0.0.1:1")]);
        }
        assert!(!liveness.running("c@h"));
    }
}
