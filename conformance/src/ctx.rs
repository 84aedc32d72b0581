//! The per-case context: unique resource names, client connections and cleanup tracking.

use crate::{broker::Broker, case::Variant, error::CaseError};
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

/// Everything a case needs from the runner.
///
/// Cheap to clone (an `Arc`). Names handed out by [`Ctx::queue`] and [`Ctx::exchange`] are
/// unique per run and per case, so cases can run concurrently and repeatedly, and they are
/// remembered: the runner deletes them after the case, whether it passed, failed or timed out.
#[derive(Clone, Debug)]
pub struct Ctx {
    inner: Arc<Inner>,
}

struct Inner {
    broker: Broker,
    case_name: String,
    case_index: usize,
    run_id: String,
    variant: Variant,
    counter: AtomicUsize,
    queues: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<String>>,
    policies: Mutex<Vec<String>>,
    operator_policies: Mutex<Vec<String>>,
    users: Mutex<Vec<String>>,
    amqprs: Mutex<Vec<amqprs::connection::Connection>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("case", &self.case_name)
            .field("run_id", &self.run_id)
            .field("variant", &self.variant)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// Creates a context for one run of one case.
    ///
    /// `case_index` must differ between the cases of one run (it keeps names unique).
    pub fn new(broker: Broker, case_name: &str, case_index: usize, run_id: &str, variant: Variant) -> Self {
        Self {
            inner: Arc::new(Inner {
                broker,
                case_name: case_name.to_owned(),
                case_index,
                run_id: run_id.to_owned(),
                variant,
                counter: AtomicUsize::new(0),
                queues: Mutex::new(Vec::new()),
                exchanges: Mutex::new(Vec::new()),
                policies: Mutex::new(Vec::new()),
                operator_policies: Mutex::new(Vec::new()),
                users: Mutex::new(Vec::new()),
                amqprs: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The broker under test.
    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    /// The protocol combination this run of the case uses.
    pub fn variant(&self) -> Variant {
        self.inner.variant
    }

    /// The case's name (without variant suffix).
    pub fn case_name(&self) -> &str {
        &self.inner.case_name
    }

    /// A name unique to this run and case, not tracked for cleanup (consumer tags etc.).
    pub fn name(&self, what: &str) -> String {
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        // Short on purpose: RabbitMQ cuts reply texts at 255 bytes, and the error cases compare
        // whole texts that embed these names. The run id and the case's last name component keep
        // names traceable in the management UI; the case index keeps them unique within a run.
        let behaviour = self.inner.case_name.rsplit('.').next().unwrap_or_default();
        let behaviour = behaviour.get(..behaviour.len().min(16)).unwrap_or(behaviour);
        format!("cf-{}-{}{}-{what}{n}", self.inner.run_id, behaviour, self.inner.case_index)
    }

    /// A unique queue name; the runner deletes the queue after the case.
    pub fn queue(&self, what: &str) -> String {
        let name = self.name(what);
        self.track_queue(&name);
        name
    }

    /// A unique exchange name; the runner deletes the exchange after the case.
    pub fn exchange(&self, what: &str) -> String {
        let name = self.name(what);
        if let Ok(mut v) = self.inner.exchanges.lock() {
            v.push(name.clone());
        }
        name
    }

    /// Registers a queue created under another name (e.g. server-named) for cleanup.
    pub fn track_queue(&self, name: &str) {
        if let Ok(mut v) = self.inner.queues.lock() {
            v.push(name.to_owned());
        }
    }

    /// Registers a policy for deletion after the case.
    pub fn track_policy(&self, name: &str) {
        if let Ok(mut v) = self.inner.policies.lock() {
            v.push(name.to_owned());
        }
    }

    /// Registers an operator policy (of the case's vhost) for deletion after the case.
    pub fn track_operator_policy(&self, name: &str) {
        if let Ok(mut v) = self.inner.operator_policies.lock() {
            v.push(name.to_owned());
        }
    }

    /// Operator policies to delete after the case.
    pub fn tracked_operator_policies(&self) -> Vec<String> {
        self.inner.operator_policies.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Registers a user for deletion after the case.
    pub fn track_user(&self, name: &str) {
        if let Ok(mut v) = self.inner.users.lock() {
            v.push(name.to_owned());
        }
    }

    /// Users to delete after the case.
    pub fn tracked_users(&self) -> Vec<String> {
        self.inner.users.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Policies to delete after the case.
    pub fn tracked_policies(&self) -> Vec<String> {
        self.inner.policies.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Queues to delete after the case.
    pub fn tracked_queues(&self) -> Vec<String> {
        self.inner.queues.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Exchanges to delete after the case.
    pub fn tracked_exchanges(&self) -> Vec<String> {
        self.inner.exchanges.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Opens a lapin connection to the broker (closed when dropped).
    pub async fn lapin(&self) -> Result<lapin::Connection, CaseError> {
        let props = lapin::ConnectionProperties::default().with_connection_name(self.inner.case_name.clone().into());
        // lapin reads `amqp://host/` as the empty vhost (per the URI spec); spell it out.
        let url = self.inner.broker.url_with_vhost(&self.inner.broker.vhost);
        lapin::Connection::connect(&url, props).await.map_err(|e| CaseError::from(e).context("lapin connect"))
    }

    /// Opens a lapin connection and one channel on it.
    pub async fn lapin_channel(&self) -> Result<(lapin::Connection, lapin::Channel), CaseError> {
        let conn = self.lapin().await?;
        let ch = conn.create_channel().await.map_err(|e| CaseError::from(e).context("lapin create_channel"))?;
        Ok((conn, ch))
    }

    /// Opens an amqprs connection; the runner closes it after the case.
    pub async fn amqprs(&self) -> Result<amqprs::connection::Connection, CaseError> {
        let b = &self.inner.broker;
        let args = amqprs::connection::OpenConnectionArguments::new(&b.host, b.port, &b.user, &b.password)
            .virtual_host(&b.vhost)
            .connection_name(&self.inner.case_name)
            .finish();
        let conn = amqprs::connection::Connection::open(&args)
            .await
            .map_err(|e| CaseError::from(e).context("amqprs connect"))?;
        if let Ok(mut v) = self.inner.amqprs.lock() {
            v.push(conn.clone());
        }
        Ok(conn)
    }

    /// Takes the amqprs connections opened by the case so the runner can close them.
    pub fn take_amqprs_connections(&self) -> Vec<amqprs::connection::Connection> {
        self.inner.amqprs.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default()
    }
}
