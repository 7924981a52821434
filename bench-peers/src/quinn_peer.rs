//! quinn 0.11 (QUIC, RFC 9000/9002; rustls with ring, TLS 1.3 always on).
//!
//! * `quinn` (reliable): one bidirectional stream per client, opened by
//!   the client, carrying length-prefixed messages (`[u32 len LE][msg]`)
//!   each way: one ordered byte stream per direction.
//! * `quinn-streams` (reliable): a unidirectional stream per message,
//!   each way (the server answers each with a stream of its own): no
//!   head-of-line blocking between messages, and no order between them.
//! * `--channel unreliable` (either name): QUIC datagrams (RFC 9221),
//!   which quinn congestion-controls and drops, oldest first, past its
//!   send buffer.
//!
//! The server serves all three at once: it echoes each length-prefixed
//! message on the bidirectional stream it came on, answers each
//! unidirectional stream with one of its own, and each datagram with a
//! datagram.
//!
//! Certificates: the server makes a self-signed certificate (rcgen) at
//! start; the client's certificate verifier accepts any certificate
//! without checking it (`SkipVerify`). **For this benchmark only**: it
//! gives no authentication at all; the TLS handshake and encryption still
//! run (their cost is part of quinn's figures).
//!
//! Pump: a tokio current-thread runtime on the harness's thread; quinn's
//! endpoint and connection drivers are tasks on it, run while the harness
//! is in [`Clients::pump`] / [`EchoServer::pump`] (`block_on`); messages
//! reach the harness through a channel. Each client has its own
//! `Endpoint` (its own socket).
//!
//! Defaults: quinn's transport defaults (100 concurrent streams of each
//! kind, initial RTT 333 ms, idle timeout 30 s, Cubic congestion
//! control). Tuned: 1,024
//! concurrent unidirectional streams each way (a stream per message
//! otherwise waits for stream credit under loss); nothing else changes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::rustls::{self, pki_types};
use quinn::{Connection, Endpoint, TransportConfig, VarInt};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use crate::flags::MAX_PAYLOAD;
use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

/// Handshakes a client process runs at once.
pub const CONNECT_WAVE: usize = 32;

/// Concurrent unidirectional streams each way, tuned.
pub const TUNED_UNI_STREAMS: u32 = 1_024;

fn runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("quinn: tokio runtime: {e}"))
}

fn transport(tuned: bool) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    if tuned {
        t.max_concurrent_uni_streams(VarInt::from_u32(TUNED_UNI_STREAMS));
    }
    Arc::new(t)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn settings(tuned: bool) -> String {
    let t = if tuned {
        format!("tuned: {TUNED_UNI_STREAMS} concurrent uni streams each way")
    } else {
        "quinn transport defaults (100 streams of each kind)".into()
    };
    format!("TLS 1.3 (rustls, ring), self-signed, client skips verification; {t}")
}

const PUMP: &str = "tokio current-thread runtime on the harness's thread (block_on in pump); \
                    quinn drivers as tasks";

// ---------------------------------------------------------------- server

async fn echo_stream(mut send: quinn::SendStream, mut recv: quinn::RecvStream, tally: Arc<Tally>) {
    let mut len = [0u8; 4];
    let mut buf = Vec::new();
    loop {
        if recv.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_PAYLOAD {
            let _ = recv.stop(VarInt::from_u32(1));
            return;
        }
        buf.clear();
        buf.extend_from_slice(&len);
        buf.resize(4 + n, 0);
        if recv.read_exact(&mut buf[4..]).await.is_err() {
            return;
        }
        if send.write_all(&buf).await.is_err() {
            return;
        }
        tally.echoed(n);
    }
}

async fn echo_uni(conn: Connection, mut recv: quinn::RecvStream, tally: Arc<Tally>) {
    let Ok(data) = recv.read_to_end(MAX_PAYLOAD).await else {
        return;
    };
    let Ok(mut s) = conn.open_uni().await else {
        return;
    };
    if s.write_all(&data).await.is_ok() && s.finish().is_ok() {
        tally.echoed(data.len());
    }
}

async fn serve_connection(incoming: quinn::Incoming, tally: Arc<Tally>) {
    let Ok(conn) = incoming.await else { return };
    tally.connected();
    let (c, t) = (conn.clone(), tally.clone());
    tokio::spawn(async move {
        while let Ok((send, recv)) = c.accept_bi().await {
            tokio::spawn(echo_stream(send, recv, t.clone()));
        }
    });
    let (c, t) = (conn.clone(), tally.clone());
    tokio::spawn(async move {
        while let Ok(recv) = c.accept_uni().await {
            tokio::spawn(echo_uni(c.clone(), recv, t.clone()));
        }
    });
    let (c, t) = (conn.clone(), tally.clone());
    tokio::spawn(async move {
        while let Ok(d) = c.read_datagram().await {
            let n = d.len();
            if c.send_datagram(d).is_ok() {
                t.echoed(n);
            }
        }
    });
    let _ = conn.closed().await;
    tally.disconnected();
}

