//! keel-rudp: connections, channels and reliable delivery over datagrams.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod wire;
