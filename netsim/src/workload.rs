//! Turns `[[workload]]` entries into flows.

use crate::rng::Rng;
use crate::scenario::{LoadedScenario, ScenarioError, WorkloadSpec};
use crate::time::{from_us, Time};
use std::collections::HashMap;

/// WebSearch flow sizes (bytes, cumulative percent) — DCTCP paper / HPCC reference.
pub const WEBSEARCH_CDF: &[(f64, f64)] = &[
    (0.0, 0.0),
    (10000.0, 15.0),
    (20000.0, 20.0),
    (30000.0, 30.0),
    (50000.0, 40.0),
    (80000.0, 53.0),
    (200000.0, 60.0),
    (1000000.0, 70.0),
    (2000000.0, 80.0),
    (5000000.0, 90.0),
    (10000000.0, 97.0),
    (30000000.0, 100.0),
];

/// FB_Hadoop flow sizes (bytes, cumulative percent) — HPCC reference.
pub const FB_HADOOP_CDF: &[(f64, f64)] = &[
    (0.0, 0.0),
    (100.0, 1.0),
    (200.0, 2.0),
    (300.0, 5.0),
    (350.0, 15.0),
    (400.0, 20.0),
    (500.0, 30.0),
    (600.0, 40.0),
    (700.0, 50.0),
    (1000.0, 60.0),
    (2000.0, 67.0),
    (7000.0, 70.0),
    (30000.0, 72.0),
    (50000.0, 82.0),
    (80000.0, 87.0),
    (120000.0, 90.0),
    (300000.0, 95.0),
    (1000000.0, 97.5),
    (2000000.0, 99.0),
    (10000000.0, 100.0),
];

/// A flow-size distribution: piecewise-linear CDF.
#[derive(Clone, Debug)]
pub struct SizeCdf {
    points: Vec<(f64, f64)>,
}

impl SizeCdf {
    /// Builds a CDF from (size, cumulative percent) points; percent must rise to 100.
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, String> {
        if points.len() < 2 {
            return Err("a CDF needs at least two points".into());
        }
        for pair in points.windows(2) {
            if pair[1].0 < pair[0].0 || pair[1].1 < pair[0].1 {
                return Err(format!(
                    "points must not decrease: ({}, {}) after ({}, {})",
                    pair[1].0, pair[1].1, pair[0].0, pair[0].1
                ));
            }
        }
        let last = points[points.len() - 1].1;
        if (last - 100.0).abs() > 1e-9 {
            return Err(format!(
                "the last cumulative percent must be 100, got {last}"
            ));
        }
        Ok(SizeCdf { points })
    }

    /// Parses a CDF file: `size cumulative_percent` per line, `#` comments.
    pub fn parse(text: &str, file: &str) -> Result<Self, ScenarioError> {
        let mut points = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let parsed = match fields[..] {
                [size, percent] => size.parse::<f64>().ok().zip(percent.parse::<f64>().ok()),
                _ => None,
            };
            let Some(point) = parsed else {
                return Err(ScenarioError {
                    file: file.into(),
                    line: number + 1,
                    field: "cdf".into(),
                    reason: format!("expected `size cumulative_percent`, got {line:?}"),
                });
            };
            points.push(point);
        }
        SizeCdf::new(points).map_err(|reason| ScenarioError {
            file: file.into(),
            line: 0,
            field: "cdf".into(),
            reason,
        })
    }

    /// Mean flow size, bytes.
    pub fn mean(&self) -> f64 {
        self.points
            .windows(2)
            .map(|w| (w[0].0 + w[1].0) / 2.0 * (w[1].1 - w[0].1) / 100.0)
            .sum()
    }

    /// Draws a size (at least 1 byte), interpolating linearly inside a segment.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64() * 100.0;
        for w in self.points.windows(2) {
            if u < w[1].1 {
                let span = w[1].1 - w[0].1;
                let frac = if span > 0.0 { (u - w[0].1) / span } else { 0.0 };
                return (w[0].0 + frac * (w[1].0 - w[0].0)).round().max(1.0) as u64;
            }
        }
        self.points[self.points.len() - 1].0.max(1.0) as u64
    }
}

/// A flow to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowDef {
    /// Sending NIC.
    pub src_nic: u32,
    /// Receiving NIC.
    pub dst_nic: u32,
    /// Bytes.
    pub size: u64,
    /// Start time; `None` for later all-to-all rounds (started when the previous ends).
    pub start: Option<Time>,
    /// Priority.
    pub priority: u8,
    /// UDP source port, if fixed.
    pub sport: Option<u16>,
    /// UDP destination port, if not RoCEv2's 4791 (HPCC flow files name theirs).
    pub dport: Option<u16>,
    /// Congestion control on.
    pub congestion_control: bool,
    /// Which workload produced it.
    pub workload: usize,
    /// All-to-all round (0 for other workloads).
    pub round: u32,
}

