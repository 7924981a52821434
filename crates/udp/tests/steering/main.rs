//! Lane steering, one test binary (one link instead of three): by the
//! peer's port ([`ports`]), past IP options and extension headers
//! ([`headers`]), and by a payload byte or the source address
//! ([`payload`]).

#[path = "../common/mod.rs"]
mod common;

mod headers;
mod payload;
mod ports;
