//! Hand-written SVG charts (no plotting dependency): line charts and grouped bar charts,
//! composed side by side into one figure. Missing values (`None`) are left out: a gap in a
//! line, no bar ("n/a" under a group without any); a zero is drawn as a sliver.

use std::fmt::Write as _;

/// Panel size, px.
pub const PANEL_WIDTH: f64 = 420.0;
/// Panel size, px.
pub const PANEL_HEIGHT: f64 = 340.0;

const MARGIN_LEFT: f64 = 56.0;
const MARGIN_RIGHT: f64 = 12.0;
const MARGIN_TOP: f64 = 28.0;
const MARGIN_BOTTOM: f64 = 118.0;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One line or one bar colour.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// One value per x position / group.
    pub values: Vec<Option<f64>>,
}

/// Escapes text for SVG.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if max <= step * magnitude {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn format_tick(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{:.1}M", value / 1_000_000.0)
    } else if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 1000.0 {
        format!("{:.1}k", value / 1000.0)
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').to_string()
    }
}

struct Frame {
    y_max: f64,
    plot_w: f64,
    plot_h: f64,
}

impl Frame {
    fn y(&self, value: f64) -> f64 {
        MARGIN_TOP + self.plot_h * (1.0 - (value / self.y_max).clamp(0.0, 1.0))
    }
}

/// Axes, grid, title and y ticks; returns the frame.
fn axes(out: &mut String, title: &str, y_title: &str, y_max: f64) -> Frame {
    let frame = Frame {
        y_max,
        plot_w: PANEL_WIDTH - MARGIN_LEFT - MARGIN_RIGHT,
        plot_h: PANEL_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM,
    };
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
        PANEL_WIDTH / 2.0,
        escape(title)
    );
    for i in 0..=4 {
        let value = y_max * f64::from(i) / 4.0;
        let y = frame.y(value);
        let _ = writeln!(
            out,
            r##"<line x1="{MARGIN_LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/>"##,
            MARGIN_LEFT + frame.plot_w
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10">{}</text>"#,
            MARGIN_LEFT - 4.0,
            y + 3.0,
            format_tick(value)
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" y2="{:.1}" stroke="#333333"/>"##,
        MARGIN_TOP + frame.plot_h
    );
    let _ = writeln!(
        out,
        r##"<line x1="{MARGIN_LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333333"/>"##,
        MARGIN_TOP + frame.plot_h,
        MARGIN_LEFT + frame.plot_w,
        MARGIN_TOP + frame.plot_h
    );
    let _ = writeln!(
        out,
        r#"<text x="14" y="{:.1}" text-anchor="middle" font-size="11" transform="rotate(-90 14 {:.1})">{}</text>"#,
        MARGIN_TOP + frame.plot_h / 2.0,
        MARGIN_TOP + frame.plot_h / 2.0,
        escape(y_title)
    );
    frame
}

/// The legend below the plot, wrapped into rows.
fn legend(out: &mut String, series: &[Series]) {
    let mut x = MARGIN_LEFT;
    let mut y = PANEL_HEIGHT - 30.0;
    for (i, s) in series.iter().enumerate() {
        let width = 26.0 + 6.5 * s.name.chars().count() as f64;
        if x > MARGIN_LEFT && x + width > PANEL_WIDTH - MARGIN_RIGHT {
            x = MARGIN_LEFT;
            y += 14.0;
        }
        let colour = PALETTE[i % PALETTE.len()];
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{colour}"/>"#,
            y - 9.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{y:.1}" font-size="10">{}</text>"#,
            x + 13.0,
            escape(&s.name)
        );
        x += width;
    }
}

fn x_label(out: &mut String, x: f64, frame: &Frame, text: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
        MARGIN_TOP + frame.plot_h + 14.0,
        escape(text)
    );
}

/// A category label under a bar group, slanted so that long names do not collide.
fn slanted_label(out: &mut String, x: f64, frame: &Frame, text: &str) {
    let y = MARGIN_TOP + frame.plot_h + 12.0;
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="end" font-size="10" transform="rotate(-30 {x:.1} {y:.1})">{}</text>"#,
        escape(text)
    );
}

