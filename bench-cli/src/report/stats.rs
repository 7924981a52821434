//! The statistics both parts of the report use: [`Spread`] (median, min,
//! max) and the settings a group's runs disagree on.

use std::collections::BTreeSet;

use super::input::Run;

/// Median, min and max of a set of values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Spread {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`, `None` if there are none.
    pub(super) fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Settings of `names` on which `runs` disagree, as `name: value, value`
/// (a missing one is `absent`).
pub(super) fn mixed_settings(runs: &[Run], names: &[&'static str]) -> Vec<String> {
    names
        .iter()
        .filter_map(|name| {
            let values: BTreeSet<&str> = runs
                .iter()
                .map(|r| r.other_settings.get(name).map_or("absent", String::as_str))
                .collect();
            (values.len() > 1).then(|| {
                format!(
                    "{name}: {}",
                    values.into_iter().collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}
