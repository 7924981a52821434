//! keel-rudp: connections, channels and reliable delivery over datagrams.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod ranges;
mod recovery;
mod rtt;
pub mod wire;

pub use ranges::RangeSet;
pub use recovery::PACKET_THRESHOLD;
pub use rtt::{RttEstimator, GRANULARITY};
