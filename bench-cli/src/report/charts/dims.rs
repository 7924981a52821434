//! The dimensions of a configuration that subtitles and legends name
//! ([`Dim`]), and how to split them into what every point shares (said
//! once, in the subtitle) and what varies (named per series).

use std::collections::BTreeSet;

use crate::report::input::{count, ConfigKey};

/// A dimension of the configuration shown in subtitles and legends.
pub(super) struct Dim {
    /// What it is, e.g. `clients`.
    pub(super) name: &'static str,
    /// Its value in words, e.g. `16 clients`.
    pub(super) get: fn(&ConfigKey) -> String,
}

pub(super) fn or_q<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "?".to_string(), T::to_string)
}

pub(super) const FAMILY: Dim = Dim {
    name: "protocol/family",
    get: |k| format!("{}/{}", or_q(&k.protocol), or_q(&k.address_family)),
};
pub(super) const PAYLOAD: Dim = Dim {
    name: "payload",
    get: |k| format!("payload {} B", or_q(&k.payload_bytes)),
};
pub(super) const CLIENTS: Dim = Dim {
    name: "clients",
    get: |k| count(k.clients, "client"),
};
pub(super) const WINDOW: Dim = Dim {
    name: "window",
    get: |k| format!("window {}", or_q(&k.window)),
};
pub(super) const WORK: Dim = Dim {
    name: "work",
    get: |k| format!("work {}", or_q(&k.handler_work)),
};
pub(super) const BATCH: Dim = Dim {
    name: "batch",
    get: |k| format!("batch {}", or_q(&k.batch)),
};
pub(super) const LANES: Dim = Dim {
    name: "server lanes",
    get: ConfigKey::lanes_label,
};
pub(super) const IO: Dim = Dim {
    name: "IO model",
    get: ConfigKey::io_label,
};

/// Splits `dims` into the labels every key shares and the dims that vary.
pub(super) fn split_dims<'d>(keys: &[&ConfigKey], dims: &'d [Dim]) -> (Vec<String>, Vec<&'d Dim>) {
    let mut constant = Vec::new();
    let mut varying = Vec::new();
    for d in dims {
        let values: BTreeSet<String> = keys.iter().map(|k| (d.get)(k)).collect();
        if values.len() == 1 {
            constant.extend(values);
        } else {
            varying.push(d);
        }
    }
    (constant, varying)
}

pub(super) fn label(key: &ConfigKey, dims: &[&Dim]) -> String {
    dims.iter()
        .map(|d| (d.get)(key))
        .collect::<Vec<_>>()
        .join(", ")
}
