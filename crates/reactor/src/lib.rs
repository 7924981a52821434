//! keel-reactor (work in progress).
