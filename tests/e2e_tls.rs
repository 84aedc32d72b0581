//! amqps, HTTPS, SASL EXTERNAL and the failed-login throttle against the real binary, with
//! certificates made for each test (a CA, a server certificate for localhost/127.0.0.1, client
//! certificates whose CN names a user).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::{Connection as Amqp10Connection, Receiver, Sender, Session};
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The PEM files of one test's PKI.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "Charon test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", ca.pem());
        let server_key = KeyPair::generate().unwrap();
        let mut server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        write("server.pem", server.signed_by(&server_key, &issuer).unwrap().pem());
        write("server.key", server_key.serialize_pem());
        for (file, cn) in [("guest", "guest"), ("nobody", "nobody")] {
            let key = KeyPair::generate().unwrap();
            let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
            // Subject O=Charon tests, CN=<user> in that order: RFC 4514 `CN=<user>,O=Charon tests`.
            client.distinguished_name = rcgen::DistinguishedName::new();
            client.distinguished_name.push(DnType::OrganizationName, "Charon tests");
            client.distinguished_name.push(DnType::CommonName, cn);
            client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            write(&format!("{file}.pem"), client.signed_by(&key, &issuer).unwrap().pem());
            write(&format!("{file}.key"), key.serialize_pem());
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// Flags for amqps and HTTPS on ephemeral ports, verifying client certificates.
    fn flags(&self, fail_if_no_peer_cert: bool) -> Vec<String> {
        let mut flags: Vec<String> = [
            "--tls-cert",
            &self.arg("server.pem"),
            "--tls-key",
            &self.arg("server.key"),
            "--tls-ca",
            &self.arg("ca.pem"),
            "--tls-verify-peer",
            "true",
            "--tls-listen",
            "127.0.0.1:0",
            "--https-listen",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if fail_if_no_peer_cert {
            flags.extend(["--tls-fail-if-no-peer-cert".to_owned(), "true".to_owned()]);
        }
        flags
    }

    /// A rustls client trusting the test CA, with the client certificate `client` if given.
    fn connector(&self, client: Option<&str>) -> TlsConnector {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.path("ca.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_file_iter(self.path(&format!("{name}.pem")))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{name}.key"))).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
        };
        TlsConnector::from(Arc::new(config))
    }
}

fn start(pki: &Pki, fail_if_no_peer_cert: bool, extra: &[&str]) -> support::Charon {
    let flags = pki.flags(fail_if_no_peer_cert);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    support::Charon::start_with(&args)
}

async fn tls_connect(
    connector: &TlsConnector,
    port: u16,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await
}