struct QuinnServer {
    rt: Runtime,
    endpoint: Endpoint,
}

impl EchoServer for QuinnServer {
    fn local_addr(&self) -> SocketAddr {
        self.endpoint
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        self.rt
            .block_on(async move { tokio::time::sleep(timeout).await });
        Ok(())
    }
}

/// The quinn echo server (all three modes at once).
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()])
        .map_err(|e| format!("quinn: making a self-signed certificate: {e}"))?;
    let key = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(
        cert.key_pair.serialize_der(),
    ));
    let tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("quinn: TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .map_err(|e| format!("quinn: TLS certificate: {e}"))?;
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| format!("quinn: TLS: {e}"))?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(transport(args.tuned));
    let rt = runtime()?;
    let endpoint = {
        let _g = rt.enter();
        Endpoint::server(sc, args.bind).map_err(|e| format!("quinn: binding {}: {e}", args.bind))?
    };
    let ep = endpoint.clone();
    rt.spawn(async move {
        while let Some(incoming) = ep.accept().await {
            tokio::spawn(serve_connection(incoming, tally.clone()));
        }
    });
    Ok((
        Box::new(QuinnServer { rt, endpoint }),
        Description {
            settings: settings(args.tuned),
            pump: PUMP.into(),
        },
    ))
}

// ---------------------------------------------------------------- clients

/// Accepts any server certificate: **benchmark only**, no authentication.
#[derive(Debug)]
struct SkipVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _: &pki_types::CertificateDer<'_>,
        _: &[pki_types::CertificateDer<'_>],
        _: &pki_types::ServerName<'_>,
        _: &[u8],
        _: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One bidirectional stream per client, length-prefixed messages.
    Stream,
    /// A unidirectional stream per message.
    Streams,
    /// QUIC datagrams.
    Datagrams,
}

enum Event {
    Message(usize, Vec<u8>),
    Closed(usize, String),
}

struct QuinnClients {
    rt: Runtime,
    endpoints: Vec<Endpoint>,
    conns: Vec<Connection>,
    /// `Stream` mode: each client's queue to its stream's writer task.
    writers: Vec<mpsc::UnboundedSender<Vec<u8>>>,
    rx: mpsc::UnboundedReceiver<Event>,
    mode: Mode,
}

impl QuinnClients {
    fn handle(ev: Event, deliver: &mut dyn FnMut(usize, &[u8])) -> Result<(), String> {
        match ev {
            Event::Message(i, m) => {
                deliver(i, &m);
                Ok(())
            }
            Event::Closed(i, why) => Err(format!("quinn: client {i}'s connection closed: {why}")),
        }
    }
}

impl Clients for QuinnClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        match self.mode {
            Mode::Datagrams => {
                // Refused (too large, or no datagram support): lost.
                let _ = self.conns[i].send_datagram(Bytes::copy_from_slice(msg));
            }
            Mode::Stream => {
                let _ = self.writers[i].send(msg.to_vec());
            }
            Mode::Streams => {
                let conn = self.conns[i].clone();
                let data = msg.to_vec();
                self.rt.spawn(async move {
                    if let Ok(mut s) = conn.open_uni().await {
                        let _ = s.write_all(&data).await;
                        let _ = s.finish();
                    }
                });
            }
        }
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::from_std(until);
        let rx = &mut self.rx;
        let first = self
            .rt
            .block_on(async { tokio::time::timeout_at(deadline, rx.recv()).await });
        match first {
            Err(_) => return Ok(()),
            Ok(None) => return Err("quinn: every client task ended".into()),
            Ok(Some(ev)) => Self::handle(ev, deliver)?,
        }
        while let Ok(ev) = self.rx.try_recv() {
            Self::handle(ev, deliver)?;
        }
        Ok(())
    }

    fn close(&mut self) {
        for c in &self.conns {
            c.close(VarInt::from_u32(0), b"done");
        }
        let eps = self.endpoints.clone();
        self.rt.block_on(async move {
            for ep in eps {
                let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
            }
        });
    }
}

async fn read_stream(i: usize, mut recv: quinn::RecvStream, tx: mpsc::UnboundedSender<Event>) {
    let mut len = [0u8; 4];
    loop {
        if recv.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_PAYLOAD {
            let _ = tx.send(Event::Closed(i, format!("a message of {n} bytes")));
            return;
        }
        let mut m = vec![0; n];
        if recv.read_exact(&mut m).await.is_err() {
            return;
        }
        if tx.send(Event::Message(i, m)).is_err() {
            return;
        }
    }
}

async fn write_stream(mut send: quinn::SendStream, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut buf = Vec::new();
    while let Some(m) = rx.recv().await {
        buf.clear();
        buf.extend_from_slice(&(m.len() as u32).to_le_bytes());
        buf.extend_from_slice(&m);
        if send.write_all(&buf).await.is_err() {
            return;
        }
    }
}

