//! R-Pingmesh's evaluation in netsim (`hawkmesh pingmesh eval`): fault families with known
//! ground truth injected into drawn fabrics, the probing agents of [`crate::pingmesh`]
//! running over the simulated packets, one analysis period of the pingmesh analyzer, and a
//! judgement per trace — detected in the period, classified (RNIC, switch network, host),
//! located (the faulty link, RNIC or host), false problems.
//!
//! Fault families (each placed at random on the drawn fabric):
//!
//! | family | injected | expected problem |
//! |---|---|---|
//! | `healthy` | nothing | none |
//! | `link-loss` | a switch–switch link loses 20–50 % of packets (corruption drops) | switch drops on that link |
//! | `acl-drop` | a switch–switch link drops a quarter of the RoCEv2 source ports | switch drops on that link |
//! | `link-down` | a switch–switch link goes down, routes stay | switch drops on that link |
//! | `rnic-down` | a host's NIC link goes down | an RNIC problem on that RNIC |
//! | `host-down` | a host's agent stops (probing, answering, uploading) | host down |
//! | `agent-restart` | a host's agent restarts (new QPNs) | none (QPN-reset noise) |
//! | `cpu-overload` | a host's CPU spends 200–500 µs more per probe packet for 10 ms | host CPU, not its RNIC |

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use hawkmesh_netsim::rng::Rng;
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_pingmesh::analysis::{AnalysisConfig, Analyzer, Problem, ProblemKind, TimeoutCause};
use hawkmesh_pingmesh::inventory::Inventory;
use hawkmesh_wire::probe::PROBE_PAYLOAD_BYTES;
use hawkmesh_wire::topology::{NodeId, NodeKind, PortRef};
use serde::Serialize;

use crate::eval::{EvalError, FabricSpec, Family};
use crate::pingmesh::{AgentEvent, AgentEventKind, CpuLoad, NetsimProbing, ProbingConfig};

/// A fault family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultFamily {
    /// No fault: every problem reported is a false alarm.
    Healthy,
    /// Random loss on a fabric link.
    LinkLoss,
    /// Some source ports dropped on a fabric link.
    AclDrop,
    /// A fabric link down without rerouting.
    LinkDown,
    /// A host link down.
    RnicDown,
    /// A host's agent gone.
    HostDown,
    /// A host's agent restarted.
    AgentRestart,
    /// A host's CPU busy.
    CpuOverload,
}

impl FaultFamily {
    /// Every family, in report order.
    pub const ALL: [FaultFamily; 8] = [
        FaultFamily::Healthy,
        FaultFamily::LinkLoss,
        FaultFamily::AclDrop,
        FaultFamily::LinkDown,
        FaultFamily::RnicDown,
        FaultFamily::HostDown,
        FaultFamily::AgentRestart,
        FaultFamily::CpuOverload,
    ];

    /// Name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            FaultFamily::Healthy => "healthy",
            FaultFamily::LinkLoss => "link-loss",
            FaultFamily::AclDrop => "acl-drop",
            FaultFamily::LinkDown => "link-down",
            FaultFamily::RnicDown => "rnic-down",
            FaultFamily::HostDown => "host-down",
            FaultFamily::AgentRestart => "agent-restart",
            FaultFamily::CpuOverload => "cpu-overload",
        }
    }

    /// Parses a family name.
    pub fn parse(text: &str) -> Result<FaultFamily, EvalError> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        FaultFamily::ALL
            .into_iter()
            .find(|f| f.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultFamily::ALL.iter().map(|f| f.name()).collect();
                EvalError::Config(format!(
                    "unknown fault family {text:?}; the families are {}",
                    names.join(", ")
                ))
            })
    }
}

/// What the evaluation runs.
#[derive(Clone, Debug)]
pub struct PingmeshEvalConfig {
    /// Fabric families to draw from.
    pub fabrics: Vec<Family>,
    /// Fault families.
    pub faults: Vec<FaultFamily>,
    /// Traces per fabric and fault family.
    pub traces: u32,
    /// Master seed.
    pub seed: u64,
    /// The agents' probing.
    pub probing: ProbingConfig,
    /// The analyzer (at simulation scale).
    pub analysis: AnalysisConfig,
    /// The analysis period, ns of simulated time (the paper's 20 s, scaled).
    pub period_ns: u64,
}

