//! keel-rudp between two hosts: two network namespaces joined by a veth
//! pair (192.0.2.0/24, TEST-NET-1), with nftables dropping 10 % of the
//! UDP datagrams arriving on each side at random. The server (two lanes on
//! a wildcard address) and the client run as children of this test, each
//! in its namespace; the namespaces are always removed. Skips with a
//! printed reason when not root or without `ip` or `nft`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{Client, ClientConfig, Server, ServerConfig};

const TEST: &str = "across_two_namespaces_with_random_drop";
const ROLE: &str = "KEEL_RUDP_NETNS_ROLE";
const SERVER: &str = "192.0.2.1:9411";

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The two namespaces; dropping it deletes them (and the veth pair).
struct Namespaces {
    server: String,
    client: String,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.server]);
        let _ = run(&["ip", "netns", "del", &self.client]);
    }
}

fn setup() -> Result<Namespaces, String> {
    let tag = format!("kr{}", std::process::id());
    let ns = Namespaces {
        server: format!("{tag}-srv"),
        client: format!("{tag}-cli"),
    };
    let (vs, vc) = (format!("{tag}s"), format!("{tag}c"));
    run(&["ip", "netns", "add", &ns.server])?;
    run(&["ip", "netns", "add", &ns.client])?;
    run(&[
        "ip", "link", "add", &vs, "type", "veth", "peer", "name", &vc,
    ])?;
    run(&["ip", "link", "set", &vs, "netns", &ns.server])?;
    run(&["ip", "link", "set", &vc, "netns", &ns.client])?;
    for (n, v, a) in [
        (&ns.server, &vs, "192.0.2.1/24"),
        (&ns.client, &vc, "192.0.2.2/24"),
    ] {
        run(&["ip", "-n", n, "addr", "add", a, "dev", v])?;
        run(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", n, "link", "set", v, "up"])?;
        // Dropped on input, as a lossy wire would (the sender sees nothing).
        run(&[
            "ip", "netns", "exec", n, "nft", "add", "table", "ip", "krudp",
        ])?;
        run(&[
            "ip",
            "netns",
            "exec",
            n,
            "nft",
            "add",
            "chain",
            "ip",
            "krudp",
            "input",
            "{ type filter hook input priority 0; policy accept; }",
        ])?;
        run(&[
            "ip", "netns", "exec", n, "nft", "add", "rule", "ip", "krudp", "input", "meta",
            "l4proto", "udp", "numgen", "random", "mod", "100", "<", "10", "counter", "drop",
        ])?;
    }
    Ok(ns)
}

/// Packets the drop rule of namespace `ns` dropped.
fn dropped(ns: &str) -> u64 {
    let out = run(&[
        "ip", "netns", "exec", ns, "nft", "list", "table", "ip", "krudp",
    ])
    .unwrap_or_default();
    out.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn child(ns: &str, role: &str) -> Child {
    let exe = std::env::current_exe().unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a child in its namespace")
}

/// The server child: echoes until its stdin closes.
fn serve() {
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let mut sc = ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure);
    sc.lanes = 2;
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = Server::bind(rt.handles(), "0.0.0.0:9411".parse().unwrap(), sc, |_| {
        Recorder {
            events: tx.clone(),
            echo: true,
        }
    })
    .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    println!("SERVER {:?}", server.stats());
    server.stop();
    rt.stop().unwrap();
}

/// The client child: reliable, sequenced and bulk traffic, echoed.
fn client() {
    const N: u32 = 200;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (cli, rx) = recorder(false);
    let client = Client::connect(
        rt.handle(),
        SERVER.parse().unwrap(),
        ClientConfig::new(config(), keel_rudp::ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    let start = Instant::now();
    let s = client.sender();
    for i in 0..N {
        s.send(ORDERED, &payload(i, 200)).unwrap();
    }
    for i in 0..N {
        s.send(SEQUENCED, &payload(i, 32)).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    s.send(BULK, &payload(7, 256 << 10)).unwrap();
    let (mut ordered, mut seq, mut bulk) = (Vec::new(), Vec::new(), false);
    collect_until(
        &rx,
        Duration::from_secs(20),
        "echoes across the namespaces",
        |e| {
            match e {
                Seen::Message(_, ORDERED, d) => ordered.push(index(d)),
                Seen::Message(_, SEQUENCED, d) => seq.push(index(d)),
                Seen::Message(_, BULK, d) => bulk = index(d) == 7 && d.len() == 256 << 10,
                _ => {}
            }
            ordered.len() == N as usize && bulk
        },
    );
    assert_eq!(ordered, (0..N).collect::<Vec<_>>());
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "older after newer: {seq:?}"
    );
    println!(
        "CLIENT ordered={} sequenced={}/{N} bulk=256KiB took={:?}",
        ordered.len(),
        seq.len(),
        start.elapsed()
    );
    client.stop();
    rt.stop().unwrap();
}

#[test]
fn across_two_namespaces_with_random_drop() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return serve(),
        Ok("client") => return client(),
        _ => {}
    }
    let uid = run(&["id", "-u"]).unwrap_or_default();
    let skip = if uid.trim() != "0" {
        Some("needs root (network namespaces, nftables)".to_owned())
    } else {
        run(&["nft", "--version"]).and(run(&["ip", "-V"])).err()
    };
    if let Some(why) = skip {
        eprintln!("SKIPPED {TEST}: {why}");
        return;
    }
    let ns = match setup() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIPPED {TEST}: {e}");
            return;
        }
    };
    let mut server = child(&ns.server, "server");
    // Wait for the server's READY line (an event), bounded.
    let out = server.stdout.take().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        let mut all = Vec::new();
        while let Some(Ok(l)) = lines.next() {
            if l.contains("READY") {
                let _ = ready_tx.send(());
            }
            all.push(l);
        }
        all
    });
    let ready = ready_rx.recv_timeout(Duration::from_secs(10)).is_ok();
    let client_out = ready.then(|| child(&ns.client, "client").wait_with_output().unwrap());
    drop(server.stdin.take()); // the server stops
    let status = server.wait().unwrap();
    let server_lines = reader.join().unwrap();
    let mut err = String::new();
    let _ = server.stderr.take().unwrap().read_to_string(&mut err);
    assert!(ready, "the server never got ready:\n{err}");
    let c = client_out.unwrap();
    let stdout = String::from_utf8_lossy(&c.stdout);
    let stderr = String::from_utf8_lossy(&c.stderr);
    assert!(
        c.status.success() && stdout.contains("1 passed"),
        "client failed:\n{stdout}\n{stderr}\nserver:\n{server_lines:?}\n{err}"
    );
    assert!(status.success(), "server failed: {server_lines:?}\n{err}");
    let (ds, dc) = (dropped(&ns.server), dropped(&ns.client));
    for l in stdout
        .lines()
        .chain(server_lines.iter().map(|s| s.as_str()))
    {
        for tag in ["CLIENT ", "SERVER "] {
            if let Some(i) = l.find(tag) {
                eprintln!("{}", &l[i..]);
            }
        }
    }
    eprintln!("nftables dropped {ds} datagrams into the server, {dc} into the client");
    assert!(ds > 0 && dc > 0, "the drop rules never fired");
}
