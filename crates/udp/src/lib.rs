//! keel-udp (work in progress).
