//! The login policy shared by every protocol: who may log in from where, how failures are
//! logged, and how repeated failures from one address are slowed.
//!
//! Password checks stay in [`Access::authenticate`]; this policy wraps their outcome:
//! RabbitMQ's `loopback_users` (by default `guest` may only connect from the machine itself),
//! the `login refused` log line, the per-address [`Throttle`], and the user name a client
//! certificate logs in as with SASL EXTERNAL ([`CertLoginFrom`]).

mod certificate;
pub mod throttle;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

pub use certificate::{CertificateError, CertificateSubject};
pub use throttle::Throttle;

use crate::access::{Access, User};

/// Which part of a client certificate's subject SASL EXTERNAL logs in as, as RabbitMQ's
/// `ssl_cert_login_from`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CertLoginFrom {
    /// The subject's common name (RabbitMQ's `common_name`, the default here as issue 17 asks).
    #[default]
    CommonName,
    /// The whole subject as an RFC 4514 string (RabbitMQ's `distinguished_name`).
    DistinguishedName,
}

/// Login settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginConfig {
    /// Users that may only log in from a loopback address (RabbitMQ's `loopback_users`).
    pub loopback_users: Vec<String>,
    /// The certificate field SASL EXTERNAL takes the user name from.
    pub cert_login_from: CertLoginFrom,
    /// The user name and password SASL ANONYMOUS logs in with (RabbitMQ's
    /// `anonymous_login_user` and `anonymous_login_pass`); `None`: ANONYMOUS is not offered.
    pub anonymous: Option<(String, String)>,
}

impl Default for LoginConfig {
    /// RabbitMQ 4's: `guest` only from loopback, ANONYMOUS offered as `guest`/`guest` (so, by
    /// default, an anonymous login works from the machine itself only).
    fn default() -> Self {
        Self {
            loopback_users: vec!["guest".to_owned()],
            cert_login_from: CertLoginFrom::CommonName,
            anonymous: Some(("guest".to_owned(), "guest".to_owned())),
        }
    }
}

/// Who is on the other end of a connection: its address, and the subject of the client
/// certificate its TLS handshake verified, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    address: SocketAddr,
    certificate: Option<CertificateSubject>,
    /// The broker's end of the socket, when known (the management API names connections by
    /// both ends).
    local: Option<SocketAddr>,
    /// Whether the connection came over TLS.
    tls: bool,
}

impl Peer {
    /// A peer at `address`, with the subject of its verified client certificate.
    #[must_use]
    pub fn new(address: SocketAddr, certificate: Option<CertificateSubject>) -> Self {
        Self { address, certificate, local: None, tls: false }
    }

    /// This peer, connected to the broker's `local` address, over TLS or not.
    #[must_use]
    pub fn on(self, local: SocketAddr, tls: bool) -> Self {
        Self { local: Some(local), tls, ..self }
    }

