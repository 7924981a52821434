//! The axes: [`Slots`] (categories, with gaps between groups), [`YAxis`]
//! (linear from 0, or logarithmic) with their ticks, [`Through`] (the
//! line charts' linear x axis through their values), the numbers written
//! at the ticks, and [`draw_axes`], the one place that styles a chart's
//! axes, labels and grid.

use std::ops::Range;

use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;

use super::style::{draw_err, font, GRID, TEXT_PX};

/// The pixel of the point a fraction `t` of the way along `limit`.
fn to_pixel(t: f64, limit: (i32, i32)) -> i32 {
    limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
}

/// The key points of an axis whose ticks are all bold: none for the light
/// grid, every tick for the bold one (whatever the hint's count).
fn bold_only<H: KeyPointHint>(hint: H, ticks: &[f64]) -> Vec<f64> {
    if hint.weight().allow_light_points() {
        Vec::new()
    } else {
        ticks.to_vec()
    }
}

/// A category axis: a tick at each position, half a slot of room before
/// the first and after the last. [`Slots::categories`] are `0, 1, …`; the
/// bar charts leave a gap between IO models.
pub(super) struct Slots(pub(super) Vec<f64>);

impl Slots {
    /// `n` categories at `0.0, 1.0, …, n-1`.
    pub(super) fn categories(n: usize) -> Slots {
        Slots((0..n).map(|i| i as f64).collect())
    }
}

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range();
        to_pixel((value - start) / (end - start), limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        bold_only(hint, &self.0)
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0.last().copied().unwrap_or(0.0) + 0.5
    }
}

/// The label of category `v` from `names` (empty between categories).
pub(super) fn category_label<T: ToString>(names: &[T], v: f64) -> String {
    names
        .get(v.round().max(0.0) as usize)
        .map_or_else(String::new, T::to_string)
}

/// The y axis of the bar charts, with its own ticks.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum YAxis {
    /// From 0 to the last tick.
    Linear { ticks: Vec<f64> },
    /// From the first tick to `top` (at or above the last tick),
    /// logarithmic.
    Log { ticks: Vec<f64>, top: f64 },
}

/// The smallest of 1, 2, 2.5, 5 × 10^k that is at least `v` (> 0).
fn nice_step(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// 1, 2, 5 × 10^k from the largest at or below `lo` up to `hi`
/// (0 < lo ≤ hi).
fn steps_125(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut k = lo.log10().floor() as i32 - 1;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(k);
            if v > hi * (1.0 + 1e-9) {
                return out;
            }
            if v <= lo * (1.0 + 1e-9) {
                out.clear();
            }
            out.push(v);
        }
        k += 1;
    }
}

impl YAxis {
    /// A linear axis from 0 with room for labels above `top`, the largest
    /// value, about 6 ticks.
    pub(super) fn linear(top: f64) -> YAxis {
        let top = if top > 0.0 { top * 1.1 } else { 1.0 };
        let step = nice_step(top / 6.0);
        let n = (top / step - 1e-9).ceil() as usize;
        YAxis::Linear {
            ticks: (0..=n).map(|i| i as f64 * step).collect(),
        }
    }

    /// A log axis from a tick at or below `lo` (the smallest value > 0) to
    /// a little above `hi` (the largest, room for a label): ticks at 1, 2,
    /// 5 × 10^k, or at powers of ten alone when that would be more than 9
    /// ticks.
    pub(super) fn log(lo: f64, hi: f64) -> YAxis {
        let hi = if hi > 0.0 { hi } else { 1.0 };
        let lo = if lo > 0.0 && lo <= hi { lo } else { hi };
        let lo = lo / 1.1;
        let top = (hi * 1.3).max(lo * 3.0);
        let ticks = steps_125(lo, top);
        let ticks = if ticks.len() > 9 {
            let (a, b) = (lo.log10().floor() as i32, top.log10().floor() as i32);
            (a..=b).map(|k| 10f64.powi(k)).collect()
        } else {
            ticks
        };
        YAxis::Log { ticks, top }
    }

    pub(super) fn ticks(&self) -> &[f64] {
        match self {
            YAxis::Linear { ticks } | YAxis::Log { ticks, .. } => ticks,
        }
    }