/// Resolves host names to NIC endpoint indices.
#[derive(Debug)]
pub struct HostResolver<'a> {
    /// Host name → NIC endpoint indices (one per NIC, by NIC index).
    pub by_name: &'a HashMap<String, Vec<u32>>,
    /// All host names in node order.
    pub names: &'a [String],
}

impl HostResolver<'_> {
    fn nic(
        &self,
        loaded: &LoadedScenario,
        field: &str,
        name: &str,
        nic: u32,
    ) -> Result<u32, ScenarioError> {
        let nics = self
            .by_name
            .get(name)
            .ok_or_else(|| loaded.error(field, format!("no host named {name:?}")))?;
        nics.get(nic as usize).copied().ok_or_else(|| {
            loaded.error(
                field,
                format!(
                    "host {name:?} has {} NIC(s); NIC {nic} does not exist",
                    nics.len()
                ),
            )
        })
    }

    /// NIC `nic` of each named host (every host when `names` is empty).
    fn hosts(
        &self,
        loaded: &LoadedScenario,
        field: &str,
        names: &[String],
        nic: u32,
    ) -> Result<Vec<u32>, ScenarioError> {
        if names.is_empty() {
            return self
                .names
                .iter()
                .map(|name| self.nic(loaded, field, name, nic))
                .collect();
        }
        names
            .iter()
            .enumerate()
            .map(|(i, name)| self.nic(loaded, &format!("{field}[{i}]"), name, nic))
            .collect()
    }
}