    /// The broker's end of the socket (unspecified when not recorded).
    #[must_use]
    pub fn local(&self) -> SocketAddr {
        self.local.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Whether the connection came over TLS.
    #[must_use]
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The peer's address.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// RabbitMQ's connection name, `peer -> local` (`peer` alone when the local address is
    /// not known), as its logs and the management API show it.
    #[must_use]
    pub fn connection_name(&self) -> String {
        match self.local {
            Some(local) => format!("{} -> {local}", self.address),
            None => self.address.to_string(),
        }
    }

    /// The verified client certificate's subject (TLS connections only).
    #[must_use]
    pub fn certificate(&self) -> Option<&CertificateSubject> {
        self.certificate.as_ref()
    }
}

/// The broker's login policy.
#[derive(Debug, Default)]
pub struct LoginPolicy {
    config: LoginConfig,
    throttle: Throttle,
}

impl LoginPolicy {
    /// The policy for `config`, with the default throttle.
    #[must_use]
    pub fn new(config: LoginConfig) -> Self {
        Self::with_throttle(config, Throttle::default())
    }

    /// The policy for `config` with its own throttle (tests use short delays).
    #[must_use]
    pub fn with_throttle(config: LoginConfig, throttle: Throttle) -> Self {
        Self { config, throttle }
    }

    /// How long to wait before answering a login attempt from `peer`, whatever its outcome:
    /// the longer the more it failed recently. The caller sleeps that long in its own task.
    #[must_use]
    pub fn delay(&self, peer: SocketAddr) -> Duration {
        self.throttle.delay(peer.ip(), Instant::now())
    }

    /// Applies the policy to a login whose credentials checked out as `checked` (`None`: an
    /// unknown user or a wrong password): refuses a loopback-only user from elsewhere, and
    /// logs and counts every refusal against `peer`'s address.
    #[must_use]
    pub fn admit(&self, peer: SocketAddr, mechanism: &str, name: &str, checked: Option<User>) -> Option<User> {
        let Some(user) = checked else {
            self.refuse(peer, mechanism, name, "invalid credentials");
            return None;
        };
        if !is_loopback(peer.ip()) && self.config.loopback_users.iter().any(|u| u == name) {
            let reason = format!("User '{name}' can only connect via localhost");
            self.refuse(peer, mechanism, name, &reason);
            return None;
        }
        Some(user)
    }

    /// Whether SASL ANONYMOUS is offered (RabbitMQ offers it whenever its credentials are
    /// set, whether or not they log in).
    #[must_use]
    pub fn offers_anonymous(&self) -> bool {
        self.config.anonymous.is_some()
    }

    /// The user name a verified client certificate logs in as with SASL EXTERNAL.
    #[must_use]
    pub fn certificate_user<'a>(&self, subject: &'a CertificateSubject) -> Option<&'a str> {
        match self.config.cert_login_from {
            CertLoginFrom::CommonName => subject.common_name(),
            CertLoginFrom::DistinguishedName => Some(subject.distinguished_name()),
        }
    }

    /// Logs a refused login and counts it against the address.
    pub fn refuse(&self, peer: SocketAddr, mechanism: &str, name: &str, reason: &str) {
        // RabbitMQ's level and text (`Error on AMQP connection ...` then this line).
        tracing::error!(%peer, user = name, mechanism, "{mechanism} login refused: user '{name}' - {reason}");
        self.throttle.record_failure(peer.ip(), Instant::now());
    }

    /// The per-address failure table.
    #[must_use]
    pub fn throttle(&self) -> &Throttle {
        &self.throttle
    }

    /// A SASL EXTERNAL login: the user named by `peer`'s verified client certificate (as the
    /// policy's [`CertLoginFrom`] says), which must exist; refusals are logged and counted as any
    /// failed login.
    #[must_use]
    pub fn external_login(&self, access: &Access, peer: &Peer) -> Option<User> {
        let address = peer.address();
        let Some(subject) = peer.certificate() else {
            self.refuse(address, "EXTERNAL", "", "no client certificate");
            return None;
        };
        let Some(name) = self.certificate_user(subject) else {
            let reason = format!("no common name in the certificate subject '{}'", subject.distinguished_name());
            self.refuse(address, "EXTERNAL", "", &reason);
            return None;
        };
        self.admit(address, "EXTERNAL", name, access.user(name))
    }

    /// A SASL ANONYMOUS login: the configured anonymous credentials, checked as any user name
    /// and password are (RabbitMQ's `check_user_pass_login`) and then by the policy, so the
    /// default `guest` logs in only from loopback.
    #[must_use]
    pub fn anonymous_login(&self, access: &Access, peer: &Peer) -> Option<User> {
        let (name, password) = self.config.anonymous.as_ref()?;
        self.admit(peer.address(), "ANONYMOUS", name, access.authenticate(name, password))
    }
}