    /// Where `v` sits on the axis, 0 at the bottom and 1 at the top.
    pub(super) fn fraction(&self, v: f64) -> f64 {
        let Range { start: lo, end: hi } = self.range();
        match self {
            YAxis::Linear { .. } => (v - lo) / (hi - lo),
            YAxis::Log { .. } => (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()),
        }
    }
}

impl Ranged for YAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        to_pixel(self.fraction(*value), limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        bold_only(hint, self.ticks())
    }

    fn range(&self) -> Range<f64> {
        let ticks = self.ticks();
        match self {
            YAxis::Linear { .. } => ticks[0]..ticks[ticks.len() - 1],
            YAxis::Log { top, .. } => ticks[0]..*top,
        }
    }
}

/// The line charts' x axis: linear, with a tick at each value when they
/// are few and far enough apart to be labelled (loss levels 0, 1, 5, 10,
/// 20 %; 1,000 and 5,000 connections), else at round steps; a little
/// room on both sides so no mark sits on the frame.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Through {
    ticks: Vec<f64>,
    range: Range<f64>,
}

impl Through {
    /// The axis through the finite `values` (0 when there are none).
    pub(super) fn of(values: &[f64]) -> Through {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        if v.is_empty() {
            v.push(0.0);
        }
        let (lo, hi) = (v[0], v[v.len() - 1]);
        let span = hi - lo;
        if span <= 0.0 {
            let pad = lo.abs().max(1.0) * 0.5;
            return Through {
                ticks: vec![lo],
                range: lo - pad..hi + pad,
            };
        }
        let apart = v.len() <= 10 && v.windows(2).all(|w| w[1] - w[0] >= span * 0.04);
        let ticks = if apart {
            v
        } else {
            let step = nice_step(span / 6.0);
            let first = (lo / step).ceil() as i64;
            let last = (hi / step).floor() as i64;
            (first..=last).map(|i| i as f64 * step).collect()
        };
        let pad = span * 0.06;
        Through {
            ticks,
            range: lo - pad..hi + pad,
        }
    }

    /// The ticks.
    pub(super) fn ticks(&self) -> &[f64] {
        &self.ticks
    }
}

impl Ranged for Through {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range;
        to_pixel((value - start) / (end - start), limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        bold_only(hint, &self.ticks)
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// What the axes say.
pub(super) struct AxisText<'a> {
    /// The label of an x tick.
    pub(super) x_label: &'a dyn Fn(&f64) -> String,
    /// The label of a y tick.
    pub(super) y_label: &'a dyn Fn(&f64) -> String,
    /// Under the x axis, if anything.
    pub(super) x_desc: Option<&'a str>,
    /// Beside the y axis.
    pub(super) y_desc: &'a str,
}

/// Which grid lines a chart draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Grid {
    /// None (the loss chart's cells are their own grid).
    None,
    /// A light horizontal line at each y tick, and a tick label at each of
    /// `x_ticks` x positions.
    Horizontal {
        /// How many x positions have a tick.
        x_ticks: usize,
    },
}

/// Draws the axes of `chart` in the charts' style: tick labels and
/// descriptions in [`TEXT_PX`], with `grid`. `name` names the chart in an
/// error.
pub(super) fn draw_axes<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    text: &AxisText<'_>,
    grid: Grid,
    name: &str,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.x_label_formatter(text.x_label)
        .y_label_formatter(text.y_label)
        .y_desc(text.y_desc)
        .label_style(font(TEXT_PX))
        .axis_desc_style(font(TEXT_PX));
    if let Some(desc) = text.x_desc {
        mesh.x_desc(desc);
    }
    match grid {
        Grid::None => {
            mesh.disable_mesh();
        }
        Grid::Horizontal { x_ticks } => {
            mesh.disable_x_mesh()
                .bold_line_style(GRID)
                .light_line_style(WHITE)
                .x_labels(x_ticks)
                .y_labels(20);
        }
    }
    mesh.draw().map_err(draw_err(name))
}

/// Round trips per second on the axis and over bars, at most 3
/// significant digits: `0`, `950`, `12.5k`, `141k`, `1.25M`.
pub(super) fn fmt_rate(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds on the axis.
pub(super) fn fmt_us(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.2}"))
    }
}

