//! The benchmark's charts as SVG, written directly (no plotting library): the ratio of each
//! case on each device as bars on a logarithmic axis, and, for a size sweep, the throughput
//! of the bandwidth cases against the input size beside each device's copy bandwidth.

use kiln_bench::Report;
use std::fmt::Write;

/// Device colours, in the order devices first appear.
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// `text` with XML's special characters escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Each distinct value of `items`, in order of first appearance.
fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut seen: Vec<T> = Vec::new();
    for i in items {
        if !seen.contains(&i) {
            seen.push(i);
        }
    }
    seen
}

/// A legend of `devices` at (`x`, `y`), one line each in its colour.
fn legend(out: &mut String, devices: &[&str], x: f64, y: f64) {
    for (i, d) in devices.iter().enumerate() {
        let y = y + 18.0 * i as f64;
        let colour = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{colour}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            y - 10.0,
            x + 18.0,
            y,
            escape(d)
        );
    }
}

/// The ratio (baseline time / kiln time) of every row as a bar: one group of bars per case,
/// one bar per device, on a logarithmic axis with a line at 1 (as fast as the baseline).
/// Each bar is a `rect` of class `bar` with `data-case`, `data-backend` and `data-ratio`.
pub(crate) fn ratio_bars(reports: &[Report]) -> String {
    let rows: Vec<_> = reports.iter().flat_map(|r| &r.rows).collect();
    let cases = distinct(rows.iter().map(|r| r.case));
    let devices = distinct(rows.iter().map(|r| r.backend.as_str()));
    let (label_w, plot_w, bar_h) = (360.0, 560.0, 12.0);
    let group_h = bar_h * devices.len().max(1) as f64 + 10.0;
    let height = 60.0 + group_h * cases.len() as f64 + 18.0 * devices.len() as f64 + 40.0;
    let width = label_w + plot_w + 40.0;
    // The axis spans the ratios' decades, at least 0.1 to 10.
    let logs = rows
        .iter()
        .filter(|r| r.ratio() > 0.0)
        .map(|r| r.ratio().log10());
    let lo = logs.clone().fold(-1.0f64, f64::min).floor();
    let hi = logs.fold(1.0f64, f64::max).ceil();
    let x_of = |ratio: f64| label_w + (ratio.max(10f64.powf(lo)).log10() - lo) / (hi - lo) * plot_w;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="20" font-size="14">kiln: baseline time / kiln time (above 1: kiln is faster), by case and device</text>"#
    );
    let top = 40.0;
    let bottom = top + group_h * cases.len() as f64;
    for decade in lo as i32..=hi as i32 {
        let ratio = 10f64.powi(decade);
        let x = x_of(ratio);
        let stroke = if decade == 0 { "#000" } else { "#ccc" };
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="{stroke}"/><text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{ratio}</text>"#,
            bottom + 14.0
        );
    }
    for (c, case) in cases.iter().enumerate() {
        let y0 = top + group_h * c as f64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
            label_w - 8.0,
            y0 + group_h / 2.0,
            escape(case)
        );
        for (d, device) in devices.iter().enumerate() {
            let Some(row) = rows
                .iter()
                .find(|r| r.case == *case && r.backend == *device)
            else {
                continue;
            };
            let x0 = x_of(1.0);
            let x1 = x_of(row.ratio());
            let _ = writeln!(
                out,
                r#"<rect class="bar" data-case="{}" data-backend="{}" data-ratio="{:.4}" x="{:.1}" y="{:.1}" width="{:.1}" height="{bar_h}" fill="{}"><title>{} on {}: {:.2}</title></rect>"#,
                escape(case),
                escape(device),
                row.ratio(),
                x0.min(x1),
                y0 + 5.0 + bar_h * d as f64,
                (x1 - x0).abs().max(1.0),
                COLOURS[d % COLOURS.len()],
                escape(case),
                escape(device),
                row.ratio()
            );
        }
    }
    legend(&mut out, &devices, label_w, bottom + 40.0);
    out += "</svg>\n";
    out
}

/// A line of a chart and its legend entry.
struct Line<'a> {
    /// Its class: what it draws.
    class: &'a str,
    /// Its `data-` attributes, written out.
    data: String,
    /// Its points, `x,y` each.
    points: Vec<String>,
    colour: &'a str,
    width: u32,
    /// Its `stroke-dasharray`.
    dash: &'a str,
    /// The legend's words for it.
    label: String,
}