impl Default for PingmeshEvalConfig {
    fn default() -> Self {
        PingmeshEvalConfig {
            fabrics: vec![Family::Clos, Family::Rail],
            faults: FaultFamily::ALL.to_vec(),
            traces: 3,
            seed: 1,
            probing: ProbingConfig::default(),
            analysis: simulation_scale_analysis(20_000_000),
            period_ns: 20_000_000,
        }
    }
}

/// The paper's analyzer settings (§5) scaled to a simulated period of `period_ns`: host down
/// after half a period of silence (agents upload continuously here), RNICs held anomalous
/// for three periods, CPU noise above 200 µs of responder delay, high RTT above 200 µs.
pub fn simulation_scale_analysis(period_ns: u64) -> AnalysisConfig {
    AnalysisConfig {
        host_silence_ns: period_ns / 2,
        rnic_hold_ns: 3 * period_ns,
        cpu_noise_delay_ns: 200_000,
        high_rtt_ns: 200_000,
        ..AnalysisConfig::default()
    }
}

/// What a trace should be found to have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expected {
    /// Nothing to report.
    Nothing,
    /// Switch drops on the link between these ports.
    Link {
        /// Both ends.
        ports: Vec<PortRef>,
    },
    /// An RNIC problem.
    Rnic {
        /// The RNIC (netsim NIC index).
        rnic: u32,
    },
    /// The host is down.
    HostDown {
        /// The host.
        host: NodeId,
    },
    /// The host's CPU.
    HostCpu {
        /// The host.
        host: NodeId,
    },
}

/// One reported problem, as judged.
#[derive(Clone, Debug, Serialize)]
pub struct JudgedProblem {
    /// Its kind.
    pub kind: String,
    /// Where: links, RNIC or host, by name.
    pub at: String,
    /// Anomalous probes behind it.
    pub probes: u32,
    /// Suspect links named (switch problems; 0 otherwise).
    pub suspects: usize,
    /// It is the injected fault, correctly classified and located.
    pub correct: bool,
}

/// One trace's result.
#[derive(Clone, Debug, Serialize)]
pub struct TraceResult {
    /// Trace id.
    pub trace: String,
    /// Fabric family.
    pub fabric: Family,
    /// Fault family.
    pub fault: FaultFamily,
    /// The fabric drawn.
    pub fabric_description: String,
    /// The fault injected.
    pub fault_description: String,
    /// Ground truth.
    pub expected: Expected,
    /// A problem of the right class was reported in the period.
    pub detected: bool,
    /// ... and it is located at the fault.
    pub located: bool,
    /// Problems reported that are not the injected fault.
    pub false_problems: u32,
    /// Every problem reported.
    pub problems: Vec<JudgedProblem>,
    /// Timeouts per cause.
    pub timeouts: Vec<(String, u64)>,
    /// RNICs probing.
    pub rnics: usize,
    /// Probes sent per second per RNIC (simulated time).
    pub probes_per_rnic_per_s: f64,
    /// Probe and ACK bytes sent per second per RNIC (payload and headers).
    pub bytes_per_rnic_per_s: f64,
}

/// Per fabric and fault family.
#[derive(Clone, Debug, Serialize)]
pub struct FamilySummary {
    /// Fabric family.
    pub fabric: Family,
    /// Fault family.
    pub fault: FaultFamily,
    /// Traces.
    pub traces: u32,
    /// Faults detected within the period (healthy and agent-restart: traces without any
    /// problem).
    pub detected: u32,
    /// Faults located correctly.
    pub located: u32,
    /// Problems reported that were not the fault.
    pub false_problems: u32,
}

