//! The writers: CSV rows, JSON, an HTML page with one well-formed SVG per plot, and the
//! Prometheus exposition with escaped labels.

use hawkmesh_congestion::report;
use hawkmesh_congestion::{
    classify, fitf_round, Direction, FitfConfig, PortId, Round, Sample, Tier, Width,
};

fn rounds() -> Vec<Round> {
    let cfg = FitfConfig::default();
    let mk = |node: &str, tier: Tier, dir: Direction, step: u64| {
        let samples: Vec<Sample> = (0..10u64)
            .map(|i| {
                Sample::new(
                    PortId::new(node, 1, tier.clone(), dir),
                    i * 100_000_000,
                    1_000,
                )
                .with_wait(i * step * (i % 3), Width::Bits32)
            })
            .collect();
        fitf_round(&samples, &cfg).expect("round")
    };
    vec![
        mk("tor,1", Tier::Tor, Direction::Down, 40_000),
        mk("tor2", Tier::Tor, Direction::Down, 90_000),
        mk("tor3", Tier::Tor, Direction::Up, 0),
        mk("leaf<1>", Tier::Leaf, Direction::Up, 200_000),
        mk("spine1", Tier::Spine, Direction::Down, 10_000),
    ]
}

/// Checks that every opened element is closed in order (self-closing and the doctype aside).
fn balanced(html: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let end = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().ok_or("empty tag")?;
            stack.push(name.to_string());
        }
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {stack:?}"))
    }
}

#[test]
fn html_has_one_svg_per_plot_and_balanced_tags() {
    let groups = classify(&rounds());
    let page = report::html("Congestion <lab> & \"fabric\"", &groups);
    assert_eq!(page.matches("<svg ").count(), 3);
    assert_eq!(page.matches("</svg>").count(), 3);
    balanced(&page).unwrap_or_else(|e| panic!("{e}"));
    assert!(page.contains("Congestion &lt;lab&gt; &amp; &quot;fabric&quot;"));
    assert!(page.contains("leaf&lt;1&gt;") || page.contains("Leaf up"));
    assert!(page.contains("Fig. 5") && page.contains("Fig. 6") && page.contains("Fig. 7"));
    // One bar pair per group, one box per group with non-zero rounds.
    assert_eq!(
        page.matches("fill=\"#c0392b\"><title>").count(),
        groups.len()
    );
    // Empty input still gives a well-formed page.
    let empty = report::html("empty", &[]);
    assert_eq!(empty.matches("<svg ").count(), 3);
    balanced(&empty).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn csv_has_a_row_per_interval_and_per_round() {
    let rs = rounds();
    let iv = report::intervals_csv(&rs);
    let lines: Vec<&str> = iv.lines().collect();
    assert_eq!(lines.len(), 1 + 5 * 9);
    assert!(lines[0].starts_with("node,port,tier,dir,metric"));
    assert!(
        lines[1].starts_with("\"tor,1\",1,ToR,down,fitf,0,1,"),
        "{}",
        lines[1]
    );
    let cols = lines[0].split(',').count();
    assert!(lines[2..]
        .iter()
        .filter(|l| !l.starts_with('"'))
        .all(|l| l.split(',').count() == cols));
    let rc = report::rounds_csv(&rs);
    assert_eq!(rc.lines().count(), 6);
    let json = report::to_json(&rs, &classify(&rs)).expect("json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    assert_eq!(v["rounds"].as_array().map(Vec::len), Some(5));
    assert_eq!(v["groups"].as_array().map(Vec::len), Some(4));
    assert_eq!(v["rounds"][0]["intervals"][0]["status"], "ok");
}

#[test]
fn prometheus_exposition_escapes_labels_and_declares_each_metric_once() {
    let p = PortId::new(
        "sw\"a\\b\nc",
        7,
        Tier::Other("GladeLeaf".into()),
        Direction::Up,
    );
    let mut s = Sample::new(p.clone(), 0, 0).with_wait(123, Width::Bits32);
    s.pfc[3].rx_pause_duration_us = Some(4_500);
    s.pfc[3].tx_pause = Some(9);
    let samples = vec![
        Sample::new(p.clone(), 0, 0).with_wait(1, Width::Bits32),
        s.clone(),
        Sample::new(PortId::new("tor1", 1, Tier::Tor, Direction::Down), 0, 0)
            .with_wait(5, Width::Bits32),
    ];
    let mut t = s.clone();
    t.t_query_ns = 100_000_000;
    t.xmit_wait = Some(123 + 454_545);
    let round = fitf_round(&[s, t], &FitfConfig::default()).expect("round");
    let text = report::prometheus(&samples, &[round]);
    assert!(text.contains(
        "hawkmesh_port_xmit_wait_ticks_total{node=\"sw\\\"a\\\\b\\nc\",port=\"7\",tier=\"GladeLeaf\",dir=\"up\"} 123\n"
    ), "{text}");
    assert!(text.contains("hawkmesh_port_xmit_wait_ticks_total{node=\"tor1\",port=\"1\",tier=\"ToR\",dir=\"down\"} 5\n"));
    assert!(text.contains("hawkmesh_pfc_pause_duration_us_total{node=\"sw\\\"a\\\\b\\nc\",port=\"7\",tier=\"GladeLeaf\",dir=\"up\",priority=\"3\",direction=\"rx\"} 4500\n"));
    assert!(text.contains(",priority=\"3\",direction=\"tx\"} 9\n"));
    assert!(text.contains("hawkmesh_port_fitf{"));
    for name in [
        "hawkmesh_port_xmit_wait_ticks_total",
        "hawkmesh_pfc_pause_duration_us_total",
        "hawkmesh_pfc_pause_frames_total",
        "hawkmesh_port_fitf",
    ] {
        assert_eq!(
            text.matches(&format!("# HELP {name} ")).count(),
            1,
            "{name}"
        );
        assert_eq!(
            text.matches(&format!("# TYPE {name} ")).count(),
            1,
            "{name}"
        );
    }
    assert!(text.contains("# TYPE hawkmesh_port_xmit_wait_ticks_total counter\n"));
    assert!(text.contains("# TYPE hawkmesh_port_fitf gauge\n"));
    // Every sample line is `name{labels} value` with a numeric value; no raw newline inside.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (head, value) = line.rsplit_once(' ').expect("name and value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
        assert!(head.ends_with('}') && head.contains('{'), "{line}");
    }
}