fn start_client(
    i: usize,
    conn: Connection,
    mode: Mode,
    tx: mpsc::UnboundedSender<Event>,
    writer: Option<(
        quinn::SendStream,
        quinn::RecvStream,
        mpsc::UnboundedReceiver<Vec<u8>>,
    )>,
) {
    match mode {
        Mode::Datagrams => {
            let c = conn.clone();
            tokio::spawn(async move {
                loop {
                    match c.read_datagram().await {
                        Ok(d) => {
                            if tx.send(Event::Message(i, d.to_vec())).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Event::Closed(i, e.to_string()));
                            return;
                        }
                    }
                }
            });
        }
        Mode::Stream => {
            if let Some((send, recv, rx)) = writer {
                tokio::spawn(write_stream(send, rx));
                tokio::spawn(read_stream(i, recv, tx));
            }
        }
        Mode::Streams => {
            let c = conn.clone();
            tokio::spawn(async move {
                loop {
                    match c.accept_uni().await {
                        Ok(mut recv) => {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                if let Ok(d) = recv.read_to_end(MAX_PAYLOAD).await {
                                    let _ = tx.send(Event::Message(i, d));
                                }
                            });
                        }
                        Err(e) => {
                            let _ = tx.send(Event::Closed(i, e.to_string()));
                            return;
                        }
                    }
                }
            });
        }
    }
}

fn clients_of(
    args: &ClientArgs,
    deadline: Instant,
    streams: bool,
) -> Result<(Box<dyn Clients>, Description), String> {
    let mode = match (args.channel, streams) {
        (Channel::Unreliable, _) => Mode::Datagrams,
        (Channel::ReliableOrdered, false) => Mode::Stream,
        (Channel::ReliableOrdered, true) => Mode::Streams,
    };
    let rt = runtime()?;
    let p = provider();
    let tls = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("quinn: TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipVerify(p)))
        .with_no_client_auth();
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| format!("quinn: TLS: {e}"))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
    cc.transport_config(transport(args.tuned));
    let local: SocketAddr = if args.connect.is_ipv4() {
        "127.0.0.1:0".parse().expect("constant address")
    } else {
        "[::1]:0".parse().expect("constant address")
    };
    let n = args.clients as usize;
    let (tx, rx) = mpsc::unbounded_channel();
    let server = args.connect;
    let setup = async {
        let mut endpoints = Vec::with_capacity(n);
        let mut conns = Vec::with_capacity(n);
        // Handshakes in waves of CONNECT_WAVE: a thousand padded Initials
        // at once overflow the server's socket buffer, and each lost one
        // waits for quinn's PTO (1 s, doubling).
        for wave in (0..n).collect::<Vec<_>>().chunks(CONNECT_WAVE) {
            let mut connecting = Vec::with_capacity(wave.len());
            for &i in wave {
                let mut ep =
                    Endpoint::client(local).map_err(|e| format!("quinn: client {i}: {e}"))?;
                ep.set_default_client_config(cc.clone());
                let c = ep
                    .connect(server, "localhost")
                    .map_err(|e| format!("quinn: client {i}: connect: {e}"))?;
                endpoints.push(ep);
                connecting.push((i, c));
            }
            for (i, c) in connecting {
                conns.push(
                    c.await
                        .map_err(|e| format!("quinn: client {i}: handshake: {e}"))?,
                );
            }
        }
        let mut writers = Vec::new();
        for (i, conn) in conns.iter().enumerate() {
            let mut writer = None;
            if mode == Mode::Stream {
                let (send, recv) = conn
                    .open_bi()
                    .await
                    .map_err(|e| format!("quinn: client {i}: open_bi: {e}"))?;
                let (wtx, wrx) = mpsc::unbounded_channel();
                writers.push(wtx);
                writer = Some((send, recv, wrx));
            }
            start_client(i, conn.clone(), mode, tx.clone(), writer);
        }
        Ok::<_, String>((endpoints, conns, writers))
    };
    let limit = tokio::time::Instant::from_std(deadline);
    let (endpoints, conns, writers) = rt
        .block_on(async { tokio::time::timeout_at(limit, setup).await })
        .map_err(|_| format!("quinn: {n} clients not connected by the deadline"))??;
    let mode_text = match mode {
        Mode::Stream => "one bidirectional stream per client, [u32 len] prefixed",
        Mode::Streams => "a unidirectional stream per message, each way",
        Mode::Datagrams => "QUIC datagrams",
    };
    Ok((
        Box::new(QuinnClients {
            rt,
            endpoints,
            conns,
            writers,
            rx,
            mode,
        }),
        Description {
            settings: format!("{mode_text}; {}", settings(args.tuned)),
            pump: PUMP.into(),
        },
    ))
}

/// quinn clients: one bidirectional stream each (or datagrams).
pub fn clients_stream(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    clients_of(args, deadline, false)
}

/// quinn clients: a stream per message (or datagrams).
pub fn clients_streams(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    clients_of(args, deadline, true)
}
