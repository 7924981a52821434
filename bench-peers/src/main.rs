//! `keel-peer LIB server|client ...`: see `keel-peer --help` and
//! bench-peers/README.md.

use keel_peers::flags::{self, Command};

fn main() {
    let code = match flags::parse(std::env::args_os().skip(1)) {
        Err(e) => {
            eprintln!("keel-peer: {e}");
            2
        }
        Ok(Command::Help) => {
            print!("{}", flags::HELP);
            0
        }
        Ok(Command::Version) => {
            println!("keel-peer {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(cmd) => {
            let name = match &cmd {
                Command::Server(a) => a.library.clone(),
                Command::Client(a) => a.library.clone(),
                _ => unreachable!("handled above"),
            };
            let libs = keel_peers::libraries();
            match libs.iter().find(|l| l.name == name) {
                None => {
                    eprintln!(
                        "keel-peer: LIB {name:?} is not built into this binary (built: {}; \
                         gns and renet need their cargo features, enet libenet-dev)",
                        libs.iter().map(|l| l.name).collect::<Vec<_>>().join(", ")
                    );
                    2
                }
                Some(lib) => match &cmd {
                    Command::Server(a) => keel_peers::server::run(lib, a),
                    Command::Client(a) => keel_peers::load::run(lib, a),
                    _ => unreachable!("handled above"),
                },
            }
        }
    };
    std::process::exit(code);
}
