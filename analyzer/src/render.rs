//! Renderers: JSON (the documented schema), a plain-text explanation, Graphviz DOT and a
//! self-contained HTML page with an inline SVG drawing of the provenance graph (no scripts,
//! no external resources; hovering a node shows its numbers).

use std::fmt::Write as _;

use crate::error::AnalyzerError;
use crate::model::{Anomaly, Diagnosis, RootCauseKind, Severity};
use crate::view::{GraphView, Highlight, Role, ViewKind};

/// The diagnosis as pretty-printed JSON (schema in the crate README).
pub fn to_json(diagnosis: &Diagnosis) -> Result<String, AnalyzerError> {
    serde_json::to_string_pretty(diagnosis).map_err(|e| AnalyzerError::Serialize(e.to_string()))
}

fn weight(value: f64) -> String {
    if value.abs() >= 1e6 {
        format!("{value:.3e}")
    } else {
        format!("{value:.1}")
    }
}

fn cause_line(anomaly: &Anomaly) -> String {
    let root = &anomaly.root_cause;
    let ports = root
        .ports
        .iter()
        .map(|p| p.label.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match root.kind {
        RootCauseKind::FlowContention => {
            let mut extra = Vec::new();
            if root.micro_burst == Some(true) {
                extra.push("micro-bursts".to_string());
            }
            if let Some(ecmp) = &root.ecmp {
                extra.push(format!(
                    "ECMP imbalance {:.2}{}",
                    ecmp.imbalance_ratio,
                    if ecmp.imbalanced { " (imbalanced)" } else { "" }
                ));
            }
            let extra = if extra.is_empty() {
                String::new()
            } else {
                format!(" [{}]", extra.join(", "))
            };
            format!("flow contention at {ports}{extra}")
        }
        RootCauseKind::HostPfcInjection => format!(
            "host {} injects PFC into {ports}",
            root.injector.as_deref().unwrap_or("?")
        ),
        RootCauseKind::SwitchPfcInjection => format!(
            "switch {} sends PFC into {ports} without congestion behind it",
            root.injector.as_deref().unwrap_or("?")
        ),
        RootCauseKind::SlowReceiver => format!(
            "host {} receives slower than {ports} sends (drain-rate limit)",
            root.receiver.as_deref().unwrap_or("?")
        ),
        RootCauseKind::Unknown => format!("unknown — telemetry ends at {ports}"),
    }
}

/// A plain-text explanation a network engineer can read in ten seconds: the verdict first,
/// then one block per anomaly, then the telemetry findings.
pub fn to_text(diagnosis: &Diagnosis) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "hawkmesh diagnosis — victim {}", diagnosis.victim);
    let _ = writeln!(out, "VERDICT: {}", diagnosis.verdict);
    let _ = writeln!(
        out,
        "window: {} epoch(s) of {} ns from {} ns; reports from {}",
        diagnosis.window.epochs,
        diagnosis.window.epoch_ns,
        diagnosis.window.start_ns,
        diagnosis.switches_reported.join(", ")
    );
    if diagnosis.victim_path.is_empty() {
        let _ = writeln!(out, "victim path: unknown");
    } else {
        let hops: Vec<String> = diagnosis
            .victim_path
            .iter()
            .map(|h| {
                if h.paused_packets > 0 {
                    format!(
                        "{} (paused {}/{})",
                        h.port.label, h.paused_packets, h.packets
                    )
                } else if h.packets > 0 {
                    format!(
                        "{} ({} pkts, queue {:.0} B)",
                        h.port.label, h.packets, h.mean_queue_depth_bytes
                    )
                } else {
                    format!("{} (route only)", h.port.label)
                }
            })
            .collect();
        let _ = writeln!(out, "victim path: {}", hops.join(" → "));
    }
    for anomaly in &diagnosis.anomalies {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "[{}] {}{}",
            anomaly.id,
            anomaly.anomaly_type.title(),
            if anomaly.affects_victim {
                "  (affects the victim)"
            } else {
                "  (does not touch the victim)"
            }
        );
        let _ = writeln!(out, "    root cause: {}", cause_line(anomaly));
        for flow in anomaly.root_cause.flows.iter().take(5) {
            let burst = match (flow.burst, flow.window_rate_gbps) {
                (Some(true), Some(rate)) => format!(", burst at {rate:.1} Gb/s"),
                (_, Some(rate)) => format!(", {rate:.1} Gb/s in its window"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "      {:<40} contribution {:>10}  ({} pkts{burst})",
                flow.flow.to_string(),
                weight(flow.weight),
                flow.packets
            );
        }
        if anomaly.root_cause.flows.len() > 5 {
            let _ = writeln!(out, "      … {} more", anomaly.root_cause.flows.len() - 5);
        }
        for path in &anomaly.spreading_paths {
            let labels: Vec<&str> = path.iter().map(|p| p.label.as_str()).collect();
            let _ = writeln!(out, "    PFC path: {}", labels.join(" → "));
        }
        if !anomaly.loop_ports.is_empty() {
            let mut labels: Vec<&str> = anomaly
                .loop_ports
                .iter()
                .map(|p| p.label.as_str())
                .collect();
            labels.push(anomaly.loop_ports[0].label.as_str());
            let _ = writeln!(
                out,
                "    loop (cyclic buffer dependency): {}",
                labels.join(" → ")
            );
            if !anomaly.loop_flows.is_empty() {
                let flows: Vec<String> = anomaly
                    .loop_flows
                    .iter()
                    .take(6)
                    .map(|f| f.to_string())
                    .collect();
                let _ = writeln!(out, "    loop flows: {}", flows.join(", "));
            }
        }
        if !anomaly.spreading_flows.is_empty() {
            let flows: Vec<String> = anomaly
                .spreading_flows
                .iter()
                .take(4)
                .map(|s| {
                    format!(
                        "{} ({} paused at {})",
                        s.flow, s.paused_packets, s.from.label
                    )
                })
                .collect();
            let _ = writeln!(out, "    spreading flows: {}", flows.join("; "));
        }
        for contention in &anomaly.local_contention {
            let flows: Vec<String> = contention
                .flows
                .iter()
                .take(3)
                .map(|f| format!("{} ({})", f.flow, weight(f.weight)))
                .collect();
            let _ = writeln!(
                out,
                "    also contention at {}: {}",
                contention.port.label,
                flows.join(", ")
            );
        }
        let _ = writeln!(out, "    evidence:");
        for evidence in anomaly.evidence.iter().take(8) {
            let _ = writeln!(out, "      - {}", evidence.note);
        }
        if anomaly.evidence.len() > 8 {
            let _ = writeln!(
                out,
                "      - … {} more (see JSON)",
                anomaly.evidence.len() - 8
            );
        }
    }
    if !diagnosis.findings.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "telemetry findings:");
        for finding in &diagnosis.findings {
            let tag = match finding.severity {
                Severity::Info => "info",
                Severity::Warning => "INCOMPLETE",
            };
            let _ = writeln!(out, "  [{tag}] {}", finding.message);
        }
    }
    out
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn role_colour(role: Role) -> (&'static str, &'static str) {
    // (fill, border)
    match role {
        Role::RootPort => ("#fde2e1", "#c62828"),
        Role::LoopPort => ("#fff1d6", "#e67e00"),
        Role::PathPort => ("#fff7e0", "#b26a00"),
        Role::VictimPort => ("#e3efff", "#1f5fbf"),
        Role::Port => ("#f2f2f2", "#777777"),
        Role::VictimFlow => ("#1f5fbf", "#0d3470"),
        Role::RootFlow => ("#fde2e1", "#c62828"),
        Role::SpreadingFlow => ("#fff1d6", "#e67e00"),
        Role::Flow => ("#ffffff", "#999999"),
    }
}