/// The whole evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct PingmeshEvalResults {
    /// Format version of this file.
    pub schema_version: u32,
    /// Master seed.
    pub seed: u64,
    /// Analysis period, ns.
    pub period_ns: u64,
    /// Probe rates over the paper's (ToR-mesh probes per second per RNIC / 10).
    pub rate_scale: f64,
    /// Every trace.
    pub traces: Vec<TraceResult>,
    /// Per fabric and fault family.
    pub summary: Vec<FamilySummary>,
    /// Correct problems over all problems reported.
    pub precision: f64,
    /// Injected faults detected and located, over those that should be (healthy and
    /// agent-restart traces count when nothing was reported).
    pub detection: f64,
}

/// Runs the evaluation.
pub fn run(config: &PingmeshEvalConfig) -> Result<PingmeshEvalResults, EvalError> {
    if config.traces == 0 {
        return Err(EvalError::Config("--traces must be at least 1".into()));
    }
    let mut traces = Vec::new();
    for fabric in &config.fabrics {
        for fault in &config.faults {
            for index in 0..config.traces {
                let stream = (*fabric as u64) << 32 | (*fault as u64) << 16 | u64::from(index);
                let mut rng = Rng::derive(config.seed, stream);
                let id = format!("{}-{}-{index:03}", fabric.name(), fault.name());
                traces.push(run_trace(config, &id, *fabric, *fault, &mut rng)?);
            }
        }
    }
    let mut summary = Vec::new();
    for fabric in &config.fabrics {
        for fault in &config.faults {
            let mine: Vec<&TraceResult> = traces
                .iter()
                .filter(|t| t.fabric == *fabric && t.fault == *fault)
                .collect();
            summary.push(FamilySummary {
                fabric: *fabric,
                fault: *fault,
                traces: mine.len() as u32,
                detected: mine.iter().filter(|t| t.detected).count() as u32,
                located: mine.iter().filter(|t| t.located).count() as u32,
                false_problems: mine.iter().map(|t| t.false_problems).sum(),
            });
        }
    }
    let reported: usize = traces.iter().map(|t| t.problems.len()).sum();
    let correct: usize = traces
        .iter()
        .map(|t| t.problems.iter().filter(|p| p.correct).count())
        .sum();
    let located = traces.iter().filter(|t| t.located).count();
    Ok(PingmeshEvalResults {
        schema_version: 1,
        seed: config.seed,
        period_ns: config.period_ns,
        rate_scale: config.probing.pinglists.tor_mesh_pps / 10.0,
        precision: if reported == 0 {
            1.0
        } else {
            correct as f64 / reported as f64
        },
        detection: located as f64 / traces.len().max(1) as f64,
        traces,
        summary,
    })
}

