//! What every part of the report reads a line with: `Fields`, a run
//! line's fields read leniently (a missing, `null` or mistyped field is
//! unknown, never 0; a configuration field falls back to `requested`),
//! and the words for values that may be unknown ([`opt`], [`count`]).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

/// `1 thread`, `4 threads`, `? threads`.
pub(super) fn count(n: Option<u64>, what: &str) -> String {
    match n {
        Some(1) => format!("1 {what}"),
        Some(n) => format!("{n} {what}s"),
        None => format!("? {what}s"),
    }
}

/// `Some(v)` as text, `?` for unknown.
pub(super) fn opt<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".to_string(), |v| v.to_string())
}

fn finite(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// A run line's fields, each the echoed value or else the requested one.
pub(super) struct Fields<'a> {
    /// The line.
    pub(super) obj: &'a Map<String, Value>,
    requested: Option<&'a Map<String, Value>>,
}

impl<'a> Fields<'a> {
    pub(super) fn new(obj: &'a Map<String, Value>) -> Fields<'a> {
        Fields {
            obj,
            requested: obj.get("requested").and_then(Value::as_object),
        }
    }

    /// The echoed value, else (null or missing) the requested one.
    pub(super) fn field(&self, name: &str) -> Option<&'a Value> {
        match self.obj.get(name) {
            Some(Value::Null) | None => self.requested.and_then(|r| r.get(name)),
            Some(v) => Some(v),
        }
    }

    pub(super) fn text(&self, name: &str) -> Option<String> {
        self.field(name).and_then(Value::as_str).map(str::to_owned)
    }

    pub(super) fn int(&self, name: &str) -> Option<u64> {
        self.field(name).and_then(Value::as_u64)
    }

    /// A keel-udp line run with `--dont-fragment` (`dont_fragment` true):
    /// a configuration apart from the kernel's default. False for other
    /// protocols, whose `dont_fragment` the flag does not set, and for
    /// lines from before the field.
    pub(super) fn udp_dont_fragment(&self) -> bool {
        self.text("protocol").as_deref() == Some("udp")
            && self.field("dont_fragment").and_then(Value::as_bool) == Some(true)
    }

    /// A measured number (never from `requested`), if finite.
    pub(super) fn measured(&self, name: &str) -> Option<f64> {
        finite(self.obj.get(name))
    }

    /// A measured RTT percentile, never above the line's `rtt_max_us` (nor
    /// below its `rtt_min_us`): older lines reported a histogram bucket's
    /// upper edge, which could lie above the largest sample (issue 24).
    pub(super) fn percentile(&self, name: &str) -> Option<f64> {
        let mut v = self.measured(name)?;
        if let Some(max) = self.measured("rtt_max_us") {
            v = v.min(max);
        }
        if let Some(min) = self.measured("rtt_min_us") {
            v = v.max(min);
        }
        Some(v)
    }

    /// The settings of `names` the line has, as JSON text.
    pub(super) fn other_settings(&self, names: &[&'static str]) -> BTreeMap<&'static str, String> {
        names
            .iter()
            .filter_map(|&name| self.field(name).map(|v| (name, v.to_string())))
            .collect()
    }
}
