//! The pingmesh HTML page: SLA time series of the kept periods (R-Pingmesh §5: network RTT
//! and end-host delay percentiles, RNIC and switch-network drop rates), the problems found,
//! and the latest located problem drawn on the topology. Self-contained (inline SVG, no
//! scripts).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind};

use crate::pingmesh::{ControllerStatus, PeriodView};

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One series of a chart: its name, colour and value per period.
struct Series<'a> {
    name: &'a str,
    colour: &'a str,
    values: Vec<f64>,
}

/// A line chart of `series` over the periods (x: period index), with a y axis in `unit`.
fn chart(title: &str, unit: &str, indices: &[u64], series: &[Series<'_>]) -> String {
    let (width, height, left, bottom, top) = (720.0, 220.0, 70.0, 30.0, 24.0);
    let plot_w = width - left - 20.0;
    let plot_h = height - bottom - top;
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let max = if max > 0.0 { max * 1.1 } else { 1.0 };
    let n = indices.len().max(1);
    let x = |i: usize| {
        if n == 1 {
            left + plot_w / 2.0
        } else {
            left + plot_w * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| top + plot_h * (1.0 - v / max);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{left}\" y=\"14\" font-weight=\"bold\">{}</text>\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{b}\" stroke=\"#444\"/>\
         <line x1=\"{left}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#444\"/>",
        escape(title),
        b = top + plot_h,
        r = left + plot_w,
    );
    for tick in 0..=4 {
        let v = max * f64::from(tick) / 4.0;
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><line x1=\"{left}\" y1=\"{yy}\" x2=\"{}\" y2=\"{yy}\" stroke=\"#eee\"/>",
            left - 4.0,
            y(v) + 4.0,
            format_value(v, unit),
            left + plot_w,
            yy = y(v),
        );
    }
    if let (Some(first), Some(last)) = (indices.first(), indices.last()) {
        let _ = write!(
            out,
            "<text x=\"{left}\" y=\"{h}\">period {first}</text><text x=\"{}\" y=\"{h}\" text-anchor=\"end\">period {last}</text>",
            left + plot_w,
            h = height - 8.0,
        );
    }
    for (k, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        if points.len() == 1 {
            let _ = write!(
                out,
                "<circle cx=\"{}\" r=\"3\" fill=\"{}\" cy=\"{}\"/>",
                points[0].split(',').next().unwrap_or("0"),
                s.colour,
                points[0].split(',').nth(1).unwrap_or("0"),
            );
        } else if !points.is_empty() {
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
                s.colour,
                points.join(" ")
            );
        }
        let _ = write!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            left + 10.0 + 120.0 * k as f64,
            top + 2.0,
            s.colour,
            left + 24.0 + 120.0 * k as f64,
            top + 11.0,
            escape(s.name)
        );
    }
    out.push_str("</svg>");
    out
}

fn format_value(v: f64, unit: &str) -> String {
    match unit {
        "ns" => {
            if v >= 1e6 {
                format!("{:.1} ms", v / 1e6)
            } else if v >= 1e3 {
                format!("{:.1} µs", v / 1e3)
            } else {
                format!("{v:.0} ns")
            }
        }
        "%" => format!("{v:.2} %"),
        _ => format!("{v:.1}"),
    }
}