fn run_trace(
    config: &PingmeshEvalConfig,
    id: &str,
    fabric: Family,
    fault: FaultFamily,
    rng: &mut Rng,
) -> Result<TraceResult, EvalError> {
    let spec = if fabric == Family::K4 {
        FabricSpec::k4()
    } else {
        FabricSpec::draw(fabric, false, rng)
    };
    let view = spec.view()?;
    let topo = &view.topo;
    let name = |n: NodeId| view.name(n);
    let switch_links: Vec<usize> = topo
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            topo.nodes[l.a.node as usize].kind == NodeKind::Switch
                && topo.nodes[l.b.node as usize].kind == NodeKind::Switch
        })
        .map(|(i, _)| i)
        .collect();
    let host = view.hosts[rng.below(view.hosts.len() as u64) as usize].clone();
    let start_ns = 2_000_000 + rng.below(3_000_000);
    let mut fault_toml = String::new();
    let mut loads = Vec::new();
    let mut events = Vec::new();
    let (expected, description) = match fault {
        FaultFamily::Healthy => (Expected::Nothing, "no fault".to_string()),
        FaultFamily::LinkLoss | FaultFamily::AclDrop | FaultFamily::LinkDown => {
            if switch_links.is_empty() {
                return Err(EvalError::Trace {
                    trace: id.into(),
                    reason: "the fabric has no switch-to-switch link".into(),
                });
            }
            let link = &topo.links[switch_links[rng.below(switch_links.len() as u64) as usize]];
            let (a, b) = (name(link.a.node), name(link.b.node));
            let what = match fault {
                FaultFamily::LinkLoss => {
                    let rate = 0.2 + 0.3 * rng.next_f64();
                    let rate = (rate * 100.0).round() / 100.0;
                    let _ = write!(
                        fault_toml,
                        "[[fault]]\nkind = \"random_loss\"\na = \"{a}\"\nb = \"{b}\"\nrate = {rate}\n"
                    );
                    format!("link {a}–{b} loses {:.0} % of packets", rate * 100.0)
                }
                FaultFamily::AclDrop => {
                    let first = 0xC000 + 0x1000 * rng.below(4) as u16;
                    let last = first + 0x0FFF;
                    let _ = write!(
                        fault_toml,
                        "[[fault]]\nkind = \"acl_drop\"\na = \"{a}\"\nb = \"{b}\"\nsrc_port_min = {first}\nsrc_port_max = {last}\n"
                    );
                    format!("link {a}–{b} drops UDP source ports {first}–{last}")
                }
                _ => {
                    let down = start_ns as f64 / 1000.0;
                    let _ = write!(
                        fault_toml,
                        "[[fault]]\nkind = \"link_flap\"\na = \"{a}\"\nb = \"{b}\"\ndown_us = {down}\nup_us = 1000000\n"
                    );
                    format!("link {a}–{b} down from {down} µs, routes unchanged")
                }
            };
            let mut ports = vec![link.a, link.b];
            ports.sort();
            (Expected::Link { ports }, what)
        }
        FaultFamily::RnicDown => {
            let nic = rng.below(host.tors.len() as u64) as usize;
            let tor = name(host.tors[nic]);
            let down = start_ns as f64 / 1000.0;
            let _ = write!(
                fault_toml,
                "[[fault]]\nkind = \"link_flap\"\na = \"{}\"\nb = \"{tor}\"\ndown_us = {down}\nup_us = 1000000\n",
                host.name
            );
            // The inventory's RNIC order is netsim's NIC order (NetsimProbing checks it).
            let inventory = Inventory::from_topology(topo).map_err(|e| EvalError::Trace {
                trace: id.into(),
                reason: e.to_string(),
            })?;
            let rnic = inventory
                .rnics()
                .iter()
                .position(|r| r.host == host.node && usize::from(r.nic) == nic)
                .ok_or_else(|| EvalError::Trace {
                    trace: id.into(),
                    reason: format!("{} has no NIC {nic}", host.name),
                })? as u32;
            (
                Expected::Rnic { rnic },
                format!("{} NIC {nic} (to {tor}) down from {down} µs", host.name),
            )
        }
        FaultFamily::HostDown => {
            events.push(AgentEvent {
                host: host.node,
                at_ns: start_ns,
                kind: AgentEventKind::Down,
            });
            (
                Expected::HostDown { host: host.node },
                format!("{} down from {} µs", host.name, start_ns / 1000),
            )
        }
        FaultFamily::AgentRestart => {
            events.push(AgentEvent {
                host: host.node,
                at_ns: start_ns,
                kind: AgentEventKind::Restart,
            });
            (
                Expected::Nothing,
                format!("{}'s agent restarts at {} µs", host.name, start_ns / 1000),
            )
        }
        FaultFamily::CpuOverload => {
            let extra = 200_000 + 100_000 * rng.below(4);
            loads.push(CpuLoad {
                host: host.node,
                extra_ns: extra,
                from_ns: start_ns,
                until_ns: start_ns + 10_000_000,
            });
            (
                Expected::HostCpu { host: host.node },
                format!(
                    "{}'s CPU takes {} µs more per probe packet for 10 ms from {} µs",
                    host.name,
                    extra / 1000,
                    start_ns / 1000
                ),
            )
        }
    };
    let duration_us = (config.period_ns + 1_000_000) / 1000;
    let text = format!(
        "version = 1\nduration_us = {duration_us}\n{}\n[switch]\n{}\n{fault_toml}",
        spec.topology_toml(),
        spec.switch_toml()
    );
    let loaded = Scenario::parse(&text, &format!("{id}.toml"), ".".into()).map_err(|e| {
        EvalError::Trace {
            trace: id.into(),
            reason: e.to_string(),
        }
    })?;
    let mut sim = Simulation::new(&loaded).map_err(|e| EvalError::Trace {
        trace: id.into(),
        reason: e.to_string(),
    })?;
    let probing =
        NetsimProbing::new(&sim, config.probing, loads, events).map_err(|e| EvalError::Trace {
            trace: id.into(),
            reason: e.to_string(),
        })?;
    sim.set_host_hook(Box::new(probing.clone()));
    sim.run_until((config.period_ns + 1_000_000) * NS);
    let records = probing.take_records(&sim);
    let inventory = probing.inventory();
    let mut analyzer = Analyzer::new(config.analysis);
    for (host, at) in probing.last_uploads(config.period_ns) {
        analyzer.uploaded(host, at);
    }
    let report = analyzer.analyse(
        &inventory,
        &probing.current_qpns(),
        &records,
        (0, config.period_ns),
        None,
    );
    let port_name = |p: &PortRef| format!("{}.p{}", name(p.node), p.port);
    let judged: Vec<JudgedProblem> = report
        .problems
        .iter()
        .map(|p| JudgedProblem {
            kind: format!("{:?}", p.kind),
            at: match p.kind {
                ProblemKind::Rnic => p.rnic.map(|r| inventory.label(r)).unwrap_or_default(),
                ProblemKind::HostCpu | ProblemKind::HostDown => {
                    p.host.map(&name).unwrap_or_default()
                }
                ProblemKind::SwitchDrops | ProblemKind::SwitchLatency => p
                    .links
                    .iter()
                    .map(|(l, v)| format!("{} ({v})", port_name(l)))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            probes: p.probes,
            suspects: p.links.len(),
            correct: matches(&expected, p),
        })
        .collect();
    let located = match expected {
        Expected::Nothing => report.problems.is_empty(),
        _ => judged.iter().any(|p| p.correct),
    };
    let detected = match &expected {
        Expected::Nothing => report.problems.is_empty(),
        Expected::Link { .. } => report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::SwitchDrops),
        Expected::Rnic { .. } => report.problems.iter().any(|p| p.kind == ProblemKind::Rnic),
        Expected::HostDown { .. } => report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::HostDown),
        Expected::HostCpu { .. } => report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::HostCpu),
    };
    let false_problems = judged.iter().filter(|p| !p.correct).count() as u32;
    let stats = probing.stats();
    let seconds = config.period_ns as f64 / 1e9;
    let rnics = inventory.rnics().len();
    // A probe, its ACK and its delay ACK: payload plus Ethernet, IPv4, UDP, BTH, DETH and
    // ICRC/FCS on the wire (RoCEv2 UD SEND).
    let wire_bytes = 3.0 * (PROBE_PAYLOAD_BYTES as f64 + 14.0 + 20.0 + 8.0 + 12.0 + 8.0 + 8.0);
    Ok(TraceResult {
        trace: id.into(),
        fabric,
        fault,
        fabric_description: spec.describe(),
        fault_description: description,
        expected,
        detected,
        located,
        false_problems,
        problems: judged,
        timeouts: report
            .timeouts
            .iter()
            .map(|(cause, n)| (timeout_name(*cause).into(), *n))
            .collect(),
        rnics,
        probes_per_rnic_per_s: stats.probes as f64 / rnics.max(1) as f64 / seconds,
        bytes_per_rnic_per_s: stats.probes as f64 * wire_bytes / rnics.max(1) as f64 / seconds,
    })
}

