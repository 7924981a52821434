//! The send side of keel-rudp against peers that never acknowledge,
//! sans-IO, in one process: N connections of one [`Endpoint`] (insecure;
//! a sealed connection holds the same) whose peers are silent, and a game
//! that sends each of them reliable messages round-robin until `send`
//! refuses; every datagram is sent (and lost). Prints the budget used, the
//! refusals by cause, and RSS (from `/proc/self/statm`) against the bytes
//! the budget counts.
//!
//! `cargo run --release -p keel-rudp --example hostile_send -- [CONNECTIONS
//! [MESSAGE_BYTES [BUDGET_MIB]]]` (default 4,000 connections, 1,024-byte
//! messages, the default 256 MiB budget). Run each case in a process of
//! its own (RSS is not given back between).

use std::net::SocketAddr;
use std::time::Instant;

use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, ClientSecurity, Config, ConnectionHandle, SendBudget,
    SendError, ServerSecurity, DEFAULT_SEND_BUDGET,
};
use keel_rudp_proto::{Connection, Event};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};

static BYTES: [u8; 1 << 16] = [7; 1 << 16];

fn cfg() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, (i % 250) as u8 + 1], 1024 + (i / 250) as u16))
}

fn connect(server: &mut Endpoint, now: Instant, i: usize) -> ConnectionHandle {
    let mut nonce = [0u8; 16];
    nonce[..8].copy_from_slice(&(i as u64).to_be_bytes());
    let mut client = Connection::connect(cfg(), ClientSecurity::Insecure, nonce, now).unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    let mut handle = None;
    for _ in 0..2 {
        let len = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, addr(i), &buf[..len], &mut reply) {
            Handled::Reply(m) => client.handle_datagram(now, &reply[..m]),
            Handled::Accepted(h, m) => {
                handle = Some(h);
                client.handle_datagram(now, &reply[..m]);
            }
            other => panic!("handshake: {other:?}"),
        }
    }
    assert_eq!(client.poll_event(), Some(Event::Connected));
    handle.unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).map_or(d, |a| a.parse().expect("a number"));
    let n = arg(0, 4000);
    let len = arg(1, 1024).min(BYTES.len());
    let budget = arg(2, DEFAULT_SEND_BUDGET >> 20) << 20;

    let now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.max_connections = n;
    ec.admission = Admission::OFF;
    ec.send_budget = SendBudget::new(budget);
    let shared = ec.send_budget.clone();
    let mut server = Endpoint::new(ec, now).unwrap();
    let base = rss();
    let handles: Vec<ConnectionHandle> = (0..n).map(|i| connect(&mut server, now, i)).collect();
    while server.poll_event().is_some() {}
    let mut buf = [0u8; 1500];
    while server.poll_transmit(now, &mut buf).is_some() {}
    let fixed = rss().saturating_sub(base);

    let started = Instant::now();
    let mut open: Vec<ConnectionHandle> = handles.clone();
    let (mut sent, mut spent, mut backpressure, mut datagrams) = (0usize, 0u64, 0u64, 0u64);
    // Round-robin, one message per connection a round, everything sent
    // at once (lost: the peers are silent); a connection is done at its
    // first refusal.
    while !open.is_empty() {
        open.retain(
            |&h| match server.connection_mut(h).unwrap().send(0, &BYTES[..len]) {
                Ok(_) => {
                    sent += 1;
                    true
                }
                Err(SendError::BudgetSpent { .. }) => {
                    spent += 1;
                    false
                }
                Err(SendError::Backpressure { .. }) => {
                    backpressure += 1;
                    false
                }
                Err(e) => panic!("{e}"),
            },
        );
        while server.poll_transmit(now, &mut buf).is_some() {
            datagrams += 1;
        }
    }
    let took = started.elapsed();
    let grown = rss().saturating_sub(base + fixed);
    let queued: usize = handles
        .iter()
        .map(|&h| server.connection(h).unwrap().send_buffered())
        .sum();
    let st = server.stats();
    assert_eq!(st.send_budget_refused, spent);
    println!(
        "send: {n} connections, {len}-byte reliable messages, peers silent: {sent} sent \
         ({:.1} MiB of data, {datagrams} datagrams) in {:.2} s; budget {:.0} MiB, used {:.1} MiB; \
         refused: {spent} for the budget, {backpressure} for max_send_buffer; \
         RSS: {:.1} MiB for the connections, +{:.1} MiB for what they hold \
         ({:.2} of what the budget counts, {:.2} per byte of data)",
        mib(queued),
        took.as_secs_f64(),
        mib(shared.limit()),
        mib(shared.used()),
        mib(fixed),
        mib(grown),
        grown as f64 / shared.used() as f64,
        grown as f64 / queued as f64,
    );
}
