//! The loss chart: one cell per payload × window, coloured by the median
//! lost echoes per run (green when nothing was lost), labelled with the
//! median, the worst run, the number of runs and how many of them failed.
//! Cells the inputs have no run for say "not measured".

use std::collections::BTreeSet;

use plotters::coord::cartesian::Cartesian2d;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{category_label, draw_axes, AxisText, Grid, Slots};
use super::dims::{split_dims, BATCH, CLIENTS, FAMILY, IO, LANES, WORK};
use super::frame::Header;
use super::style::{bold, bold_width, draw_err, font, text_width, MARGIN, MAX_WIDTH, MIN_TEXT_PX};
use crate::report::input::{ConfigKey, Run};
use crate::report::summary::{fmt_lost, LossCell, Report};

const NO_LOSS: RGBColor = RGBColor(199, 233, 192);
const NOT_RUN: RGBColor = RGBColor(242, 242, 242);
const LOSS_LOW: RGBColor = RGBColor(253, 208, 162);
const LOSS_HIGH: RGBColor = RGBColor(165, 15, 21);

/// Fill colour of a loss cell: green for none, light orange to dark red
/// on a log scale up to the largest median.
pub(super) fn loss_color(median: f64, top: f64) -> RGBColor {
    if median <= 0.0 {
        return NO_LOSS;
    }
    let t = if top > 0.0 {
        (median.ln_1p() / top.ln_1p()).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    RGBColor(
        mix(LOSS_LOW.0, LOSS_HIGH.0),
        mix(LOSS_LOW.1, LOSS_HIGH.1),
        mix(LOSS_LOW.2, LOSS_HIGH.2),
    )
}

const CELL_MAIN_PX: f64 = 19.0;
const LOSS_Y_AREA: u32 = 120;
const LOSS_X_AREA: u32 = 70;
const CELL_H: u32 = 100;
const CELL_MAX_W: u32 = 220;
const LOSS_MIN_WIDTH: u32 = 760;
const LOSS_MIN_PLOT_H: u32 = 300;

/// The lines of a loss cell that fit in `max_px`: the median in bold
/// (`no loss`, `12 lost/run`, or the bare number when that does not fit),
/// then the worst run and the run count, then the failed runs.
fn cell_lines(c: &LossCell, max_px: f64) -> Vec<(String, bool)> {
    let median = c.median();
    let main = if median == 0.0 && c.max() == 0 {
        if bold_width("no loss", CELL_MAIN_PX) <= max_px {
            "no loss".to_string()
        } else {
            "0".to_string()
        }
    } else {
        let long = format!("{} lost/run", fmt_lost(median));
        if bold_width(&long, CELL_MAIN_PX) <= max_px {
            long
        } else {
            fmt_lost(median)
        }
    };
    let mut lines = vec![(main, true)];
    let detail = format!("max {} · {} runs", c.max(), c.lost.len());
    if text_width(&detail, MIN_TEXT_PX) <= max_px {
        lines.push((detail, false));
        if c.failed_runs > 0 {
            lines.push((format!("{} failed", c.failed_runs), false));
        }
    }
    lines
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Slots, Slots>>;

/// The runs the chart is made of: those with a payload, a window and a
/// lost count.
fn charted_runs(report: &Report) -> Vec<&Run> {
    report
        .groups
        .iter()
        .flat_map(|g| &g.runs)
        .filter(|r| {
            r.key.payload_bytes.is_some() && r.key.window.is_some() && r.udp_lost_messages.is_some()
        })
        .collect()
}

/// How to read a cell, how many runs lost echoes, and what every run
/// shares or what the cells pool over.
fn subtitle(runs: &[&Run]) -> Vec<String> {
    let keys: Vec<&ConfigKey> = runs.iter().map(|r| &r.key).collect();
    let (constant, varying) = split_dims(&keys, &[FAMILY, CLIENTS, WORK, BATCH, LANES, IO]);
    let mut pooled = constant.join(" · ");
    if !varying.is_empty() {
        let names: Vec<&str> = varying.iter().map(|d| d.name).collect();
        if !pooled.is_empty() {
            pooled.push_str(" · ");
        }
        pooled.push_str(&format!("pooled over {}", names.join(", ")));
    }
    let lossy = runs
        .iter()
        .filter(|r| r.udp_lost_messages.unwrap_or(0) > 0)
        .count();
    let verdict = if lossy == 0 {
        format!("no loss: no echo lost in any of the {} runs", runs.len())
    } else {
        format!("{lossy} of {} runs lost echoes", runs.len())
    };
    vec![
        "cell: median lost echoes per run (both phases),".to_string(),
        "the worst run, the runs and how many failed (they count too)".to_string(),
        verdict,
        pooled,
    ]
}

/// The sorted distinct values of `f` over the cells.
fn axis_values(report: &Report, f: fn(&LossCell) -> u64) -> Vec<u64> {
    report
        .loss
        .iter()
        .map(f)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `loss.svg`, or `None` when no run has payload, window and
/// `udp_lost_messages`; `name` (the file) names it in errors.
pub(super) fn svg(report: &Report, name: &str) -> Result<Option<String>, String> {
    if report.loss.is_empty() {
        return Ok(None);
    }
    let err = draw_err(name);
    let windows = axis_values(report, |c| c.window);
    let payloads = axis_values(report, |c| c.payload_bytes);
    let title = "Lost UDP echoes by payload and window";
    let (nw, np) = (windows.len(), payloads.len());
    let fixed = MARGIN + LOSS_Y_AREA + 3 * MARGIN;
    let cell_w = ((MAX_WIDTH - fixed) / nw as u32).min(CELL_MAX_W);
    let width = (fixed + nw as u32 * cell_w).max(LOSS_MIN_WIDTH);
    let header = Header::new(title, &subtitle(&charted_runs(report)), width);
    // Tall enough for the y axis description.
    let plot_h = (np as u32 * CELL_H).max(LOSS_MIN_PLOT_H);
    let height = header.height() + MARGIN + plot_h + LOSS_X_AREA + MARGIN;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let body = header.draw(&root)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(MARGIN)
            .margin_right(3 * MARGIN)
            .x_label_area_size(LOSS_X_AREA)
            .y_label_area_size(LOSS_Y_AREA)
            .build_cartesian_2d(Slots::categories(nw), Slots::categories(np))
            .map_err(&err)?;
        let text = AxisText {
            x_label: &|v: &f64| category_label(&windows, *v),
            y_label: &|v: &f64| category_label(&payloads, *v),
            x_desc: Some("window (datagrams in flight per client)"),
            y_desc: "payload (bytes per datagram)",
        };
        draw_axes(&mut chart, &text, Grid::None, name)?;
        let cell_px = f64::from(chart.plotting_area().dim_in_pixel().0) / nw as f64 * 0.96 - 10.0;
        draw_not_measured(report, &mut chart, (&windows, &payloads), cell_px, name)?;
        let top = report.loss.iter().map(LossCell::median).fold(0.0, f64::max);
        for c in &report.loss {
            let i = windows.iter().position(|&w| w == c.window).unwrap_or(0) as f64;
            let j = payloads
                .iter()
                .position(|&p| p == c.payload_bytes)
                .unwrap_or(0) as f64;
            draw_cell(c, &mut chart, (i, j), top, cell_px, name)?;
        }
        root.present().map_err(&err)?;
    }
    Ok(Some(svg))
}

/// A grey cell for each payload × window the inputs have no run of.
fn draw_not_measured(
    report: &Report,
    chart: &mut Chart<'_, '_>,
    (windows, payloads): (&[u64], &[u64]),
    cell_px: f64,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    let text = if text_width("not measured", MIN_TEXT_PX) <= cell_px {
        "not measured"
    } else {
        "–"
    };
    for (i, w) in windows.iter().enumerate() {
        for (j, p) in payloads.iter().enumerate() {
            if report
                .loss
                .iter()
                .any(|c| c.window == *w && c.payload_bytes == *p)
            {
                continue;
            }
            let (x, y) = (i as f64, j as f64);
            chart
                .draw_series([Rectangle::new(
                    [(x - 0.48, y - 0.46), (x + 0.48, y + 0.46)],
                    NOT_RUN.filled(),
                )])
                .map_err(&err)?;
            chart
                .draw_series([EmptyElement::at((x, y))
                    + Text::new(
                        text,
                        (0, 0),
                        font(MIN_TEXT_PX)
                            .color(&RGBColor(110, 110, 110))
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )])
                .map_err(&err)?;
        }
    }
    Ok(())
}

/// One measured cell at `(i, j)`: its colour (against `top`, the largest
/// median) and its lines of text.
fn draw_cell(
    c: &LossCell,
    chart: &mut Chart<'_, '_>,
    (i, j): (f64, f64),
    top: f64,
    cell_px: f64,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    let median = c.median();
    let dark = median > 0.0 && top > 0.0 && median.ln_1p() / top.ln_1p() > 0.55;
    let ink = if dark { WHITE } else { BLACK };
    chart
        .draw_series([Rectangle::new(
            [(i - 0.48, j - 0.46), (i + 0.48, j + 0.46)],
            loss_color(median, top).filled(),
        )])
        .map_err(&err)?;
    let lines = cell_lines(c, cell_px);
    let line_h = |main: bool| if main { 26 } else { 22 };
    let total: i32 = lines.iter().map(|(_, m)| line_h(*m)).sum();
    let mut y = -total / 2;
    for (text, main) in lines {
        let style = if main {
            bold(CELL_MAIN_PX)
        } else {
            font(MIN_TEXT_PX)
        };
        let h = line_h(main);
        chart
            .draw_series([EmptyElement::at((i, j))
                + Text::new(
                    text,
                    (0, y + h / 2),
                    style.color(&ink).pos(Pos::new(HPos::Center, VPos::Center)),
                )])
            .map_err(&err)?;
        y += h;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_colours() {
        assert_eq!(loss_color(0.0, 100.0), NO_LOSS);
        assert_eq!(loss_color(100.0, 100.0), LOSS_HIGH);
        let mid = loss_color(10.0, 100.0);
        assert!(mid.0 < LOSS_LOW.0 && mid.0 > LOSS_HIGH.0);
    }
}
