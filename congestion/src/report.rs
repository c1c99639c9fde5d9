//! Writers of the results:
//!
//! - [`intervals_csv`] / [`rounds_csv`]: one row per interval / per round (RFC 4180 quoting);
//! - [`to_json`]: rounds and the per-(tier, direction) summaries;
//! - [`html`]: a self-contained page with three hand-written inline SVG plots after the
//!   Yellowstone study's figures — stacked zero/non-zero interval shares per tier and
//!   direction (Fig. 5), box plots of the max (Fig. 6) and of the mean non-zero FITF (Fig. 7)
//!   per non-zero round, whiskers at 1.5·IQR with outliers as points;
//! - [`prometheus`]: the Prometheus text exposition format (`# HELP`/`# TYPE` once per
//!   metric, label values escaped: `\` → `\\`, `"` → `\"`, newline → `\n`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::fitf::{BoxStats, GroupSummary, Metric, PauseSide, Round};
use crate::sample::{PortId, PortKey, Sample};

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A metric's short name ("fitf", "pfc_rx_p3").
pub fn metric_name(m: &Metric) -> String {
    match m {
        Metric::Fitf => "fitf".to_string(),
        Metric::PfcPaused { priority, side } => format!(
            "pfc_{}_p{priority}",
            match side {
                PauseSide::Rx => "rx",
                PauseSide::Tx => "tx",
            }
        ),
    }
}

fn port_cols(p: &PortId) -> String {
    format!(
        "{},{},{},{}",
        csv_field(&p.node),
        p.port,
        csv_field(&p.tier.to_string()),
        p.dir
    )
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// One row per interval of every round.
pub fn intervals_csv(rounds: &[Round]) -> String {
    let mut out = String::from(
        "node,port,tier,dir,metric,round_start_ns,index,t_start_ns,t_end_ns,delta,value,status\n",
    );
    for r in rounds {
        for i in &r.intervals {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{}",
                port_cols(&r.port),
                metric_name(&r.metric),
                r.t_start_ns,
                i.index,
                i.t_start_ns,
                i.t_end_ns,
                opt(i.delta),
                opt(i.value),
                i.status.name()
            );
        }
    }
    out
}

/// One row per round with its statistics.
pub fn rounds_csv(rounds: &[Round]) -> String {
    let mut out = String::from(
        "node,port,tier,dir,metric,round_start_ns,intervals,valid,nonzero,share_nonzero,max,mean,mean_nonzero,above_one,saturated,resets\n",
    );
    for r in rounds {
        let s = &r.stats;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            port_cols(&r.port),
            metric_name(&r.metric),
            r.t_start_ns,
            s.intervals,
            s.valid,
            s.nonzero,
            s.share_nonzero,
            s.max,
            s.mean,
            opt(s.mean_nonzero),
            s.above_one,
            s.saturated,
            s.resets
        );
    }
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    rounds: &'a [Round],
    groups: &'a [GroupSummary],
}

/// `{"rounds": [...], "groups": [...]}`.
pub fn to_json(rounds: &[Round], groups: &[GroupSummary]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&JsonReport { rounds, groups })
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const W: f64 = 720.0;
const H: f64 = 340.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 60.0;

fn group_label(g: &GroupSummary) -> String {
    format!("{} {}", g.tier, g.dir)
}

fn svg_open(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img"><title>{}</title>"#,
        esc(title)
    );
    let _ = write!(
        out,
        r##"<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>"##,
        W / 2.0,
        esc(title)
    );
}

/// The y axis with ticks from 0 to `top` (in `unit`).
fn y_axis(out: &mut String, top: f64, fmt: impl Fn(f64) -> String) {
    let plot_h = H - TOP - BOTTOM;
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##,
        H - BOTTOM
    );
    for k in 0..=4 {
        let v = top * f64::from(k) / 4.0;
        let y = H - BOTTOM - plot_h * f64::from(k) / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            LEFT,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            esc(&fmt(v))
        );
    }
}

fn x_label(out: &mut String, x: f64, label: &str) {
    let _ = write!(
        out,
        r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
        H - BOTTOM + 16.0,
        esc(label)
    );
}