fn edge_colour(kind: &str, highlight: Highlight, weight: f64) -> &'static str {
    match highlight {
        Highlight::Path => "#c62828",
        Highlight::Loop => "#e67e00",
        Highlight::Root => "#c62828",
        Highlight::None => match kind {
            "port_flow" if weight < 0.0 => "#1f5fbf",
            "flow_port" => "#888888",
            _ => "#555555",
        },
    }
}

/// Graphviz DOT of the drawn part of the graph: ports are boxes, flows ellipses; the
/// spreading path is red, loops orange, flow→port (paused) edges dashed, victims of
/// contention blue.
pub fn to_dot(diagnosis: &Diagnosis, view: &GraphView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph hawkmesh {{");
    let _ = writeln!(out, "  rankdir=LR;");
    let _ = writeln!(
        out,
        "  label=\"{}\"; labelloc=t; fontname=\"Helvetica\";",
        dot_escape(&format!(
            "victim {} — {}",
            diagnosis.victim, diagnosis.verdict
        ))
    );
    let _ = writeln!(out, "  node [fontname=\"Helvetica\", fontsize=10];");
    for node in &view.nodes {
        let (fill, border) = role_colour(node.role);
        let shape = match node.kind {
            ViewKind::Port => "box",
            ViewKind::Flow => "ellipse",
        };
        let font = if node.role == Role::VictimFlow {
            "white"
        } else {
            "black"
        };
        let _ = writeln!(
            out,
            "  {} [label=\"{}\", tooltip=\"{}\", shape={shape}, style=filled, fillcolor=\"{fill}\", color=\"{border}\", fontcolor={font}];",
            node.id,
            dot_escape(&node.label),
            dot_escape(&node.detail)
        );
    }
    for edge in &view.edges {
        let colour = edge_colour(&edge.kind, edge.highlight, edge.weight);
        let style = if edge.kind == "flow_port" {
            "dashed"
        } else {
            "solid"
        };
        let pen = if edge.highlight == Highlight::None {
            1.0
        } else {
            2.5
        };
        let _ = writeln!(
            out,
            "  {} -> {} [label=\"{}\", color=\"{colour}\", fontcolor=\"{colour}\", style={style}, penwidth={pen}];",
            edge.from,
            edge.to,
            weight(edge.weight)
        );
    }
    let _ = writeln!(out, "}}");
    out
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const COLUMN_WIDTH: f64 = 250.0;
const ROW_HEIGHT: f64 = 64.0;
const NODE_WIDTH: f64 = 210.0;
const NODE_HEIGHT: f64 = 34.0;
const MARGIN: f64 = 30.0;

fn svg(view: &GraphView) -> String {
    let mut out = String::new();
    let columns = view
        .nodes
        .iter()
        .map(|n| n.column)
        .max()
        .map(|c| c + 1)
        .unwrap_or(1);
    let rows = view
        .nodes
        .iter()
        .map(|n| n.row)
        .max()
        .map(|r| r + 1)
        .unwrap_or(1);
    let width = MARGIN * 2.0 + columns as f64 * COLUMN_WIDTH;
    let height = MARGIN * 2.0 + rows as f64 * ROW_HEIGHT;
    let position = |column: usize, row: usize| -> (f64, f64) {
        (
            MARGIN + column as f64 * COLUMN_WIDTH,
            MARGIN + row as f64 * ROW_HEIGHT,
        )
    };
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        out,
        "<defs>{}</defs>",
        ["#555555", "#c62828", "#e67e00", "#1f5fbf", "#888888"]
            .iter()
            .map(|c| format!(
                "<marker id=\"arrow{}\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"{c}\"/></marker>",
                &c[1..]
            ))
            .collect::<String>()
    );
    let lookup: std::collections::BTreeMap<&str, &crate::view::ViewNode> =
        view.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    // Plain edges first so highlighted ones are drawn on top.
    let mut edges: Vec<&crate::view::ViewEdge> = view.edges.iter().collect();
    edges.sort_by_key(|e| e.highlight != Highlight::None);
    for edge in edges {
        let (Some(from), Some(to)) = (lookup.get(edge.from.as_str()), lookup.get(edge.to.as_str()))
        else {
            continue;
        };
        let (fx, fy) = position(from.column, from.row);
        let (tx, ty) = position(to.column, to.row);
        let (x1, y1, x2, y2) = if to.column > from.column {
            (
                fx + NODE_WIDTH,
                fy + NODE_HEIGHT / 2.0,
                tx,
                ty + NODE_HEIGHT / 2.0,
            )
        } else if to.column < from.column {
            (
                fx,
                fy + NODE_HEIGHT / 2.0,
                tx + NODE_WIDTH,
                ty + NODE_HEIGHT / 2.0,
            )
        } else if to.row > from.row {
            (
                fx + NODE_WIDTH / 2.0,
                fy + NODE_HEIGHT,
                tx + NODE_WIDTH / 2.0,
                ty,
            )
        } else {
            (
                fx + NODE_WIDTH / 2.0,
                fy,
                tx + NODE_WIDTH / 2.0,
                ty + NODE_HEIGHT,
            )
        };
        // Curve same-column edges sideways so they do not hide nodes.
        let (cx, cy) = if from.column == to.column {
            (
                x1 + 60.0 + 10.0 * (from.row.abs_diff(to.row) as f64),
                (y1 + y2) / 2.0,
            )
        } else {
            ((x1 + x2) / 2.0, (y1 + y2) / 2.0 - 12.0)
        };
        let colour = edge_colour(&edge.kind, edge.highlight, edge.weight);
        let dash = if edge.kind == "flow_port" {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let stroke = if edge.highlight == Highlight::None {
            1.2
        } else {
            3.0
        };
        let _ = writeln!(
            out,
            "<g><title>{} {} → {}: {}</title><path d=\"M {x1:.1} {y1:.1} Q {cx:.1} {cy:.1} {x2:.1} {y2:.1}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"{stroke}\"{dash} marker-end=\"url(#arrow{})\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\" font-size=\"9\" text-anchor=\"middle\">{}</text></g>",
            html_escape(&edge.kind),
            html_escape(&from.label),
            html_escape(&to.label),
            weight(edge.weight),
            &colour[1..],
            (x1 + 2.0 * cx + x2) / 4.0,
            (y1 + 2.0 * cy + y2) / 4.0 - 3.0,
            weight(edge.weight)
        );
    }
    for node in &view.nodes {
        let (x, y) = position(node.column, node.row);
        let (fill, border) = role_colour(node.role);
        let text_colour = if node.role == Role::VictimFlow {
            "#ffffff"
        } else {
            "#111111"
        };
        let radius = match node.kind {
            ViewKind::Port => 3.0,
            ViewKind::Flow => NODE_HEIGHT / 2.0,
        };
        let stroke = if matches!(node.role, Role::Port | Role::Flow) {
            1.0
        } else {
            2.2
        };
        let _ = writeln!(
            out,
            "<g><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{NODE_WIDTH}\" height=\"{NODE_HEIGHT}\" rx=\"{radius}\" fill=\"{fill}\" stroke=\"{border}\" stroke-width=\"{stroke}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{text_colour}\" text-anchor=\"middle\">{}</text></g>",
            html_escape(&node.detail),
            x + NODE_WIDTH / 2.0,
            y + NODE_HEIGHT / 2.0 + 4.0,
            html_escape(&node.label)
        );
    }
    let _ = writeln!(out, "</svg>");
    out
}

/// A self-contained HTML page: verdict, anomaly cards, the provenance graph as inline SVG
/// (spreading path red, loops orange, victim blue) and the findings. The diagnosis JSON is
/// embedded in a `<script type="application/json" id="diagnosis">` element for tools.
pub fn to_html(diagnosis: &Diagnosis, view: &GraphView) -> Result<String, AnalyzerError> {
    let json = to_json(diagnosis)?.replace("</", "<\\/");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    );
    let _ = writeln!(
        out,
        "<title>hawkmesh diagnosis — {}</title>",
        html_escape(&diagnosis.victim.to_string())
    );
    let _ = writeln!(
        out,
        "<style>body{{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#111}}h1{{font-size:20px}}.verdict{{font-size:16px;padding:10px 14px;background:#fde2e1;border-left:5px solid #c62828;margin:12px 0}}.ok{{background:#e6f4ea;border-color:#2e7d32}}.card{{border:1px solid #ddd;border-radius:6px;padding:10px 14px;margin:10px 0}}.card h2{{font-size:15px;margin:4px 0}}.muted{{color:#666}}table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:left;font-size:13px}}.legend span{{display:inline-block;margin-right:14px}}.sw{{display:inline-block;width:12px;height:12px;border:2px solid;vertical-align:middle;margin-right:4px}}.graph{{overflow:auto;border:1px solid #ddd;border-radius:6px;margin-top:8px}}li{{font-size:13px}}code{{font-size:12px}}</style></head><body>"
    );
    let _ = writeln!(
        out,
        "<h1>Why is <code>{}</code> slow?</h1>",
        html_escape(&diagnosis.victim.to_string())
    );
    let ok = diagnosis.anomalies.is_empty();
    let _ = writeln!(
        out,
        "<div class=\"verdict{}\">{}</div>",
        if ok { " ok" } else { "" },
        html_escape(&diagnosis.verdict)
    );
    let _ = writeln!(
        out,
        "<p class=\"muted\">{} epoch(s) of {} ns from {} ns · reports from {} · polling events {}</p>",
        diagnosis.window.epochs,
        diagnosis.window.epoch_ns,
        diagnosis.window.start_ns,
        html_escape(&diagnosis.switches_reported.join(", ")),
        diagnosis
            .event_ids
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !diagnosis.victim_path.is_empty() {
        let _ = writeln!(out, "<p><b>Victim path:</b> ");
        let hops: Vec<String> = diagnosis
            .victim_path
            .iter()
            .map(|h| {
                format!(
                    "{} <span class=\"muted\">(paused {}/{})</span>",
                    html_escape(&h.port.label),
                    h.paused_packets,
                    h.packets
                )
            })
            .collect();
        let _ = writeln!(out, "{}</p>", hops.join(" → "));
    }
    for anomaly in &diagnosis.anomalies {
        let _ = writeln!(
            out,
            "<div class=\"card\"><h2>[{}] {}{}</h2><p><b>Root cause:</b> {}</p>",
            anomaly.id,
            html_escape(anomaly.anomaly_type.title()),
            if anomaly.affects_victim {
                ""
            } else {
                " <span class=\"muted\">(does not touch the victim)</span>"
            },
            html_escape(&cause_line(anomaly))
        );
        if !anomaly.root_cause.flows.is_empty() {
            let _ = writeln!(
                out,
                "<table><tr><th>flow</th><th>contribution</th><th>packets</th><th>burst</th></tr>"
            );
            for flow in anomaly.root_cause.flows.iter().take(8) {
                let _ = writeln!(
                    out,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    html_escape(&flow.flow.to_string()),
                    weight(flow.weight),
                    flow.packets,
                    match (flow.burst, flow.window_rate_gbps) {
                        (Some(true), Some(r)) => format!("yes, {r:.1} Gb/s"),
                        (Some(false), Some(r)) => format!("no, {r:.1} Gb/s"),
                        _ => "–".into(),
                    }
                );
            }
            let _ = writeln!(out, "</table>");
        }
        for path in &anomaly.spreading_paths {
            let labels: Vec<String> = path.iter().map(|p| html_escape(&p.label)).collect();
            let _ = writeln!(out, "<p><b>PFC path:</b> {}</p>", labels.join(" → "));
        }
        if !anomaly.loop_ports.is_empty() {
            let mut labels: Vec<String> = anomaly
                .loop_ports
                .iter()
                .map(|p| html_escape(&p.label))
                .collect();
            labels.push(html_escape(&anomaly.loop_ports[0].label));
            let _ = writeln!(out, "<p><b>Loop:</b> {}</p>", labels.join(" → "));
        }
        let _ = writeln!(
            out,
            "<details><summary>evidence ({})</summary><ul>",
            anomaly.evidence.len()
        );
        for evidence in &anomaly.evidence {
            let _ = writeln!(out, "<li>{}</li>", html_escape(&evidence.note));
        }
        let _ = writeln!(out, "</ul></details></div>");
    }
    let _ = writeln!(
        out,
        "<h2 style=\"font-size:16px\">Provenance graph</h2><div class=\"legend\"><span><i class=\"sw\" style=\"border-color:#c62828;background:#fde2e1\"></i>root cause</span><span><i class=\"sw\" style=\"border-color:#e67e00;background:#fff1d6\"></i>loop / spreading</span><span><i class=\"sw\" style=\"border-color:#1f5fbf;background:#e3efff\"></i>victim path</span><span><i class=\"sw\" style=\"border-color:#0d3470;background:#1f5fbf\"></i>victim flow</span><span>dashed: flow paused at port · blue edge: contention victim · hover for numbers</span></div>"
    );
    let _ = writeln!(
        out,
        "<p class=\"muted\">{} port nodes, {} flow nodes ({} not drawn), {} port→port, {} flow→port, {} port→flow edges</p>",
        view.stats.port_nodes,
        view.stats.flow_nodes,
        view.omitted_flows,
        view.stats.port_port_edges,
        view.stats.flow_port_edges,
        view.stats.port_flow_edges
    );
    let _ = writeln!(out, "<div class=\"graph\">{}</div>", svg(view));
    if !diagnosis.findings.is_empty() {
        let _ = writeln!(
            out,
            "<h2 style=\"font-size:16px\">Telemetry findings</h2><ul>"
        );
        for finding in &diagnosis.findings {
            let _ = writeln!(
                out,
                "<li><b>{}</b> {}</li>",
                match finding.severity {
                    Severity::Info => "info",
                    Severity::Warning => "incomplete telemetry:",
                },
                html_escape(&finding.message)
            );
        }
        let _ = writeln!(out, "</ul>");
    }
    let _ = writeln!(
        out,
        "<script type=\"application/json\" id=\"diagnosis\">{json}</script>"
    );
    let _ = writeln!(out, "</body></html>");
    Ok(out)
}