/// Reads until EOF, an error or `limit` bytes.
async fn read_some<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, limit: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < limit {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_publishes_and_gets_over_amqps_and_plain_tcp_still_works() {
    let pki = Pki::new();
    let charon = start(&pki, false, &[]);
    let port = charon.amqps_port.expect("amqps port");
    // A plain-AMQP client on the amqps port fails its handshake: only it is dropped.
    let mut confused = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    confused.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let got = read_some(&mut confused, 64).await;
    assert!(!got.starts_with(b"\x01\x00\x00"), "no connection.start in clear text: {got:?}");
    let tls = lapin::tcp::OwnedTLSConfig {
        identity: None,
        cert_chain: Some(std::fs::read_to_string(pki.path("ca.pem")).unwrap()),
    };
    let url = format!("amqps://guest:guest@localhost:{port}/%2f");
    let connection = Connection::connect_with_config(
        &url,
        ConnectionProperties::default(),
        tls,
        lapin::runtime::default_runtime().unwrap(),
    )
    .await
    .expect("amqps connect");
    let channel = connection.create_channel().await.unwrap();
    let queue = channel.queue_declare("tls-q".into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    queue.unwrap();
    // Larger than one TLS record and one frame.
    let body = vec![7u8; 300_000];
    channel
        .basic_publish("".into(), "tls-q".into(), BasicPublishOptions::default(), &body, BasicProperties::default())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut got = None;
    for _ in 0..50 {
        got = channel.basic_get("tls-q".into(), BasicGetOptions { no_ack: true }).await.unwrap();
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got.expect("message back").delivery.data, body);
    let plain = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("plain amqp");
    // The management API tells the two apart by `ssl` and the broker's port.
    let base = format!("http://127.0.0.1:{}", charon.http_port);
    let listed = conformance::admin::request(&base, "GET", "/api/connections", ("guest", "guest"), None).await.unwrap();
    let listed: serde_json::Value = serde_json::from_str(&listed.body).unwrap();
    let mut seen: Vec<(u64, bool)> =
        listed.as_array().unwrap().iter().map(|c| (c["port"].as_u64().unwrap(), c["ssl"].as_bool().unwrap())).collect();
    seen.sort_unstable();
    let mut expected = vec![(u64::from(charon.port), false), (u64::from(port), true)];
    expected.sort_unstable();
    assert_eq!(seen, expected);
    plain.close(200, "bye".into()).await.unwrap();
    connection.close(200, "bye".into()).await.unwrap();
}

/// fe2o3-amqp over amqps (TLS first, as RabbitMQ's 5671), with PLAIN and with SASL EXTERNAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fe2o3_over_amqps_with_plain_and_with_external() {
    let pki = Pki::new();
    let charon = start(&pki, false, &[]);
    let port = charon.amqps_port.expect("amqps port");
    // RabbitMQ 4's /queues/ addresses need the queue to exist.
    let plain = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let channel = plain.create_channel().await.unwrap();
    channel.queue_declare("tls10".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    for (profile, client) in [
        (SaslProfile::Plain { username: "guest".into(), password: "guest".into() }, None),
        (SaslProfile::External, Some("guest")),
    ] {
        let mut builder = Amqp10Connection::builder()
            .container_id("tls-test")
            .hostname("vhost:/")
            .domain("localhost")
            .sasl_profile(profile)
            .tls_connector(pki.connector(client));
        builder.alt_tls_estab = true;
        let mut connection = builder.open(format!("amqps://localhost:{port}").as_str()).await.expect("amqps open");
        let mut session = Session::begin(&mut connection).await.unwrap();
        let mut sender = Sender::attach(&mut session, "s", "/queues/tls10").await.unwrap();
        let mut receiver = Receiver::attach(&mut session, "r", "/queues/tls10").await.unwrap();
        sender.send("over tls").await.unwrap().accepted_or("rejected").unwrap();
        let delivery = tokio::time::timeout(Duration::from_secs(5), receiver.recv::<String>()).await.unwrap().unwrap();
        assert_eq!(delivery.body(), "over tls");
        receiver.accept(&delivery).await.unwrap();
        sender.close().await.unwrap();
        receiver.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
    }
}

/// SASL EXTERNAL at the frame level on 1.0: offered only with a certificate, and a certificate
/// naming no user is refused with the `auth` outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp10_external_is_offered_with_a_certificate_and_needs_a_known_user() {
    let pki = Pki::new();
    let charon = start(&pki, false, &[]);
    let port = charon.amqps_port.expect("amqps port");
    let offer = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains("EXTERNAL");
    let mut anonymous = tls_connect(&pki.connector(None), port).await.unwrap();
    anonymous.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
    assert!(!offer(&read_some(&mut anonymous, 40).await), "EXTERNAL offered without a certificate");
    // CN=nobody names no user: sasl-outcome code 1 (auth), after RabbitMQ's 3 s delay.
    assert_eq!(external_10(&pki, port, "nobody").await, Some(1));
    assert_eq!(external_10(&pki, port, "guest").await, Some(0));
}

/// SASL EXTERNAL over 1.0 at the frame level with the client certificate `client`: the
/// sasl-outcome code.
async fn external_10(pki: &Pki, port: u16, client: &str) -> Option<u8> {
    let mut stream = tls_connect(&pki.connector(Some(client)), port).await.unwrap();
    stream.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
    let offer = read_some(&mut stream, 40).await;
    assert!(String::from_utf8_lossy(&offer).contains("EXTERNAL"), "{offer:?}");
    // sasl-init: mechanism EXTERNAL, empty initial response.
    let init: &[u8] = b"\x00\x53\x41\xc0\x0d\x02\xa3\x08EXTERNAL\xa0\x00";
    let mut frame = u32::try_from(8 + init.len()).unwrap().to_be_bytes().to_vec();
    frame.extend_from_slice(&[2, 1, 0, 0]);
    frame.extend_from_slice(init);
    stream.write_all(&frame).await.unwrap();
    let outcome = read_some(&mut stream, 64).await;
    let at = outcome.windows(2).position(|w| w == [0x53, 0x44]).expect("a sasl-outcome");
    outcome[at + 2..].windows(2).take(4).find(|w| w[0] == 0x50).map(|w| w[1])
}

/// `ssl_cert_login_from = distinguished_name`: the user is the certificate's RFC 4514 subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_can_log_in_as_the_distinguished_name() {
    let pki = Pki::new();
    let charon = start(
        &pki,
        false,
        &["--ssl-cert-login-from", "distinguished_name", "--user", "CN=guest,O=Charon tests:unused"],
    );
    let port = charon.amqps_port.expect("amqps port");
    assert_eq!(external_10(&pki, port, "guest").await, Some(0));
    assert_eq!(external_10(&pki, port, "nobody").await, Some(1));
}