/// Generates every flow of the scenario, sorted by start time (stable).
pub fn generate(
    loaded: &LoadedScenario,
    hosts: &HostResolver<'_>,
    nic_gbps: &[f64],
    hpcc_node_nic: &dyn Fn(u32) -> Option<u32>,
) -> Result<Vec<FlowDef>, ScenarioError> {
    let scenario = &loaded.scenario;
    let default_priority = scenario.nic.data_priority;
    let max_flows = scenario.limits.max_flows;
    // Refuses a workload whose flows (expected, for Poisson traffic) would take the
    // scenario past `limits.max_flows`, before any of them is made.
    let budget = |field: String, made: usize, more: f64| -> Result<(), ScenarioError> {
        let total = made as f64 + more;
        if total.is_finite() && total <= max_flows as f64 {
            Ok(())
        } else {
            Err(loaded.error(
                &field,
                format!(
                    "the workloads make {total:.0} flows (this one {more:.0}), above the limit of {max_flows} (raise limits.max_flows if the machine can hold it)"
                ),
            ))
        }
    };
    let mut flows = Vec::new();
    for (index, workload) in scenario.workload.iter().enumerate() {
        let at = |field: &str| format!("workload[{index}].{field}");
        let mut rng = Rng::derive(scenario.seed, 0x5700 + index as u64);
        match workload {
            WorkloadSpec::Poisson {
                load,
                cdf,
                start_us,
                duration_us,
                hosts: names,
                nic,
                priority,
            } => {
                let cdf = match cdf.as_str() {
                    "websearch" => SizeCdf::new(WEBSEARCH_CDF.to_vec())
                        .map_err(|r| loaded.error(&at("cdf"), r))?,
                    "fb_hadoop" => SizeCdf::new(FB_HADOOP_CDF.to_vec())
                        .map_err(|r| loaded.error(&at("cdf"), r))?,
                    path => {
                        let full = loaded.base_dir.join(path);
                        let text = std::fs::read_to_string(&full).map_err(|e| {
                            loaded.error(
                                &at("cdf"),
                                format!("cannot read CDF file {}: {e}", full.display()),
                            )
                        })?;
                        SizeCdf::parse(&text, &full.display().to_string())?
                    }
                };
                let members = hosts.hosts(loaded, &at("hosts"), names, *nic)?;
                if members.len() < 2 {
                    return Err(
                        loaded.error(&at("hosts"), "Poisson traffic needs at least two hosts")
                    );
                }
                let start = from_us(*start_us);
                let end = start + from_us(*duration_us);
                let mean_bytes = cdf.mean();
                let expected: f64 = members
                    .iter()
                    .map(|src| {
                        duration_us * 1e-6 * load * nic_gbps[*src as usize] * 1e9
                            / (8.0 * mean_bytes)
                    })
                    .sum();
                // Twice the expectation covers the Poisson spread of any real run.
                budget(at("load"), flows.len(), 2.0 * expected)?;
                for (position, src) in members.iter().enumerate() {
                    // Per-host Poisson process: mean gap = mean size / (load × link rate).
                    let bits_per_ps = nic_gbps[*src as usize] * 1e-3;
                    let mean_gap_ps = mean_bytes * 8.0 / (load * bits_per_ps);
                    let mut t = start as f64 + rng.exponential(mean_gap_ps);
                    while (t as Time) < end {
                        let mut pick = rng.below(members.len() as u64 - 1) as usize;
                        if pick >= position {
                            pick += 1;
                        }
                        flows.push(FlowDef {
                            src_nic: *src,
                            dst_nic: members[pick],
                            size: cdf.sample(&mut rng),
                            start: Some(t as Time),
                            priority: priority.unwrap_or(default_priority),
                            sport: None,
                            dport: None,
                            congestion_control: true,
                            workload: index,
                            round: 0,
                        });
                        t += rng.exponential(mean_gap_ps);
                    }
                }
            }
            WorkloadSpec::Incast {
                senders,
                receiver,
                size_bytes,
                start_us,
                repeat,
                interval_us,
                congestion_control,
                nic,
                priority,
            } => {
                let dst = hosts.nic(loaded, &at("receiver"), receiver, *nic)?;
                let srcs = hosts.hosts(loaded, &at("senders"), senders, *nic)?;
                budget(
                    at("repeat"),
                    flows.len(),
                    srcs.len() as f64 * f64::from(*repeat),
                )?;
                if srcs.contains(&dst) {
                    return Err(
                        loaded.error(&at("senders"), "the receiver cannot also be a sender")
                    );
                }
                for burst in 0..*repeat {
                    let start = from_us(*start_us + burst as f64 * interval_us);
                    for src in &srcs {
                        flows.push(FlowDef {
                            src_nic: *src,
                            dst_nic: dst,
                            size: *size_bytes,
                            start: Some(start),
                            priority: priority.unwrap_or(default_priority),
                            sport: None,
                            dport: None,
                            congestion_control: *congestion_control,
                            workload: index,
                            round: 0,
                        });
                    }
                }
            }
            WorkloadSpec::Alltoall {
                hosts: names,
                size_bytes,
                rounds,
                start_us,
                nic,
                priority,
                ..
            } => {
                let members = hosts.hosts(loaded, &at("hosts"), names, *nic)?;
                if members.len() < 2 {
                    return Err(loaded.error(&at("hosts"), "all-to-all needs at least two hosts"));
                }
                let n = members.len() as f64;
                budget(
                    at("rounds"),
                    flows.len(),
                    n * (n - 1.0) * f64::from(*rounds),
                )?;
                for round in 0..*rounds {
                    for src in &members {
                        for dst in &members {
                            if src != dst {
                                flows.push(FlowDef {
                                    src_nic: *src,
                                    dst_nic: *dst,
                                    size: *size_bytes,
                                    start: (round == 0).then(|| from_us(*start_us)),
                                    priority: priority.unwrap_or(default_priority),
                                    sport: None,
                                    dport: None,
                                    congestion_control: true,
                                    workload: index,
                                    round,
                                });
                            }
                        }
                    }
                }
            }
            WorkloadSpec::Flows { flows: list } => {
                budget(at("flows"), flows.len(), list.len() as f64)?;
                for (i, flow) in list.iter().enumerate() {
                    let field = |f: &str| format!("workload[{index}].flows[{i}].{f}");
                    let src = hosts.nic(loaded, &field("src"), &flow.src, flow.src_nic)?;
                    let dst = hosts.nic(loaded, &field("dst"), &flow.dst, flow.dst_nic)?;
                    if src == dst {
                        return Err(loaded.error(&field("dst"), "a flow needs two different NICs"));
                    }
                    flows.push(FlowDef {
                        src_nic: src,
                        dst_nic: dst,
                        size: flow.size_bytes,
                        start: Some(from_us(flow.start_us)),
                        priority: flow.priority.unwrap_or(default_priority),
                        sport: flow.sport,
                        dport: None,
                        congestion_control: flow.congestion_control,
                        workload: index,
                        round: 0,
                    });
                }
            }
            WorkloadSpec::HpccFlowFile { path } => {
                let full = loaded.base_dir.join(path);
                let file = full.display().to_string();
                let text = std::fs::read_to_string(&full).map_err(|e| {
                    loaded.error(&at("path"), format!("cannot read flow file {file}: {e}"))
                })?;
                flows.extend(parse_hpcc_flows(
                    &text,
                    &file,
                    index,
                    hpcc_node_nic,
                    scenario.switch.control_priority,
                )?);
                budget(at("path"), flows.len(), 0.0)?;
            }
        }
    }
    flows.sort_by_key(|f| (f.start.unwrap_or(Time::MAX), f.workload, f.round));
    Ok(flows)
}