fn stacked_bars(groups: &[GroupSummary]) -> String {
    let mut out = String::new();
    svg_open(
        &mut out,
        "Intervals with zero / non-zero wait per tier and direction (cf. Yellowstone Fig. 5)",
    );
    y_axis(&mut out, 100.0, |v| format!("{v:.0}%"));
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot = plot_w / groups.len().max(1) as f64;
    for (i, g) in groups.iter().enumerate() {
        let x = LEFT + slot * i as f64 + slot * 0.2;
        let bw = slot * 0.6;
        let nz = g.share_nonzero();
        let nz_h = plot_h * nz;
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="#c0392b"><title>{}: non-zero {:.1}%</title></rect>"##,
            H - BOTTOM - nz_h,
            nz_h,
            esc(&group_label(g)),
            nz * 100.0
        );
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{TOP:.1}" width="{bw:.1}" height="{:.1}" fill="#bdc3c7"><title>{}: zero {:.1}%</title></rect>"##,
            plot_h - nz_h,
            esc(&group_label(g)),
            (1.0 - nz) * 100.0
        );
        x_label(&mut out, x + bw / 2.0, &group_label(g));
    }
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{:.1}" font-size="11" fill="#c0392b">non-zero</text><text x="{:.1}" y="{:.1}" font-size="11" fill="#7f8c8d">zero</text>"##,
        H - 12.0,
        LEFT + 70.0,
        H - 12.0
    );
    out.push_str("</svg>");
    out
}

