//! The charts' look: sizes, fonts, colours, and the text measurements
//! that keep labels inside their space.

use plotters::prelude::*;

/// Font of every text in the charts; SVG viewers pick their sans-serif.
pub(super) const FONT: &str = "sans-serif";

/// Width of the throughput and p99 charts, whatever the number of
/// configurations; also the widest the loss chart gets. A 900 px page shows
/// them at 900/960 of their size.
pub(crate) const MAX_WIDTH: u32 = 960;

/// The smallest text in any chart, in SVG px: 15 px on a 900 px page.
pub(crate) const MIN_TEXT_PX: f64 = 16.0;

pub(super) const TITLE_PX: f64 = 24.0;
pub(super) const TEXT_PX: f64 = 17.0;
pub(super) const VALUE_PX: f64 = MIN_TEXT_PX;

/// plotters' SVG backend writes a text's `font-size` as its style's size
/// divided by 1.24; sizes here are what ends up in the SVG.
pub(super) const PLOTTERS_FONT_SCALE: f64 = 1.24;

/// Series colours: the Okabe–Ito palette (distinguishable with the common
/// colour-vision deficiencies), then four of Paul Tol's, before repeating.
pub(super) const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(80, 80, 80),
    RGBColor(136, 34, 85),
    RGBColor(51, 34, 136),
    RGBColor(153, 153, 51),
    RGBColor(68, 170, 153),
];

pub(super) const GRID: RGBColor = RGBColor(225, 225, 225);
pub(super) const SEPARATOR: RGBColor = RGBColor(170, 170, 170);
pub(super) const SUBTLE: RGBColor = RGBColor(60, 60, 60);
/// Space around a plot, px.
pub(super) const MARGIN: u32 = 12;

/// Rough width in px of `text` at `px`: a little over DejaVu Sans' widths
/// (digits 0.64 em, most lowercase 0.6 em, narrow punctuation 0.32 em).
pub(super) fn text_width(text: &str, px: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            '.' | ',' | ' ' | ':' | ';' | 'i' | 'l' | 'j' | '|' | '\'' | '(' | ')' => 0.34,
            _ => 0.62,
        })
        .sum();
    em * px
}

/// Rough width in px of `text` in bold at `px`.
pub(super) fn bold_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * px * 0.66
}

/// Splits `text` into lines of at most `max_px` at `px`: between its
/// ` · `-separated items when they fit (the `·` stays at the end of its
/// line), else between words.
pub(super) fn wrap(text: &str, px: f64, max_px: f64) -> Vec<String> {
    let items: Vec<&str> = text.split(" · ").collect();
    let n = items.len();
    let mut pieces: Vec<String> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let item = if i + 1 < n {
            format!("{item} ·")
        } else {
            item.to_string()
        };
        if text_width(&item, px) <= max_px {
            pieces.push(item);
        } else {
            pieces.extend(item.split(' ').filter(|w| !w.is_empty()).map(str::to_owned));
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for piece in pieces {
        if !line.is_empty() && text_width(&format!("{line} {piece}"), px) > max_px {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&piece);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// A text style of `px` SVG pixels.
pub(super) fn font(px: f64) -> TextStyle<'static> {
    TextStyle::from((FONT, px * PLOTTERS_FONT_SCALE).into_font()).color(&BLACK)
}

/// A bold text style of `px` SVG pixels.
pub(super) fn bold(px: f64) -> TextStyle<'static> {
    TextStyle::from((FONT, px * PLOTTERS_FONT_SCALE, FontStyle::Bold).into_font()).color(&BLACK)
}

pub(super) fn draw_err<E: std::fmt::Display>(name: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("report: drawing {name}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_separators_at_line_ends() {
        // "aaaa ·" is 4 × 6.2 + 3.4 + 6.2 = 34.4 px wide at 10 px.
        let lines = wrap("aaaa · bbbb · cccc", 10.0, 75.0);
        assert_eq!(lines, ["aaaa · bbbb ·", "cccc"]);
        // An item is kept whole when it fits on a line of its own.
        let lines = wrap("aa · bbb ccc", 10.0, 60.0);
        assert_eq!(lines, ["aa ·", "bbb ccc"]);
        // Else it is split between words.
        let lines = wrap("aa · bbb ccc ddd", 10.0, 60.0);
        assert_eq!(lines, ["aa · bbb", "ccc ddd"]);
        assert_eq!(wrap("short", 10.0, 1000.0), ["short"]);
    }
}