/// Drops trailing zeros of a fixed-point number (`12.50` → `12.5`).
fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use plotters::coord::ranged1d::{BoldPoints, LightPoints};

    use super::*;

    #[test]
    fn axis_numbers() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(950.0), "950");
        assert_eq!(fmt_rate(12_500.0), "12.5k");
        assert_eq!(fmt_rate(40_000.0), "40k");
        assert_eq!(fmt_rate(140_528.0), "141k");
        assert_eq!(fmt_rate(1_250_000.0), "1.25M");
        assert_eq!(fmt_us(0.0), "0");
        assert_eq!(fmt_us(5.5), "5.5");
        assert_eq!(fmt_us(12.25), "12.2");
        assert_eq!(fmt_us(250.0), "250");
    }

    #[test]
    fn category_axis_centres_ticks() {
        let c = Slots::categories(4);
        assert_eq!(c.key_points(BoldPoints(10)), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(c.map(&-0.5, (0, 400)), 0);
        assert_eq!(c.map(&0.0, (0, 400)), 50);
        assert_eq!(c.map(&3.5, (0, 400)), 400);
        // Reversed pixel range (a y axis).
        assert_eq!(c.map(&-0.5, (400, 0)), 400);
    }

    #[test]
    fn slot_axis_has_a_tick_per_slot_and_room_around() {
        let s = Slots(vec![0.0, 1.0, 2.7]);
        assert_eq!(s.key_points(BoldPoints(3)), vec![0.0, 1.0, 2.7]);
        assert!(s.key_points(LightPoints::new(3, 30)).is_empty());
        assert_eq!(s.range(), -0.5..3.2);
    }

    #[test]
    fn linear_axis_has_round_ticks_above_the_top() {
        assert_eq!(nice_step(0.9), 1.0);
        assert_eq!(nice_step(23_000.0), 25_000.0);
        assert_eq!(nice_step(26_000.0), 50_000.0);
        let y = YAxis::linear(140_000.0);
        assert_eq!(y.ticks().first(), Some(&0.0));
        let last = *y.ticks().last().unwrap();
        assert!((154_000.0..=200_000.0).contains(&last), "{y:?}");
        assert!((5..=9).contains(&y.ticks().len()), "{y:?}");
    }

    #[test]
    fn through_axis_ticks_at_the_values_when_they_are_apart() {
        let x = Through::of(&[10.0, 0.0, 1.0, 5.0, 20.0, 5.0]);
        assert_eq!(x.ticks(), [0.0, 1.0, 5.0, 10.0, 20.0]);
        let r = x.range();
        assert!(r.start < 0.0 && r.end > 20.0, "{r:?}");
        assert_eq!(x.key_points(BoldPoints(2)).len(), 5);
        // Too close to label each: round steps.
        let x = Through::of(&[0.0, 0.1, 0.2, 10.0]);
        assert_eq!(x.ticks(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        // One value: a range around it.
        let x = Through::of(&[1000.0]);
        assert_eq!(x.ticks(), [1000.0]);
        assert!(x.range().start < 1000.0 && x.range().end > 1000.0);
        assert_eq!(Through::of(&[]).ticks(), [0.0]);
    }

    #[test]
    fn log_axis_ticks_1_2_5_and_keeps_small_values_apart() {
        let y = YAxis::log(165.0, 8000.0);
        assert_eq!(
            y.ticks(),
            [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10_000.0]
        );
        // Room above the largest value for its label, not a whole step.
        assert!((10_000.0..12_000.0).contains(&y.range().end), "{y:?}");
        // 165 µs and 300 µs are an eighth of the axis apart, not 1.3 %.
        assert!(y.fraction(300.0) - y.fraction(165.0) > 0.12);
        assert_eq!(y.fraction(0.0), 0.0, "non-positive values sit on the floor");
        // Many decades: powers of ten only.
        let y = YAxis::log(1.0, 1e7);
        assert_eq!(y.ticks().first(), Some(&0.1));
        assert!(y.ticks().iter().all(|t| {
            let l = t.log10();
            (l - l.round()).abs() < 1e-9
        }));
        // One value: still a range.
        let y = YAxis::log(50.0, 50.0);
        assert!(y.ticks().len() >= 2);
    }
}
