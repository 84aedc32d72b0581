//! The driver around a line protocol over a real socket pair.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::{AlarmStep, Protocol, drive};

/// What the line protocol saw, for the assertions.
#[derive(Debug, Default)]
struct Seen {
    input_calls: usize,
    refeeds: usize,
    timeouts: usize,
    finished: bool,
}

/// Echoes each complete line upper-cased; `quit` closes. While the alarm is on it stops at a
/// line starting with `pub` and reads no more, as a held publisher. `DEFER`: its
/// [`Protocol::DEFERS_ACKS`].
struct Lines<const DEFER: bool = false> {
    out: BytesMut,
    closed: bool,
    held: bool,
    stopped: bool,
    events: mpsc::UnboundedReceiver<String>,
    deadline: Option<Instant>,
    seen: Arc<Mutex<Seen>>,
}

impl<const DEFER: bool> Lines<DEFER> {
    fn new(events: mpsc::UnboundedReceiver<String>, seen: Arc<Mutex<Seen>>) -> Self {
        Self { out: BytesMut::new(), closed: false, held: false, stopped: false, events, deadline: None, seen }
    }

    fn feed(&mut self, input: &mut BytesMut) {
        while let Some(end) = input.iter().position(|b| *b == b'\n') {
            if self.held && input.starts_with(b"pub") {
                self.stopped = true;
                return;
            }
            let line = input.split_to(end + 1);
            if line.as_ref() == b"quit\n" {
                self.out.extend_from_slice(b"BYE\n");
                self.closed = true;
                input.clear();
                return;
            }
            self.out.extend_from_slice(&line.to_ascii_uppercase());
        }
    }
}

impl<const DEFER: bool> Protocol for Lines<DEFER> {
    type Alarm = bool;
    const DEFERS_ACKS: bool = DEFER;

    async fn on_input(&mut self, input: &mut BytesMut, _now: Instant) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.input_calls += 1;
        }
        self.feed(input);
    }

    async fn act(&mut self) {}

    fn on_alarm(&mut self, alarm: &bool, now: Instant) -> AlarmStep {
        self.held = *alarm;
        if self.stopped && !self.held {
            self.stopped = false;
            if let Ok(mut seen) = self.seen.lock() {
                seen.refeeds += 1;
            }
            self.deadline = Some(now);
            return AlarmStep::Refeed;
        }
        AlarmStep::Wait
    }

    async fn engine_events(&mut self) -> bool {
        match self.events.recv().await {
            Some(text) => {
                self.out.extend_from_slice(text.as_bytes());
                true
            }
            None => false,
        }
    }

    fn reading(&self) -> bool {
        !self.stopped
    }

    fn output(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    fn on_written(&mut self, _now: Instant) {}

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn on_timeout(&mut self, _now: Instant) {
        self.deadline = None;
        self.out.extend_from_slice(b"TICK\n");
        if let Ok(mut seen) = self.seen.lock() {
            seen.timeouts += 1;
        }
    }

    fn on_shutdown(&mut self, _now: Instant) {
        self.out.extend_from_slice(b"SHUTDOWN\n");
        self.closed = true;
    }

    fn is_closed(&self) -> bool {
        self.closed
    }

    async fn finish(&mut self) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.finished = true;
        }
    }
}

struct Running {
    client: TcpStream,
    task: tokio::task::JoinHandle<()>,
    events: mpsc::UnboundedSender<String>,
    alarm: watch::Sender<bool>,
    shutdown: watch::Sender<bool>,
    seen: Arc<Mutex<Seen>>,
}

async fn start() -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let (events, inbox) = mpsc::unbounded_channel();
    let (alarm, alarms) = watch::channel(false);
    let (shutdown, stop) = watch::channel(false);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let protocol = Lines::<false>::new(inbox, Arc::clone(&seen));
    let task = tokio::spawn(drive(server, protocol, alarms, stop));
    Running { client, task, events, alarm, shutdown, seen }
}

/// Reads until `want` bytes arrived.
async fn read_exactly(client: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = vec![0; want];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
    got
}