/// RabbitMQ's loopback test: 127.0.0.0/8 and ::1, also as IPv4-mapped IPv6.
#[must_use]
pub fn is_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn guest() -> Option<User> {
        crate::Broker::new(crate::BrokerConfig::default()).user("guest")
    }

    #[tokio::test]
    async fn guest_only_from_loopback_by_default() {
        let policy = LoginPolicy::default();
        assert!(policy.admit(addr("127.0.0.1:4000"), "PLAIN", "guest", guest()).is_some());
        assert!(policy.admit(addr("127.0.0.2:4000"), "PLAIN", "guest", guest()).is_some());
        assert!(policy.admit(addr("[::1]:4000"), "PLAIN", "guest", guest()).is_some());
        assert!(policy.admit(addr("[::ffff:127.0.0.1]:4000"), "PLAIN", "guest", guest()).is_some());
        assert_eq!(policy.throttle().len(), 0);
        assert!(policy.admit(addr("192.0.2.7:4000"), "PLAIN", "guest", guest()).is_none());
        assert!(policy.admit(addr("[2001:db8::1]:4000"), "AMQPLAIN", "guest", guest()).is_none());
        assert_eq!(policy.throttle().len(), 2, "a loopback refusal counts as a failed login");
        for _ in 0..3 {
            assert!(policy.admit(addr("192.0.2.7:4000"), "PLAIN", "guest", guest()).is_none());
        }
        let delay = policy.delay(addr("192.0.2.7:5000"));
        assert!(delay > throttle::STEP.mul_f64(0.99) && delay <= throttle::STEP, "{delay:?}");
    }

    #[tokio::test]
    async fn an_empty_loopback_list_allows_guest_anywhere() {
        let policy = LoginPolicy::new(LoginConfig { loopback_users: vec![], ..LoginConfig::default() });
        assert!(policy.admit(addr("192.0.2.7:4000"), "PLAIN", "guest", guest()).is_some());
    }

    #[test]
    fn bad_credentials_are_refused_and_slow_the_address() {
        let policy = LoginPolicy::default();
        let peer = addr("127.0.0.1:4000");
        assert_eq!(policy.delay(peer), Duration::ZERO);
        for _ in 0..5 {
            assert!(policy.admit(peer, "PLAIN", "guest", None).is_none());
        }
        let delay = policy.delay(addr("127.0.0.1:4001"));
        assert!(delay > throttle::STEP.mul_f64(1.99) && delay <= throttle::STEP * 2, "{delay:?}");
    }

    #[tokio::test]
    async fn external_logins_need_a_certificate_naming_a_user() {
        let broker = crate::Broker::new(crate::BrokerConfig::default());
        let local = addr("127.0.0.1:4000");
        let guest = CertificateSubject::new(Some("guest".into()), "CN=guest".into());
        assert_eq!(
            broker.login().external_login(broker.access(), &Peer::new(local, Some(guest.clone()))).map(|u| u.name),
            Some("guest".into())
        );
        let stranger = CertificateSubject::new(Some("stranger".into()), "CN=stranger".into());
        assert_eq!(broker.login().external_login(broker.access(), &Peer::new(local, Some(stranger))), None);
        assert_eq!(broker.login().external_login(broker.access(), &Peer::new(local, None)), None);
        assert_eq!(broker.login().throttle().len(), 1, "refusals count against the address");
        assert_eq!(
            broker.login().external_login(broker.access(), &Peer::new(addr("192.0.2.1:4000"), Some(guest))),
            None,
            "loopback_users"
        );
    }

    #[test]
    fn the_certificate_user_follows_cert_login_from() {
        let subject = CertificateSubject::new(Some("app".into()), "CN=app,O=Example".into());
        assert_eq!(LoginPolicy::default().certificate_user(&subject), Some("app"));
        let by_dn = LoginConfig { cert_login_from: CertLoginFrom::DistinguishedName, ..LoginConfig::default() };
        assert_eq!(LoginPolicy::new(by_dn).certificate_user(&subject), Some("CN=app,O=Example"));
        let without_cn = CertificateSubject::new(None, "O=Example".into());
        assert_eq!(LoginPolicy::default().certificate_user(&without_cn), None);
    }
}