/// The fabric with the latest problems marked: switch tiers as rows (hosts at the bottom),
/// voted links and switches in red, hosts with RNIC, CPU or host-down problems in orange.
fn topology_svg(topology: &FabricTopology, latest: Option<&PeriodView>) -> String {
    // Rows: hosts at 0, switches by tier (or by hop distance from the hosts).
    let mut row: BTreeMap<NodeId, u32> = BTreeMap::new();
    for node in &topology.nodes {
        if node.kind == NodeKind::Host {
            row.insert(node.id, 0);
        }
    }
    let mut frontier: Vec<NodeId> = row.keys().copied().collect();
    let mut depth = 0;
    while !frontier.is_empty() && depth < 16 {
        depth += 1;
        let mut next = Vec::new();
        for link in &topology.links {
            for (from, to) in [(link.a.node, link.b.node), (link.b.node, link.a.node)] {
                if frontier.contains(&from) && !row.contains_key(&to) {
                    row.insert(to, depth);
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    for node in &topology.nodes {
        if let (NodeKind::Switch, Some(tier)) = (node.kind, node.tier) {
            row.insert(node.id, u32::from(tier) + 1);
        }
        row.entry(node.id).or_insert(depth + 1);
    }
    let rows = row.values().copied().max().unwrap_or(0) + 1;
    let mut members: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
    for node in &topology.nodes {
        members.entry(row[&node.id]).or_default().push(node.id);
    }
    let widest = members.values().map(Vec::len).max().unwrap_or(1);
    let spacing = if widest > 64 { 14.0 } else { 44.0 };
    let width = (widest as f64 * spacing + 80.0).max(400.0);
    let height = f64::from(rows) * 90.0 + 40.0;
    let mut at: BTreeMap<NodeId, (f64, f64)> = BTreeMap::new();
    for (r, nodes) in &members {
        let step = width / (nodes.len() as f64 + 1.0);
        for (i, node) in nodes.iter().enumerate() {
            at.insert(
                *node,
                (
                    step * (i as f64 + 1.0),
                    height - 30.0 - f64::from(*r) * 90.0,
                ),
            );
        }
    }
    let name_of = |id: NodeId| {
        topology
            .nodes
            .get(id as usize)
            .map_or("?", |n| n.name.as_str())
    };
    // What the latest period blames.
    let mut hot_links: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut hot_switches: BTreeSet<String> = BTreeSet::new();
    let mut hot_hosts: BTreeSet<String> = BTreeSet::new();
    if let Some(period) = latest {
        for problem in &period.problems {
            for link in &problem.links {
                for end in [&link.a, &link.b] {
                    if let Some((node, port)) = end.rsplit_once(':') {
                        if let Ok(port) = port.parse() {
                            hot_links.insert((node.to_string(), port));
                        }
                    }
                }
            }
            for switch in &problem.switches {
                hot_switches.insert(switch.name.clone());
            }
            if let Some(host) = &problem.host {
                hot_hosts.insert(host.clone());
            }
            if let Some(rnic) = &problem.rnic {
                if let Some((host, _)) = rnic.split_once(':') {
                    hot_hosts.insert(host.to_string());
                }
            }
        }
    }
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"9\">"
    );
    for link in &topology.links {
        let (Some(a), Some(b)) = (at.get(&link.a.node), at.get(&link.b.node)) else {
            continue;
        };
        let hot = hot_links.contains(&(name_of(link.a.node).to_string(), u32::from(link.a.port)))
            && hot_links.contains(&(name_of(link.b.node).to_string(), u32::from(link.b.port)));
        let (stroke, w) = if hot { ("#d00", 4.0) } else { ("#bbb", 1.0) };
        let _ = write!(
            out,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\" stroke-width=\"{w}\"><title>{}:{} – {}:{}</title></line>",
            a.0,
            a.1,
            b.0,
            b.1,
            escape(name_of(link.a.node)),
            link.a.port,
            escape(name_of(link.b.node)),
            link.b.port
        );
    }
    for node in &topology.nodes {
        let Some((x, y)) = at.get(&node.id) else {
            continue;
        };
        let fill = if hot_switches.contains(&node.name) {
            "#d00"
        } else if hot_hosts.contains(&node.name) {
            "#f80"
        } else if node.kind == NodeKind::Host {
            "#9cf"
        } else {
            "#ccc"
        };
        let _ = write!(
            out,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"6\" fill=\"{fill}\" stroke=\"#333\"><title>{}</title></circle>",
            escape(&node.name)
        );
        if widest <= 64 {
            let _ = write!(
                out,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y + 16.0,
                escape(&node.name)
            );
        }
    }
    out.push_str("</svg>");
    out
}

fn location(problem: &crate::pingmesh::ProblemView) -> String {
    let mut parts = Vec::new();
    if let Some(rnic) = &problem.rnic {
        parts.push(format!("RNIC {rnic}"));
    }
    if let Some(host) = &problem.host {
        parts.push(format!("host {host}"));
    }
    if !problem.links.is_empty() {
        let links: Vec<String> = problem
            .links
            .iter()
            .map(|l| format!("{}–{} ({} votes)", l.a, l.b, l.votes))
            .collect();
        parts.push(format!("link {}", links.join(", ")));
    }
    if !problem.switches.is_empty() {
        let switches: Vec<String> = problem
            .switches
            .iter()
            .map(|s| format!("{} ({} votes)", s.name, s.votes))
            .collect();
        parts.push(format!("switch {}", switches.join(", ")));
    }
    parts.join("; ")
}

/// The page.
pub fn page(
    status: &ControllerStatus,
    periods: &[PeriodView],
    period_ns: u64,
    topology: &FabricTopology,
) -> String {
    let indices: Vec<u64> = periods.iter().map(|p| p.index).collect();
    let of = |f: &dyn Fn(&PeriodView) -> f64| periods.iter().map(f).collect::<Vec<f64>>();
    // Percentiles of a period without answered probes are not points.
    let pct = |p: &PeriodView, v: u64| {
        if p.cluster.network_rtt.count == 0 {
            f64::NAN
        } else {
            v as f64
        }
    };
    let rtt = chart(
        "Cluster network RTT",
        "ns",
        &indices,
        &[
            Series {
                name: "P50",
                colour: "#36c",
                values: of(&|p| pct(p, p.cluster.network_rtt.p50)),
            },
            Series {
                name: "P99",
                colour: "#f90",
                values: of(&|p| pct(p, p.cluster.network_rtt.p99)),
            },
            Series {
                name: "P99.9",
                colour: "#d00",
                values: of(&|p| pct(p, p.cluster.network_rtt.p999)),
            },
        ],
    );
    let delay = chart(
        "Cluster end-host delay (prober + responder)",
        "ns",
        &indices,
        &[
            Series {
                name: "P50",
                colour: "#36c",
                values: of(&|p| pct(p, p.cluster.end_host_delay.p50)),
            },
            Series {
                name: "P99",
                colour: "#f90",
                values: of(&|p| pct(p, p.cluster.end_host_delay.p99)),
            },
        ],
    );
    let drops = chart(
        "Drop rates",
        "%",
        &indices,
        &[
            Series {
                name: "switch network",
                colour: "#d00",
                values: of(&|p| p.cluster.switch_drop_rate * 100.0),
            },
            Series {
                name: "RNIC",
                colour: "#f90",
                values: of(&|p| p.cluster.rnic_drop_rate * 100.0),
            },
            Series {
                name: "service network",
                colour: "#36c",
                values: of(&|p| p.service.switch_drop_rate * 100.0),
            },
        ],
    );
    let latest_with_problem = periods.iter().rev().find(|p| !p.problems.is_empty());
    let mut rows = String::new();
    for period in periods
        .iter()
        .rev()
        .filter(|p| !p.problems.is_empty())
        .take(20)
    {
        for problem in &period.problems {
            let _ = write!(
                rows,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                period.index,
                escape(&problem.priority),
                escape(&problem.kind),
                escape(&location(problem)),
                problem.probes,
                if problem.affects_service { "yes" } else { "no" }
            );
        }
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"6\">no problem in the kept periods</td></tr>".into();
    }
    let innocent = periods
        .last()
        .filter(|p| p.service_network_innocent)
        .map(|_| "<p><b>The service's metric degraded in the latest period and the service network is innocent</b> (no P0/P1 problem).</p>")
        .unwrap_or("");
    let drawn = match latest_with_problem {
        Some(p) => format!("the problems of period {}", p.index),
        None => "no problem".to_string(),
    };
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>hawkmesh pingmesh</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:4px 10px;text-align:left}}\
         table{{border-collapse:collapse}}tr:nth-child(even){{background:#f4f4f4}}</style></head><body>\
         <h1>Pingmesh</h1>\
         <p>{registered} of {rnics} RNICs registered on {hosts} hosts; pinglist generation {generation}; \
         {pending} results waiting for analysis; {kept} periods of {period_s} s kept; \
         {accepted} batches stored, {duplicate} duplicates, {refused} refused, {late} late results.</p>\
         {innocent}\
         <h2>SLA</h2>{rtt}<br>{delay}<br>{drops}\
         <h2>Problems (most recent periods first)</h2>\
         <table><tr><th>period</th><th>priority</th><th>kind</th><th>where</th><th>probes</th><th>service</th></tr>{rows}</table>\
         <h2>Topology: {drawn}</h2>{topo}\
         <p>Red: voted links and switches; orange: hosts with an RNIC, CPU or host-down problem.</p>\
         </body></html>",
        registered = status.rnics_registered,
        rnics = status.rnics,
        hosts = status.hosts_registered,
        generation = status.pinglist_generation,
        pending = status.pending_results,
        kept = status.periods,
        period_s = period_ns as f64 / 1e9,
        accepted = status.batches_accepted,
        duplicate = status.batches_duplicate,
        refused = status.batches_refused,
        late = status.late_results,
        topo = topology_svg(topology, latest_with_problem),
    )
}