#[test]
fn pika_over_amqps_with_plain_and_with_external() {
    let python = std::env::var("CHARON_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| support::workspace_root().join(".venv/bin/python"));
    assert!(python.exists(), "{} is missing: run scripts/test.sh or set CHARON_PYTHON", python.display());
    let pki = Pki::new();
    let charon = start(&pki, false, &[]);
    let script = support::workspace_root().join("tests/python/pika_tls.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(charon.amqps_port.expect("amqps port").to_string())
        .args([pki.path("ca.pem"), pki.path("guest.pem"), pki.path("guest.key")])
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "pika_tls.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("pika tls ok"), "{stdout}");
}

/// `fail_if_no_peer_cert`: a client without a certificate gets no AMQP at all; one with a
/// certificate does, and the failed handshake did not disturb it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused_when_fail_if_no_peer_cert() {
    let pki = Pki::new();
    let charon = start(&pki, true, &[]);
    let port = charon.amqps_port.expect("amqps port");
    let with_cert = pki.connector(Some("guest"));
    let mut good = tls_connect(&with_cert, port).await.unwrap();
    // TLS 1.3: the client's handshake can finish before the server checks it.
    if let Ok(mut refused) = tls_connect(&pki.connector(None), port).await {
        let _ = refused.write_all(b"AMQP\x00\x00\x09\x01").await;
        let got = read_some(&mut refused, 8).await;
        assert!(got.is_empty(), "a client without a certificate got {got:?}");
    }
    good.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let start = read_some(&mut good, 400).await;
    assert_eq!(start.first(), Some(&1), "connection.start is a method frame: {start:?}");
    let text = String::from_utf8_lossy(&start).into_owned();
    assert!(text.contains("PLAIN AMQPLAIN EXTERNAL"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_the_management_api_with_basic_auth() {
    let pki = Pki::new();
    let charon = start(&pki, false, &[]);
    let port = charon.https_port.expect("https port");
    let get = |authorization: &'static str| {
        let connector = pki.connector(None);
        async move {
            let mut stream = tls_connect(&connector, port).await.unwrap();
            let request = format!(
                "GET /api/queues HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {authorization}\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&read_some(&mut stream, 1 << 20).await).into_owned()
        }
    };
    let ok = get("Z3Vlc3Q6Z3Vlc3Q=").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("amq.charon.dead-letters"), "{ok}");
    let refused = get("Z3Vlc3Q6YmFk").await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
}

/// Each failed login makes the next attempt from the address wait longer, a successful one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_slow_the_next_attempts_from_that_address() {
    let charon = support::Charon::start();
    let bad = format!("amqp://guest:wrong@127.0.0.1:{}/%2f", charon.port);
    let first = Instant::now();
    assert!(Connection::connect(&bad, ConnectionProperties::default()).await.is_err());
    let first = first.elapsed();
    for _ in 0..7 {
        assert!(Connection::connect(&bad, ConnectionProperties::default()).await.is_err());
    }
    // Eight recent failures, three of them free: 5 x 250 ms before any answer, minus a little
    // decay (60 s half-life).
    let started = Instant::now();
    let good = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("good login");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1100), "the good login after 8 failures waited only {waited:?}");
    assert!(first < Duration::from_millis(1100), "the first failure was already slow: {first:?}");
    good.close(200, "bye".into()).await.unwrap();
}

#[test]
fn bad_certificate_files_stop_the_start_with_a_clear_error() {
    let pki = Pki::new();
    std::fs::write(pki.path("server.key"), "not a key").unwrap();
    let data = tempfile::tempdir().unwrap();
    let flags = pki.flags(false);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Err(stderr) = support::Charon::try_start_on(data.path(), &args) else { panic!("started with a bad key") };
    assert!(stderr.contains("reading the private key (PEM) from"), "{stderr}");
    assert!(stderr.contains(&pki.arg("server.key")), "{stderr}");
}