fn timeout_name(cause: TimeoutCause) -> &'static str {
    match cause {
        TimeoutCause::HostDown => "host_down",
        TimeoutCause::QpnReset => "qpn_reset",
        TimeoutCause::CpuNoise => "cpu_noise",
        TimeoutCause::Rnic => "rnic",
        TimeoutCause::SwitchNetwork => "switch_network",
    }
}

/// Whether a reported problem is the injected fault, classified and located.
fn matches(expected: &Expected, problem: &Problem) -> bool {
    match expected {
        Expected::Nothing => false,
        Expected::Link { ports } => {
            let faulty: BTreeSet<&PortRef> = ports.iter().collect();
            // Algorithm 1 names the most voted links, several when they tie: located when
            // the faulty link is among them (`suspects` says how many there were).
            problem.kind == ProblemKind::SwitchDrops
                && problem.links.iter().any(|(l, _)| faulty.contains(l))
        }
        Expected::Rnic { rnic } => problem.kind == ProblemKind::Rnic && problem.rnic == Some(*rnic),
        Expected::HostDown { host } => {
            problem.kind == ProblemKind::HostDown && problem.host == Some(*host)
        }
        Expected::HostCpu { host } => {
            problem.kind == ProblemKind::HostCpu && problem.host == Some(*host)
        }
    }
}