/// Parses the HPCC reference's flow file: `count`, then `src dst priority dport size start_s`.
pub fn parse_hpcc_flows(
    text: &str,
    file: &str,
    workload: usize,
    node_nic: &dyn Fn(u32) -> Option<u32>,
    control_priority: u8,
) -> Result<Vec<FlowDef>, ScenarioError> {
    let err = |line: usize, field: &str, reason: String| ScenarioError {
        file: file.into(),
        line,
        field: field.into(),
        reason,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (line_no, count) = lines
        .next()
        .ok_or_else(|| err(1, "count", "empty flow file".into()))?;
    let count: usize = count.parse().map_err(|e| {
        err(
            line_no,
            "count",
            format!("first line must be the flow count: {e}"),
        )
    })?;
    // The declared count is not trusted for memory: at most one flow per line follows.
    let mut flows = Vec::with_capacity(count.min(text.lines().count()));
    let mut pair_ports = std::collections::HashMap::new();
    for (line_no, line) in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 6 {
            return Err(err(
                line_no,
                "flow",
                format!(
                    "expected `src dst priority dport size start_s`, got {} fields",
                    f.len()
                ),
            ));
        }
        let int = |text: &str, field: &str| -> Result<u64, ScenarioError> {
            text.parse()
                .map_err(|e| err(line_no, field, format!("{text:?}: {e}")))
        };
        let nic = |text: &str, field: &str| -> Result<u32, ScenarioError> {
            let node = int(text, field)?;
            node_nic(node as u32).ok_or_else(|| {
                err(
                    line_no,
                    field,
                    format!("node {node} is not a host of the topology"),
                )
            })
        };
        let src = nic(f[0], "src")?;
        let dst = nic(f[1], "dst")?;
        let priority = int(f[2], "priority")?;
        if priority > 7 || priority as u8 == control_priority {
            return Err(err(
                line_no,
                "priority",
                format!("priority {priority} must be 0..=7 and not the control priority"),
            ));
        }
        let size = int(f[4], "size")?;
        let start_s: f64 = f[5]
            .parse()
            .map_err(|e| err(line_no, "start", format!("{:?}: {e}", f[5])))?;
        if !start_s.is_finite() || start_s < 0.0 || size == 0 || src == dst {
            return Err(err(
                line_no,
                "flow",
                "need size > 0, start ≥ 0 and src ≠ dst".into(),
            ));
        }
        let dport = int(f[3], "dport")?;
        let dport = u16::try_from(dport)
            .map_err(|_| err(line_no, "dport", format!("{dport} is not a UDP port")))?;
        // Source ports as the reference numbers them: per (src, dst) pair from 10000 in file
        // order (`third.cc`, `ScheduleFlowInputs`), so that ECMP hashes the same tuples.
        let next = pair_ports.entry((src, dst)).or_insert(10_000u16);
        let sport = *next;
        *next = next.wrapping_add(1);
        flows.push(FlowDef {
            src_nic: src,
            dst_nic: dst,
            size,
            start: Some((start_s * 1e12).round() as Time),
            priority: priority as u8,
            sport: Some(sport),
            dport: Some(dport),
            congestion_control: true,
            workload,
            round: 0,
        });
    }
    if flows.len() != count {
        return Err(err(
            1,
            "count",
            format!("first line says {count} flows, file has {}", flows.len()),
        ));
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websearch_mean_and_sampling() {
        let cdf = SizeCdf::new(WEBSEARCH_CDF.to_vec()).unwrap();
        // Piecewise-linear mean of the table: Σ midpoint × probability = 1,711,250 bytes.
        let mean = cdf.mean();
        assert!((mean - 1_711_250.0).abs() < 1.0, "mean {mean}");
        let mut rng = Rng::new(3);
        let n = 200_000;
        let sampled: f64 = (0..n).map(|_| cdf.sample(&mut rng) as f64).sum::<f64>() / n as f64;
        assert!(
            (sampled / mean - 1.0).abs() < 0.03,
            "sampled mean {sampled} vs {mean}"
        );
    }

    #[test]
    fn cdf_files_are_validated() {
        assert!(SizeCdf::parse("100 50\n200 100\n", "c.txt").is_ok());
        let e = SizeCdf::parse("100 50\nbad\n", "c.txt").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(SizeCdf::parse("100 50\n200 90\n", "c.txt").is_err());
    }

    #[test]
    fn hpcc_flow_file() {
        let nic = |node: u32| (node < 4).then_some(node);
        let flows = parse_hpcc_flows(
            "2\n0 1 3 100 5000 2.0\n2 3 3 100 800 2.000001\n",
            "f.txt",
            0,
            &nic,
            7,
        )
        .unwrap();
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0].start, Some(2_000_000_000_000));
        assert_eq!(flows[1].size, 800);
        let e = parse_hpcc_flows("1\n0 9 3 100 5000 2.0\n", "f.txt", 0, &nic, 7).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "dst"));
        let e = parse_hpcc_flows("3\n0 1 3 100 5000 2.0\n", "f.txt", 0, &nic, 7).unwrap_err();
        assert_eq!(e.field, "count");
    }
}