fn x_title(out: &mut String, frame: &Frame, text: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
        MARGIN_LEFT + frame.plot_w / 2.0,
        MARGIN_TOP + frame.plot_h + 32.0,
        escape(text)
    );
}

/// A line chart panel (`y_max` = `None`: from the data).
pub fn line_chart(
    title: &str,
    x_axis: &str,
    x_labels: &[String],
    y_axis: &str,
    y_max: Option<f64>,
    series: &[Series],
) -> String {
    let data_max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let mut out = String::new();
    let frame = axes(
        &mut out,
        title,
        y_axis,
        y_max.unwrap_or_else(|| nice_max(data_max)),
    );
    let n = x_labels.len().max(1);
    let x_of = |i: usize| {
        if n == 1 {
            MARGIN_LEFT + frame.plot_w / 2.0
        } else {
            MARGIN_LEFT + 16.0 + (frame.plot_w - 32.0) * i as f64 / (n - 1) as f64
        }
    };
    for (i, label) in x_labels.iter().enumerate() {
        x_label(&mut out, x_of(i), &frame, label);
    }
    x_title(&mut out, &frame, x_axis);
    for (index, s) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        let mut segment: Vec<(f64, f64)> = Vec::new();
        let flush = |out: &mut String, segment: &mut Vec<(f64, f64)>| {
            if segment.len() > 1 {
                let points: Vec<String> = segment
                    .iter()
                    .map(|(x, y)| format!("{x:.1},{y:.1}"))
                    .collect();
                let _ = writeln!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                    points.join(" ")
                );
            }
            segment.clear();
        };
        for (i, value) in s.values.iter().enumerate() {
            match value {
                Some(v) => {
                    let (x, y) = (x_of(i), frame.y(*v));
                    let _ = writeln!(
                        out,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"><title>{}: {}</title></circle>"#,
                        escape(&s.name),
                        format_tick(*v)
                    );
                    segment.push((x, y));
                }
                None => flush(&mut out, &mut segment),
            }
        }
        flush(&mut out, &mut segment);
    }
    legend(&mut out, series);
    out
}

/// A grouped bar chart panel (`y_max` = `None`: from the data).
pub fn bar_chart(
    title: &str,
    groups: &[String],
    y_axis: &str,
    y_max: Option<f64>,
    series: &[Series],
) -> String {
    let data_max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let mut out = String::new();
    let frame = axes(
        &mut out,
        title,
        y_axis,
        y_max.unwrap_or_else(|| nice_max(data_max)),
    );
    let group_w = frame.plot_w / groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    for (g, group) in groups.iter().enumerate() {
        let left = MARGIN_LEFT + group_w * g as f64 + group_w * 0.1;
        slanted_label(&mut out, left + group_w * 0.4, &frame, group);
        let mut any = false;
        for (index, s) in series.iter().enumerate() {
            let Some(Some(value)) = s.values.get(g) else {
                continue;
            };
            any = true;
            let colour = PALETTE[index % PALETTE.len()];
            // A zero still shows as a sliver, so that it differs from "n/a".
            let top = frame.y(*value).min(MARGIN_TOP + frame.plot_h - 2.0);
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{} / {}: {}</title></rect>"#,
                left + bar_w * index as f64,
                (bar_w - 1.0).max(1.0),
                (MARGIN_TOP + frame.plot_h - top).max(0.0),
                escape(group),
                escape(&s.name),
                format_tick(*value)
            );
        }
        if !any {
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#888888">n/a</text>"##,
                left + group_w * 0.4,
                MARGIN_TOP + frame.plot_h - 4.0
            );
        }
    }
    legend(&mut out, series);
    out
}

/// Panels side by side in one SVG document.
pub fn figure(title: &str, panels: &[String]) -> String {
    let width = PANEL_WIDTH * panels.len().max(1) as f64;
    let height = PANEL_HEIGHT + 24.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="8" y="16" font-size="12" fill="#444444">{}</text>"##,
        escape(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<g transform="translate({:.0},24)">"#,
            PANEL_WIDTH * i as f64
        );
        out.push_str(panel);
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}