#[tokio::test]
async fn a_pipelined_batch_is_one_input_call_and_the_socket_closes_after_the_last_bytes() {
    let mut run = start().await;
    run.client.write_all(b"one\ntwo\nthr").await.unwrap();
    assert_eq!(read_exactly(&mut run.client, 8).await, b"ONE\nTWO\n");
    run.client.write_all(b"ee\nquit\n").await.unwrap();
    assert_eq!(read_exactly(&mut run.client, 10).await, b"THREE\nBYE\n");
    let mut rest = Vec::new();
    run.client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    tokio::time::timeout(Duration::from_secs(5), run.task).await.unwrap().unwrap();
    let seen = run.seen.lock().unwrap();
    assert!(seen.finished);
    assert!(seen.input_calls <= 3, "{} input calls for two writes", seen.input_calls);
}

#[tokio::test]
async fn engine_events_and_timers_write_output() {
    let mut run = start().await;
    run.events.send("DELIVERY\n".to_owned()).unwrap();
    assert_eq!(read_exactly(&mut run.client, 9).await, b"DELIVERY\n");
    drop(run.events);
    // The engine dropped the mailbox: the connection ends.
    tokio::time::timeout(Duration::from_secs(5), run.task).await.unwrap().unwrap();
    assert!(run.seen.lock().unwrap().finished);
}

#[tokio::test]
async fn shutdown_closes_the_protocol_way() {
    let mut run = start().await;
    // Once the driver waits, and before it ever ran.
    tokio::time::sleep(Duration::from_millis(50)).await;
    run.shutdown.send(true).unwrap();
    assert_eq!(read_exactly(&mut run.client, 9).await, b"SHUTDOWN\n");
    tokio::time::timeout(Duration::from_secs(5), run.task).await.unwrap().unwrap();
    let mut early = start().await;
    early.shutdown.send(true).unwrap();
    assert_eq!(read_exactly(&mut early.client, 9).await, b"SHUTDOWN\n");
    tokio::time::timeout(Duration::from_secs(5), early.task).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_held_publish_is_fed_again_when_the_alarm_clears() {
    let mut run = start().await;
    run.alarm.send(true).unwrap();
    run.client.write_all(b"ok\n").await.unwrap();
    assert_eq!(read_exactly(&mut run.client, 3).await, b"OK\n");
    run.client.write_all(b"pub 1\nafter\n").await.unwrap();
    // Held: nothing comes back until the alarm clears.
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(200), run.client.read(&mut byte)).await;
    assert!(early.is_err(), "output while held");
    run.alarm.send(false).unwrap();
    // The buffered lines are fed again (no new read brings them), then the timer it set fires.
    assert_eq!(read_exactly(&mut run.client, 17).await, b"PUB 1\nAFTER\nTICK\n");
    let seen = run.seen.lock().unwrap();
    assert_eq!(seen.refeeds, 1);
    assert_eq!(seen.timeouts, 1);
    drop(seen);
    run.task.abort();
}

#[test]
fn take_output_appends_behind_pending() {
    let mut pending = BytesMut::from(&b"ab"[..]);
    let mut output = BytesMut::from(&b"cd"[..]);
    crate::driver::take_output(&mut pending, &mut output);
    assert_eq!(&pending[..], b"abcd");
    assert!(output.is_empty());
    pending.advance(4);
    output.extend_from_slice(b"ef");
    crate::driver::take_output(&mut pending, &mut output);
    assert_eq!(&pending[..], b"ef");
    assert!(output.is_empty());
}

mod tls {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::aws_lc_rs::default_provider())
    }

    /// A server and a client config around a fresh self-signed certificate for `localhost`.
    fn configs() -> (TlsAcceptor, TlsConnector) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        let der = CertificateDer::from(cert.der().to_vec());
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (TlsAcceptor::from(Arc::new(server)), TlsConnector::from(Arc::new(client)))
    }

    #[tokio::test]
    async fn the_driver_runs_over_tls_with_large_output_and_a_clean_close() {
        let (acceptor, connector) = configs();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (events, inbox) = mpsc::unbounded_channel();
        let (_alarm, alarms) = watch::channel(false);
        let (_shutdown, stop) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let protocol = Lines::<false>::new(inbox, Arc::clone(&seen));
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let stream = acceptor.accept(tcp).await.unwrap();
            drive(stream, protocol, alarms, stop).await;
        });
        let tcp = TcpStream::connect(address).await.unwrap();
        let mut client = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        client.write_all(b"one\ntwo\n").await.unwrap();
        let mut got = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
        assert_eq!(&got, b"ONE\nTWO\n");
        // Larger than rustls' buffer and the socket's: written in several records, flushed.
        let big = "x".repeat(3 * 1024 * 1024) + "\n";
        events.send(big.clone()).unwrap();
        // The client reads late: the socket fills and the records wait in rustls' buffer.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut back = vec![0u8; big.len()];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut back)).await.unwrap().unwrap();
        assert_eq!(back, big.as_bytes());
        client.write_all(b"quit\n").await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await.unwrap().unwrap();
        assert_eq!(rest, b"BYE\n", "the last bytes arrive before close_notify");
        tokio::time::timeout(Duration::from_secs(5), server).await.unwrap().unwrap();
        assert!(seen.lock().unwrap().finished);
    }
}