impl Line<'_> {
    /// Writes the line, and its legend entry at (`x`, `y`).
    fn draw(&self, out: &mut String, x: f64, y: f64) {
        let _ = writeln!(
            out,
            r#"<polyline class="{}" {} points="{}" fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}"/>"#,
            self.class,
            self.data,
            self.points.join(" "),
            self.colour,
            self.width,
            self.dash
        );
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{y}" font-size="12" fill="{}">{}</text>"#,
            self.colour,
            escape(&self.label)
        );
    }
}

/// One line per bandwidth case and device through its GB/s at each size of the sweep, and a
/// dashed line per device through its copy bandwidth. The lines are `polyline`s of class
/// `series` (with `data-case` and `data-backend`) and `bandwidth` (with `data-backend`).
pub(crate) fn throughput_lines(reports: &[Report]) -> String {
    let rows: Vec<_> = reports
        .iter()
        .flat_map(|r| &r.rows)
        .filter(|r| r.bytes.is_some())
        .collect();
    let series = distinct(rows.iter().map(|r| (r.case, r.backend.as_str())));
    let devices = distinct(
        rows.iter().map(|r| r.backend.as_str()).chain(
            reports
                .iter()
                .flat_map(|r| r.copy_gbs.iter().map(|(d, _)| d.as_str())),
        ),
    );
    let gbs = |bytes: usize, ms: f64| bytes as f64 / ms / 1e6;
    let sizes: Vec<f64> = reports.iter().map(|r| (r.n as f64).log2()).collect();
    let (x_lo, x_hi) = sizes
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
    let (x_lo, x_hi) = if x_lo < x_hi {
        (x_lo, x_hi)
    } else {
        (x_lo - 1.0, x_lo + 1.0)
    };
    let y_hi = rows
        .iter()
        .map(|r| gbs(r.bytes.unwrap_or(0), r.kiln_ms))
        .chain(
            reports
                .iter()
                .flat_map(|r| r.copy_gbs.iter().map(|(_, g)| *g)),
        )
        .filter(|g| g.is_finite())
        .fold(1.0f64, f64::max)
        * 1.1;
    let (left, top, w, h) = (70.0, 40.0, 700.0, 400.0);
    let at = |log2n: f64, g: f64| {
        (
            left + (log2n - x_lo) / (x_hi - x_lo) * w,
            top + h - g.min(y_hi) / y_hi * h,
        )
    };
    let legend_h = 18.0 * (series.len() + devices.len()) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">"#,
        left + w + 40.0,
        top + h + 60.0 + legend_h
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="20" font-size="14">kiln: GB/s moved against input size (2^n elements); dashed: the device's own copy</text>"#
    );
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#000"/>"##
    );
    for s in x_lo as i32..=x_hi as i32 {
        let (x, _) = at(s as f64, 0.0);
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">2^{s}</text>"#,
            top + h + 16.0
        );
    }
    for i in 0..=4 {
        let g = y_hi * i as f64 / 4.0;
        let (_, y) = at(x_lo, g);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{y:.1}" font-size="11" text-anchor="end">{g:.1}</text>"#,
            left - 6.0
        );
    }
    let colour = |device: &str| {
        let i = devices.iter().position(|d| *d == device).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    };
    let mut legend_y = top + h + 40.0;
    for (k, (case, device)) in series.iter().enumerate() {
        let points: Vec<String> = reports
            .iter()
            .filter_map(|rep| {
                let r = rep
                    .rows
                    .iter()
                    .find(|r| r.case == *case && r.backend == *device)?;
                let (x, y) = at((rep.n as f64).log2(), gbs(r.bytes?, r.kiln_ms));
                Some(format!("{x:.1},{y:.1}"))
            })
            .collect();
        let line = Line {
            class: "series",
            data: format!(
                r#"data-case="{}" data-backend="{}""#,
                escape(case),
                escape(device)
            ),
            points,
            colour: colour(device),
            width: 2,
            dash: ["", "4 2", "1 2", "6 2 1 2"][k % 4],
            label: format!("{case} on {device}"),
        };
        line.draw(&mut out, left, legend_y);
        legend_y += 18.0;
    }
    for device in &devices {
        let points: Vec<String> = reports
            .iter()
            .filter_map(|rep| {
                let (_, g) = rep.copy_gbs.iter().find(|(d, _)| d == device)?;
                let (x, y) = at((rep.n as f64).log2(), *g);
                Some(format!("{x:.1},{y:.1}"))
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let line = Line {
            class: "bandwidth",
            data: format!(r#"data-backend="{}""#, escape(device)),
            points,
            colour: colour(device),
            width: 1,
            dash: "8 4",
            label: format!("{device}'s own copy (dashed)"),
        };
        line.draw(&mut out, left, legend_y);
        legend_y += 18.0;
    }
    out += "</svg>\n";
    out
}