fn box_plot(title: &str, series: &[(String, Vec<f64>)]) -> String {
    let mut out = String::new();
    svg_open(&mut out, title);
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(0.01)
        * 1.05;
    y_axis(&mut out, top, |v| format!("{v:.2}"));
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let y = |v: f64| H - BOTTOM - plot_h * (v / top).clamp(0.0, 1.0);
    let slot = plot_w / series.len().max(1) as f64;
    for (i, (label, values)) in series.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let bw = (slot * 0.5).min(60.0);
        x_label(&mut out, cx, label);
        let Some(b) = BoxStats::of(values) else {
            continue;
        };
        let _ = write!(
            out,
            r##"<g><title>{}: n={} median={:.3} q1={:.3} q3={:.3}</title><line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="#333"/><rect x="{:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="#aed6f1" stroke="#333"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-width="2"/></g>"##,
            esc(label),
            b.n,
            b.median,
            b.q1,
            b.q3,
            y(b.whisker_low),
            y(b.whisker_high),
            cx - bw / 2.0,
            y(b.q3),
            (y(b.q1) - y(b.q3)).max(0.5),
            cx - bw / 2.0,
            y(b.median),
            cx + bw / 2.0,
            y(b.median)
        );
        for o in &b.outliers {
            let _ = write!(
                out,
                r##"<circle cx="{cx:.1}" cy="{:.1}" r="2" fill="none" stroke="#555"/>"##,
                y(*o)
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// A self-contained HTML page with the three plots and a summary table.
pub fn html(title: &str, groups: &[GroupSummary]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{t}</title></head><body><h1>{t}</h1>",
        t = esc(title)
    );
    out.push_str("<table border=\"1\"><thead><tr><th>tier</th><th>dir</th><th>rounds</th><th>non-zero rounds</th><th>intervals</th><th>non-zero share</th><th>FITF &gt; 1</th><th>saturated</th></tr></thead><tbody>");
    for g in groups {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{}</td><td>{}</td></tr>",
            esc(&g.tier.to_string()),
            g.dir,
            g.rounds,
            g.nonzero_rounds,
            g.intervals,
            g.share_nonzero() * 100.0,
            g.above_one,
            g.saturated
        );
    }
    out.push_str("</tbody></table>");
    out.push_str("<h2>Zero and non-zero intervals</h2><div>");
    out.push_str(&stacked_bars(groups));
    out.push_str("</div><h2>Max FITF per non-zero round</h2><div>");
    let max: Vec<(String, Vec<f64>)> = groups
        .iter()
        .map(|g| (group_label(g), g.max_per_nonzero_round.clone()))
        .collect();
    out.push_str(&box_plot(
        "Max FITF per non-zero round (cf. Yellowstone Fig. 6)",
        &max,
    ));
    out.push_str("</div><h2>Mean non-zero FITF per non-zero round</h2><div>");
    let mean: Vec<(String, Vec<f64>)> = groups
        .iter()
        .map(|g| (group_label(g), g.mean_per_nonzero_round.clone()))
        .collect();
    out.push_str(&box_plot(
        "Mean non-zero FITF per non-zero round (cf. Yellowstone Fig. 7)",
        &mean,
    ));
    out.push_str("</div></body></html>\n");
    out
}

/// Escapes a label value for the Prometheus text format.
pub fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn labels(p: &PortId, extra: &[(&str, String)]) -> String {
    let mut s = format!(
        "node=\"{}\",port=\"{}\",tier=\"{}\",dir=\"{}\"",
        escape_label(&p.node),
        p.port,
        escape_label(&p.tier.to_string()),
        p.dir
    );
    for (k, v) in extra {
        let _ = write!(s, ",{k}=\"{}\"", escape_label(v));
    }
    s
}

struct Family {
    help: &'static str,
    kind: &'static str,
    lines: Vec<String>,
}

/// The Prometheus text exposition of the latest sample of each port in `samples` and the
/// latest round of each port and metric in `rounds`.
pub fn prometheus(samples: &[Sample], rounds: &[Round]) -> String {
    let mut latest: BTreeMap<PortKey, &Sample> = BTreeMap::new();
    for s in samples {
        latest.insert(s.port.key(), s);
    }
    let mut last_round: BTreeMap<(PortKey, String), &Round> = BTreeMap::new();
    for r in rounds {
        last_round.insert((r.port.key(), metric_name(&r.metric)), r);
    }
    let mut fams: BTreeMap<&'static str, Family> = BTreeMap::new();
    let mut push = |name: &'static str, help: &'static str, kind: &'static str, line: String| {
        fams.entry(name)
            .or_insert_with(|| Family {
                help,
                kind,
                lines: Vec::new(),
            })
            .lines
            .push(line);
    };
    for s in latest.values() {
        if let Some(w) = s.xmit_wait {
            push(
                "hawkmesh_port_xmit_wait_ticks_total",
                "PortXmitWait: ticks of tau the port had data to send but no credits.",
                "counter",
                format!("{{{}}} {w}", labels(&s.port, &[])),
            );
        }
        for (p, c) in s.pfc.iter().enumerate() {
            for (dir, dur, frames) in [
                ("rx", c.rx_pause_duration_us, c.rx_pause),
                ("tx", c.tx_pause_duration_us, c.tx_pause),
            ] {
                let extra = [("priority", p.to_string()), ("direction", dir.to_string())];
                if let Some(d) = dur {
                    push(
                        "hawkmesh_pfc_pause_duration_us_total",
                        "PFC pause duration per priority and direction (IEEE 802.1Qbb), in microseconds.",
                        "counter",
                        format!("{{{}}} {d}", labels(&s.port, &extra)),
                    );
                }
                if let Some(f) = frames {
                    push(
                        "hawkmesh_pfc_pause_frames_total",
                        "PFC frames per priority and direction (IEEE 802.1Qbb).",
                        "counter",
                        format!("{{{}}} {f}", labels(&s.port, &extra)),
                    );
                }
            }
        }
    }
    for ((_, metric), r) in &last_round {
        let extra = [("metric", metric.clone())];
        if let Some(v) = r.intervals.iter().rev().find_map(|i| i.value) {
            push(
                "hawkmesh_port_fitf",
                "Forced idle time fraction of the latest interval (Yellowstone Eq. 3), or its PFC paused-fraction analogue.",
                "gauge",
                format!("{{{}}} {v}", labels(&r.port, &extra)),
            );
        }
        push(
            "hawkmesh_port_fitf_round_max",
            "Largest FITF of the port's latest round.",
            "gauge",
            format!("{{{}}} {}", labels(&r.port, &extra), r.stats.max),
        );
        push(
            "hawkmesh_port_fitf_round_mean",
            "Mean FITF over the valid intervals of the port's latest round.",
            "gauge",
            format!("{{{}}} {}", labels(&r.port, &extra), r.stats.mean),
        );
        push(
            "hawkmesh_port_fitf_round_nonzero_share",
            "Share of the latest round's intervals with non-zero wait.",
            "gauge",
            format!("{{{}}} {}", labels(&r.port, &extra), r.stats.share_nonzero),
        );
    }
    let mut out = String::new();
    for (name, f) in fams {
        let _ = writeln!(out, "# HELP {name} {}", f.help);
        let _ = writeln!(out, "# TYPE {name} {}", f.kind);
        for l in f.lines {
            let _ = writeln!(out, "{name}{l}");
        }
    }
    out
}