/// When the driver acknowledges reads: `TCP_QUICKACK` calls counted by a transport.
mod acks {
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, ReadBuf};
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

    use super::*;
    use crate::{ACK_DELAY, Transport};

    /// Plain TCP whose ACKs are counted instead of sent.
    struct Counted {
        stream: TcpStream,
        acks: Arc<AtomicUsize>,
    }

    struct CountedReader {
        half: OwnedReadHalf,
        acks: Arc<AtomicUsize>,
    }

    impl AsyncRead for CountedReader {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.half).poll_read(cx, buf)
        }
    }

    impl Transport for Counted {
        type Reader = CountedReader;
        type Writer = OwnedWriteHalf;
        const BUFFERED: bool = false;

        fn into_split(self) -> (CountedReader, OwnedWriteHalf) {
            let (half, writer) = self.stream.into_split();
            (CountedReader { half, acks: self.acks }, writer)
        }

        fn after_read(reader: &CountedReader) {
            reader.acks.fetch_add(1, Ordering::SeqCst);
        }

        fn try_write(writer: &OwnedWriteHalf, bytes: &[u8]) -> std::io::Result<usize> {
            <TcpStream as Transport>::try_write(writer, bytes)
        }
    }

    /// A connection whose protocol defers ACKs (or not), and its ACK count.
    async fn start<const DEFER: bool>() -> (TcpStream, Arc<AtomicUsize>, mpsc::UnboundedSender<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let acks = Arc::new(AtomicUsize::new(0));
        let (events, inbox) = mpsc::unbounded_channel();
        let (alarm, alarms) = watch::channel(false);
        let (shutdown, stop) = watch::channel(false);
        let protocol = Lines::<DEFER>::new(inbox, Arc::default());
        let transport = Counted { stream: server, acks: Arc::clone(&acks) };
        tokio::spawn(async move {
            drive(transport, protocol, alarms, stop).await;
            drop((alarm, shutdown));
        });
        (client, acks, events)
    }

    /// Waits until `acks` counts `want`.
    async fn acked(acks: &AtomicUsize, want: usize) {
        let started = Instant::now();
        while acks.load(Ordering::SeqCst) < want {
            assert!(started.elapsed() < Duration::from_secs(5), "no ACK");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    #[tokio::test]
    async fn a_protocol_that_does_not_defer_acknowledges_every_read_at_once() {
        let (mut client, acks, _events) = start::<false>().await;
        client.write_all(b"one\n").await.unwrap();
        assert_eq!(read_exactly(&mut client, 4).await, b"ONE\n");
        acked(&acks, 1).await;
        client.write_all(b"par").await.unwrap();
        acked(&acks, 2).await;
    }

    #[tokio::test]
    async fn a_deferred_ack_rides_on_the_answer_or_goes_out_after_the_delay() {
        let (mut client, acks, events) = start::<true>().await;
        client.write_all(b"one\n").await.unwrap();
        assert_eq!(read_exactly(&mut client, 4).await, b"ONE\n");
        tokio::time::sleep(ACK_DELAY * 20).await;
        assert_eq!(acks.load(Ordering::SeqCst), 0, "the answer carried the ACK");
        // Half a line: nothing to answer, so the ACK goes out alone, once the delay is over.
        let written = Instant::now();
        client.write_all(b"par").await.unwrap();
        acked(&acks, 1).await;
        assert!(written.elapsed() >= ACK_DELAY, "acknowledged after {:?}", written.elapsed());
        // An engine event's output written within the delay carries the ACK too.
        client.write_all(b"t").await.unwrap();
        events.send("DELIVERY\n".to_owned()).unwrap();
        assert_eq!(read_exactly(&mut client, 9).await, b"DELIVERY\n");
        tokio::time::sleep(ACK_DELAY * 20).await;
        assert!(acks.load(Ordering::SeqCst) <= 2, "at most the read that the event missed");
    }
}
