//! What frames a chart: the [`Header`] (title and subtitle) and the
//! series [`Legend`], drawn together as a [`Frame`], and the plot's
//! builder with the margins every chart uses ([`plot_on`]).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{
    bold, draw_err, font, text_width, wrap, MARGIN, PALETTE, SUBTLE, TEXT_PX, TITLE_PX,
};

/// A chart's page above its plot: the header, the legend under it.
pub(super) struct Frame {
    header: Header,
    legend: Legend,
}

impl Frame {
    /// The frame of a chart titled `title`, its series named `names`.
    pub(super) fn new(title: &str, subtitle: &[String], names: &[&str], width: u32) -> Frame {
        Frame {
            header: Header::new(title, subtitle, width),
            legend: Legend::new(names, width),
        }
    }

    /// The page's height around a plot `plot_h` high with `x_area` of x
    /// labels under it.
    pub(super) fn page_height(&self, plot_h: u32, x_area: u32) -> u32 {
        self.header.height() + self.legend.height() + MARGIN + plot_h + x_area + MARGIN
    }

    /// Fills `root` white, draws the header and the legend, and returns the
    /// area below them; `name` (the file) names it in errors.
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        name: &str,
    ) -> Result<DrawingArea<DB, Shift>, String>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(draw_err(name))?;
        self.legend.draw(&self.header.draw(root)?)
    }
}

/// The plot's builder on `body`: the margins every chart uses, `x_area` and
/// `y_area` for the axes' labels.
pub(super) fn plot_on<'a, 'b, DB: DrawingBackend>(
    body: &'a DrawingArea<DB, Shift>,
    x_area: u32,
    y_area: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(body);
    builder
        .margin(MARGIN)
        .margin_right(2 * MARGIN)
        .x_label_area_size(x_area)
        .y_label_area_size(y_area);
    builder
}

/// The title and the subtitle wrapped to `width`.
pub(super) struct Header {
    title: String,
    lines: Vec<String>,
}

const LINE_H: u32 = 24;

impl Header {
    pub(super) fn new(title: &str, subtitle: &[String], width: u32) -> Header {
        let max = f64::from(width) - 40.0;
        Header {
            title: title.to_string(),
            lines: subtitle
                .iter()
                .flat_map(|s| wrap(s, TEXT_PX, max))
                .collect(),
        }
    }

    pub(super) fn height(&self) -> u32 {
        14 + 34 + self.lines.len() as u32 * LINE_H + 8
    }

    /// Draws the header at the top of `area`, returns the area below it.
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<DrawingArea<DB, Shift>, String>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = area.dim_in_pixel();
        let center = Pos::new(HPos::Center, VPos::Top);
        let (top, rest) = area.split_vertically(self.height());
        let err = draw_err("title");
        top.draw(&Text::new(
            self.title.clone(),
            (w as i32 / 2, 14),
            bold(TITLE_PX).pos(center),
        ))
        .map_err(&err)?;
        for (i, line) in self.lines.iter().enumerate() {
            top.draw(&Text::new(
                line.clone(),
                (w as i32 / 2, 14 + 34 + i as i32 * LINE_H as i32),
                font(TEXT_PX).color(&SUBTLE).pos(center),
            ))
            .map_err(&err)?;
        }
        Ok(rest)
    }
}

/// The series legend: colour swatches and names in rows under the header.
struct Legend {
    entries: Vec<(String, RGBColor)>,
    columns: usize,
    column_w: u32,
}

const LEGEND_ROW_H: u32 = 28;
const SWATCH: i32 = 16;

impl Legend {
    /// The legend of series named `names`, coloured in [`PALETTE`] order;
    /// none for a single series (the subtitle says what it is).
    pub(super) fn new(names: &[&str], width: u32) -> Legend {
        let entries: Vec<(String, RGBColor)> = if names.len() > 1 {
            names
                .iter()
                .enumerate()
                .map(|(j, l)| (l.to_string(), PALETTE[j % PALETTE.len()]))
                .collect()
        } else {
            Vec::new()
        };
        let column_w = entries
            .iter()
            .map(|(l, _)| text_width(l, TEXT_PX).ceil() as u32)
            .max()
            .unwrap_or(0)
            + SWATCH as u32
            + 8
            + 28;
        let columns = ((width - 40) / column_w.max(1)).clamp(1, entries.len().max(1) as u32);
        Legend {
            entries,
            columns: columns as usize,
            column_w,
        }
    }

    pub(super) fn height(&self) -> u32 {
        if self.entries.is_empty() {
            return 0;
        }
        self.entries.len().div_ceil(self.columns) as u32 * LEGEND_ROW_H + 6
    }

    /// Draws the legend at the top of `area`, returns the area below it.
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<DrawingArea<DB, Shift>, String>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = area.dim_in_pixel();
        let (top, rest) = area.split_vertically(self.height());
        let err = draw_err("legend");
        let total = self.columns.min(self.entries.len()) as u32 * self.column_w;
        let x0 = (w.saturating_sub(total) / 2) as i32;
        for (i, (l, color)) in self.entries.iter().enumerate() {
            let x = x0 + (i % self.columns) as i32 * self.column_w as i32;
            let y = (i / self.columns) as i32 * LEGEND_ROW_H as i32 + 4;
            top.draw(&Rectangle::new(
                [(x, y + 2), (x + SWATCH, y + 2 + SWATCH)],
                color.filled(),
            ))
            .map_err(&err)?;
            top.draw(&Text::new(
                l.clone(),
                (x + SWATCH + 8, y + 2 + SWATCH / 2),
                font(TEXT_PX).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(&err)?;
        }
        Ok(rest)
    }
}
