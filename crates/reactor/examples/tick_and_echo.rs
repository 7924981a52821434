//! cargo run --release -p keel-reactor --example tick_and_echo
//!
//! A 60 Hz game tick and a UDP echo server on one runtime: the tick is a
//! periodic closure timer, the echo a lane owning a mio UDP socket on
//! 127.0.0.1:0. A client thread sends a few datagrams and prints the
//! echoes; a one-shot timer stops the runtime after about one second,
//! and the example prints how many ticks it counted (about 60).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{Flow, Interest, IoModel, Lane, LaneCtx, Ready, Runtime, SourceId};
use mio::net::UdpSocket;

/// The echo lane's state: its socket and how many datagrams it echoed.
struct Echo {
    socket: UdpSocket,
    echoed: u64,
}

impl Lane for Echo {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
        let mut buf = [0u8; 1500];
        // Edge-triggered: drain until WouldBlock.
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            if self.socket.send_to(&buf[..n], from).is_ok() {
                self.echoed += 1;
            }
        }
        Flow::Drained
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::new(IoModel::Shared { threads: 2 })?;
    let start = Instant::now();

    // The tick: drift-free, so it fires once per 1/60 s on average even
    // when a wake-up is late.
    let tick = Duration::from_nanos(1_000_000_000 / 60);
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = ticks.clone();
    rt.handle().timer(start + tick, Some(tick), move || {
        counter.fetch_add(1, Ordering::Relaxed);
    });

    // The echo lane.
    let socket = UdpSocket::bind("127.0.0.1:0".parse()?)?;
    let server = socket.local_addr()?;
    let (echo, registered) = rt.add_lane_with(Echo { socket, echoed: 0 }, |echo, cx| {
        cx.register(&mut echo.socket, Interest::READABLE)
    });
    registered?;
    println!("echo server on {server}");

    // A client on its own thread.
    let client = std::thread::spawn(move || -> std::io::Result<()> {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        for i in 0..5 {
            let msg = format!("hello #{i}");
            socket.send_to(msg.as_bytes(), server)?;
            let mut buf = [0u8; 64];
            let (n, from) = socket.recv_from(&mut buf)?;
            println!(
                "client: echo from {from}: {}",
                String::from_utf8_lossy(&buf[..n])
            );
        }
        Ok(())
    });

    client.join().expect("client thread panicked")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = echo.post(move |e, _| {
        let _ = tx.send(e.echoed);
    });
    let echoed = rx.recv_timeout(Duration::from_secs(1))?;

    // Stop after about one second, from the reactor itself; join returns
    // once the runtime has stopped.
    let stopper = rt.handle().clone();
    rt.handle()
        .timer(start + Duration::from_secs(1), None, move || stopper.stop());
    rt.join()?;

    let n = ticks.load(Ordering::Relaxed);
    println!(
        "{n} ticks at 60 Hz in {:.3} s; {echoed} datagrams echoed",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