/// Writes `results.json` and `report.md` into `out`.
pub fn write(results: &PingmeshEvalResults, out: &Path, command: &str) -> Result<(), EvalError> {
    let io = |path: &Path, source| EvalError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let json = serde_json::to_string_pretty(results)
        .map_err(|e| EvalError::Config(format!("serialising the results: {e}")))?;
    let path = out.join("results.json");
    std::fs::write(&path, json + "\n").map_err(|e| io(&path, e))?;
    let path = out.join("report.md");
    std::fs::write(&path, report_md(results, command)).map_err(|e| io(&path, e))?;
    Ok(())
}

fn report_md(results: &PingmeshEvalResults, command: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# R-Pingmesh evaluation — `hawkmesh pingmesh eval`\n");
    let _ = writeln!(
        md,
        "Reproduce with `{command}`. One analysis period of {} ms of simulated time per trace (the paper's 20 s, with probe rates scaled up alike); see `lab/src/pingmesh_eval.rs` for the fault families and what each should be found as.\n",
        results.period_ns / 1_000_000
    );
    let _ = writeln!(
        md,
        "**Precision** (correct problems / problems reported): {:.2}. **Detected and located within the period** (faults found at their place; fault-free and agent-restart traces count when nothing was reported): {:.2}.\n",
        results.precision, results.detection
    );
    let _ = writeln!(md, "## Per fabric and fault family\n");
    let _ = writeln!(
        md,
        "| fabric | fault | traces | detected | located | false problems |\n|---|---|---|---|---|---|"
    );
    for s in &results.summary {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            s.fabric.name(),
            s.fault.name(),
            s.traces,
            s.detected,
            s.located,
            s.false_problems
        );
    }
    let _ = writeln!(md, "\n## Probing overhead\n");
    let n = results.traces.len().max(1) as f64;
    let pps = results
        .traces
        .iter()
        .map(|t| t.probes_per_rnic_per_s)
        .sum::<f64>()
        / n;
    let bps = results
        .traces
        .iter()
        .map(|t| t.bytes_per_rnic_per_s)
        .sum::<f64>()
        / n;
    let _ = writeln!(
        md,
        "Mean over traces: {pps:.0} probes/s per RNIC, {:.0} kbit/s per RNIC (probe, ACK and delay ACK on the wire) at the scaled rates; at the paper's rates (ToR-mesh 10/s, 10/s per link) divide by {:.0}.\n",
        bps * 8.0 / 1000.0,
        results.rate_scale
    );
    let _ = writeln!(md, "## Traces\n");
    let _ = writeln!(
        md,
        "| trace | fabric | fault | located | problems (✓ = the fault) | timeouts |\n|---|---|---|---|---|---|"
    );
    for t in &results.traces {
        let problems: Vec<String> = t
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}{} at {} ({} probes)",
                    if p.correct { "✓ " } else { "" },
                    p.kind,
                    p.at,
                    p.probes
                )
            })
            .collect();
        let timeouts: Vec<String> = t.timeouts.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            t.trace,
            t.fabric_description,
            t.fault_description,
            if t.located { "yes" } else { "**no**" },
            if problems.is_empty() {
                "—".into()
            } else {
                problems.join("; ")
            },
            if timeouts.is_empty() {
                "—".into()
            } else {
                timeouts.join(", ")
            }
        );
    }
    md
}
