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
//! | `link-flap` | a switch–switch link flaps: 3–5 outages of 1–1.5 ms, one every 2–3 ms | switch drops on that link |
//! | `rnic-flap` | a host's NIC link flaps likewise | an RNIC problem on that RNIC |
//! | `pfc-storm` | a host's NIC sends PFC PAUSE on the probes' (data) priority for 4–8 ms | an RNIC problem on that RNIC |
//! | `ecmp-imbalance` | a first-tier switch hashes every flow onto one uplink while enough of its hosts send to load two uplinks | switch latency on that uplink |
//!
//! A PFC storm pauses the ToR's port toward the storming RNIC (IEEE 802.1Qbb): probes to it
//! queue there until they time out, and the ACKs of its own probes likewise, so its ToR-mesh
//! probes fail and it is the RNIC R-Pingmesh names (§6: "ToR-mesh probing also found a high
//! RTT to an anomalous RNIC"); the probes that wait less come back with a high RTT and are
//! the RNIC's too, not votes against the links they crossed. The uneven ECMP load
//! ("network congestion due to uneven load balancing", R-Pingmesh §2.3; "ToR switch uplink
//! congestion caused by ECMP hash collision", §7) offers twice an uplink's rate to one
//! uplink: DCQCN and PFC keep it lossless, so the probes crossing it see a high network RTT
//! and Algorithm 1 over the high-RTT probes names it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use hawkmesh_netsim::rng::Rng;
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_pingmesh::analysis::{AnalysisConfig, Analyzer, Problem, ProblemKind, TimeoutCause};
use hawkmesh_pingmesh::inventory::Inventory;
use hawkmesh_wire::probe::PROBE_FRAME_BYTES;
use hawkmesh_wire::topology::{NodeId, NodeKind, PortRef};
use serde::Serialize;

use crate::eval::{EvalError, FabricSpec, FabricView, Family};
use crate::hostmesh::{HostmeshProbingConfig, NetsimHostmesh};
use crate::pingmesh::{AgentEvent, AgentEventKind, CpuLoad, NetsimProbing, ProbingConfig};
use hawkmesh_pingmesh::hostmesh::{self, HostmeshProblem, HostmeshProblemKind};

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
    /// A fabric link going down and up repeatedly.
    LinkFlap,
    /// A host link going down and up repeatedly.
    RnicFlap,
    /// A NIC sending PFC PAUSE frames.
    PfcStorm,
    /// One uplink taking every flow of its switch.
    EcmpImbalance,
}

impl FaultFamily {
    /// Every family, in report order.
    pub const ALL: [FaultFamily; 12] = [
        FaultFamily::Healthy,
        FaultFamily::LinkLoss,
        FaultFamily::AclDrop,
        FaultFamily::LinkDown,
        FaultFamily::RnicDown,
        FaultFamily::HostDown,
        FaultFamily::AgentRestart,
        FaultFamily::CpuOverload,
        FaultFamily::LinkFlap,
        FaultFamily::RnicFlap,
        FaultFamily::PfcStorm,
        FaultFamily::EcmpImbalance,
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
            FaultFamily::LinkFlap => "link-flap",
            FaultFamily::RnicFlap => "rnic-flap",
            FaultFamily::PfcStorm => "pfc-storm",
            FaultFamily::EcmpImbalance => "ecmp-imbalance",
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

/// Which system probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// R-Pingmesh: the controller's pinglists, probes and ACKs between hosts.
    #[default]
    Pingmesh,
    /// Hostmesh: each host between its own RNICs across rails, no controller, one-way
    /// (rail-optimised fabrics only).
    Hostmesh,
}

impl Mode {
    /// Parses `pingmesh` or `hostmesh`.
    pub fn parse(text: &str) -> Result<Mode, EvalError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "pingmesh" | "r-pingmesh" => Ok(Mode::Pingmesh),
            "hostmesh" => Ok(Mode::Hostmesh),
            other => Err(EvalError::Config(format!(
                "unknown mode {other:?}; the modes are pingmesh, hostmesh"
            ))),
        }
    }

    /// The families a mode can be judged on: Hostmesh has no controller (no host-down
    /// verdict from missing uploads) and a host knows its own queue pairs (an agent restart
    /// makes no noise).
    pub fn families(self) -> Vec<FaultFamily> {
        FaultFamily::ALL
            .into_iter()
            .filter(|f| {
                self == Mode::Pingmesh
                    || !matches!(f, FaultFamily::HostDown | FaultFamily::AgentRestart)
            })
            .collect()
    }
}

/// What the evaluation runs.
#[derive(Clone, Debug)]
pub struct PingmeshEvalConfig {
    /// R-Pingmesh or Hostmesh.
    pub mode: Mode,
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
            mode: Mode::Pingmesh,
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
    /// Switch latency (high network RTT) on the link between these ports.
    LinkLatency {
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
    /// Format version of this file (2: `mode`).
    pub schema_version: u32,
    /// R-Pingmesh or Hostmesh.
    pub mode: Mode,
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
    if config.mode == Mode::Hostmesh {
        if let Some(f) = config.fabrics.iter().find(|f| **f != Family::Rail) {
            return Err(EvalError::Config(format!(
                "Hostmesh probes between a host's RNICs on different switches: only rail-optimised fabrics have them, not {}",
                f.name()
            )));
        }
        if let Some(f) = config
            .faults
            .iter()
            .find(|f| !Mode::Hostmesh.families().contains(f))
        {
            return Err(EvalError::Config(format!(
                "{} cannot be judged under Hostmesh: without a controller there is no missing upload, and a host knows its own queue pairs",
                f.name()
            )));
        }
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
        schema_version: 2,
        mode: config.mode,
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
        // An ECMP imbalance needs an ECMP group: at least two uplinks per first-tier switch.
        FabricSpec::draw(fabric, fault == FaultFamily::EcmpImbalance, rng)
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
        FaultFamily::LinkLoss
        | FaultFamily::AclDrop
        | FaultFamily::LinkDown
        | FaultFamily::LinkFlap => {
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
                FaultFamily::LinkFlap => {
                    let (toml, what) = flapping(&a, &b, start_ns, rng);
                    fault_toml.push_str(&toml);
                    format!("link {a}–{b} {what}")
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
        FaultFamily::RnicDown | FaultFamily::RnicFlap | FaultFamily::PfcStorm => {
            let nic = rng.below(host.tors.len() as u64) as usize;
            let tor = name(host.tors[nic]);
            let down = start_ns as f64 / 1000.0;
            let what = match fault {
                FaultFamily::RnicDown => {
                    let _ = write!(
                        fault_toml,
                        "[[fault]]\nkind = \"link_flap\"\na = \"{}\"\nb = \"{tor}\"\ndown_us = {down}\nup_us = 1000000\n",
                        host.name
                    );
                    format!("down from {down} µs")
                }
                FaultFamily::RnicFlap => {
                    let (toml, what) = flapping(&host.name, &tor, start_ns, rng);
                    fault_toml.push_str(&toml);
                    what
                }
                _ => {
                    let duration_us = 4_000 + 1_000 * rng.below(5);
                    let _ = write!(
                        fault_toml,
                        "[[fault]]\nkind = \"pfc_injection\"\nhost = \"{}\"\nnic = {nic}\nstart_us = {down}\nduration_us = {duration_us}\n",
                        host.name
                    );
                    format!(
                        "sends PFC PAUSE on the data priority for {duration_us} µs from {down} µs"
                    )
                }
            };
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
                format!("{} NIC {nic} (to {tor}) {what}", host.name),
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
        FaultFamily::EcmpImbalance => {
            let (toml, hot, what) =
                imbalance(&view, &spec, start_ns, rng).ok_or_else(|| EvalError::Trace {
                    trace: id.into(),
                    reason: "no first-tier switch has two uplinks and hosts to load them".into(),
                })?;
            fault_toml.push_str(&toml);
            if hot.is_empty() {
                (Expected::Nothing, what)
            } else {
                (Expected::LinkLatency { ports: hot }, what)
            }
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
    if config.mode == Mode::Hostmesh {
        // A busy CPU is a processing delay, not a network problem: nothing to report.
        let expected = match expected {
            Expected::HostCpu { .. } => Expected::Nothing,
            other => other,
        };
        return hostmesh_trace(
            config,
            (id, fabric, fault),
            &spec,
            &mut sim,
            loads,
            expected,
            description,
        );
    }
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
        Expected::LinkLatency { .. } => report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::SwitchLatency),
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
    let wire_bytes = 3.0 * PROBE_FRAME_BYTES as f64;
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

/// One trace under Hostmesh: the hosts' agents probe their own RNICs for the period, and
/// the period's one-way analysis is judged against `expected`.
fn hostmesh_trace(
    config: &PingmeshEvalConfig,
    (id, fabric, fault): (&str, Family, FaultFamily),
    spec: &FabricSpec,
    sim: &mut Simulation,
    loads: Vec<CpuLoad>,
    expected: Expected,
    description: String,
) -> Result<TraceResult, EvalError> {
    let probe_config = HostmeshProbingConfig {
        timeout_ns: config.probing.timeout_ns,
        priority: config.probing.priority,
        cpu_cost_ns: config.probing.cpu_cost_ns,
        tick_ns: config.probing.tick_ns,
        ..HostmeshProbingConfig::default()
    };
    let agents = NetsimHostmesh::new(sim, probe_config, loads).map_err(|e| EvalError::Trace {
        trace: id.into(),
        reason: e.to_string(),
    })?;
    sim.set_host_hook(Box::new(agents.clone()));
    sim.run_until((config.period_ns + 1_000_000) * NS);
    let records = agents.take_records(sim);
    let inventory = agents.inventory();
    let report = hostmesh::analyse(
        &inventory,
        &records,
        (0, config.period_ns),
        &probe_config.hostmesh,
    );
    let topo = sim.topology();
    let name = |n: NodeId| topo.nodes.get(n as usize).map_or("?", |d| d.name.as_str());
    let port_name = |p: &PortRef| format!("{}.p{}", name(p.node), p.port);
    let matches = |p: &HostmeshProblem| match &expected {
        Expected::Link { ports } => {
            p.kind == HostmeshProblemKind::LinkDrops
                && p.directions.iter().any(|d| ports.contains(d))
        }
        Expected::LinkLatency { ports } => {
            p.kind == HostmeshProblemKind::LinkLatency
                && p.directions.iter().any(|d| ports.contains(d))
        }
        Expected::Rnic { rnic } => {
            matches!(
                p.kind,
                HostmeshProblemKind::RnicDrops | HostmeshProblemKind::RnicLatency
            ) && p.rnics.contains(rnic)
        }
        Expected::Nothing | Expected::HostDown { .. } | Expected::HostCpu { .. } => false,
    };
    let judged: Vec<JudgedProblem> = report
        .problems
        .iter()
        .map(|p| JudgedProblem {
            kind: format!("{:?}", p.kind),
            at: if p.rnics.is_empty() {
                p.directions
                    .iter()
                    .map(|d| format!("{} →", port_name(d)))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                p.rnics
                    .iter()
                    .map(|r| inventory.label(*r))
                    .collect::<Vec<_>>()
                    .join(" or ")
            },
            probes: p.anomalous,
            suspects: p.directions.len() + p.rnics.len(),
            correct: matches(p),
        })
        .collect();
    let located = match expected {
        Expected::Nothing => report.problems.is_empty(),
        _ => judged.iter().any(|p| p.correct),
    };
    let kind_found =
        |kinds: &[HostmeshProblemKind]| report.problems.iter().any(|p| kinds.contains(&p.kind));
    let detected = match &expected {
        Expected::Nothing => report.problems.is_empty(),
        Expected::Link { .. } => kind_found(&[HostmeshProblemKind::LinkDrops]),
        Expected::LinkLatency { .. } => kind_found(&[HostmeshProblemKind::LinkLatency]),
        Expected::Rnic { .. } => kind_found(&[
            HostmeshProblemKind::RnicDrops,
            HostmeshProblemKind::RnicLatency,
        ]),
        Expected::HostDown { .. } | Expected::HostCpu { .. } => false,
    };
    let false_problems = judged.iter().filter(|p| !p.correct).count() as u32;
    let seconds = config.period_ns as f64 / 1e9;
    let rnics = inventory.rnics().len();
    // One packet per probe (no ACK): payload plus Ethernet, IPv4, UDP, BTH, DETH, ICRC/FCS.
    let wire_bytes = PROBE_FRAME_BYTES as f64;
    let probes = agents.probes();
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
        timeouts: vec![("lost".into(), report.lost)],
        rnics,
        probes_per_rnic_per_s: probes as f64 / rnics.max(1) as f64 / seconds,
        bytes_per_rnic_per_s: probes as f64 * wire_bytes / rnics.max(1) as f64 / seconds,
    })
}

/// A `link_flap` fault that flaps the link `a`–`b` from `start_ns`: 3–5 outages of
/// 1–1.5 ms, one every 2–3 ms (R-Pingmesh §2.2: a flapping port or RNIC "frequently
/// fluctuates between up and down"), so the link is down for at least 15 % of a 20-ms
/// period. Returns the TOML and a description.
fn flapping(a: &str, b: &str, start_ns: u64, rng: &mut Rng) -> (String, String) {
    let count = 3 + rng.below(3);
    let outage_us = 1_000 + 100 * rng.below(6);
    let period_us = 2_000 + 250 * rng.below(5);
    let down = start_ns / 1000;
    let toml = format!(
        "[[fault]]\nkind = \"link_flap\"\na = \"{a}\"\nb = \"{b}\"\ndown_us = {down}\nup_us = {}\ncount = {count}\nperiod_us = {period_us}\n",
        down + outage_us
    );
    let what =
        format!("flaps {count} times from {down} µs: down {outage_us} µs every {period_us} µs");
    (toml, what)
}

/// An `ecmp_imbalance` fault with the load that makes it hurt: a first-tier switch with two
/// or more uplinks hashes every flow onto one of them (hash polarisation, R-Pingmesh §2.3),
/// while enough of its hosts send to hosts under other switches to fill two uplinks, for
/// about 3 ms at line rate from `start_ns`. Returns the TOML, the hot link's ports (none
/// when the switch's hosts cannot offer more than the uplink carries: nothing to find) and
/// a description; `None` when no first-tier switch qualifies.
fn imbalance(
    view: &FabricView,
    spec: &FabricSpec,
    start_ns: u64,
    rng: &mut Rng,
) -> Option<(String, Vec<PortRef>, String)> {
    let topo = &view.topo;
    // (switch, NIC index, its hosts) for every first-tier switch with two uplinks.
    let mut candidates: Vec<(NodeId, usize, Vec<usize>)> = Vec::new();
    for (i, host) in view.hosts.iter().enumerate() {
        for (nic, tor) in host.tors.iter().enumerate() {
            if view.adjacency.get(tor).is_none_or(|up| up.len() < 2) {
                continue;
            }
            match candidates.iter_mut().find(|c| c.0 == *tor && c.1 == nic) {
                Some(c) => c.2.push(i),
                None => candidates.push((*tor, nic, vec![i])),
            }
        }
    }
    if candidates.is_empty() {
        return None;
    }
    // Prefer switches with hosts enough to offer more than an uplink carries: an imbalance
    // that congests nothing is no problem (and is judged as such below).
    let congests = |hosts: usize| hosts as f64 * spec.host_gbps > 1.05 * spec.fabric_gbps;
    if candidates.iter().any(|c| congests(c.2.len())) {
        candidates.retain(|c| congests(c.2.len()));
    }
    let (tor, nic, senders) = candidates.swap_remove(rng.below(candidates.len() as u64) as usize);
    let uplinks = &view.adjacency[&tor];
    let toward = uplinks[rng.below(uplinks.len() as u64) as usize];
    // Twice an uplink's rate offered, with the hosts the switch has.
    let wanted = (2.0 * spec.fabric_gbps / spec.host_gbps).ceil() as usize;
    let receivers: Vec<usize> = (0..view.hosts.len())
        .filter(|h| view.hosts[*h].tors.get(nic).is_some_and(|t| *t != tor))
        .collect();
    let n = wanted.min(senders.len()).min(receivers.len());
    if n == 0 {
        return None;
    }
    let first = rng.below(receivers.len() as u64) as usize;
    let size = (spec.host_gbps * 375_000.0) as u64; // 3 ms at line rate
    let start_us = start_ns / 1000;
    let flows: Vec<String> = (0..n)
        .map(|i| {
            let src = &view.hosts[senders[i]].name;
            let dst = &view.hosts[receivers[(first + i) % receivers.len()]].name;
            format!(
                "{{ src = \"{src}\", dst = \"{dst}\", size_bytes = {size}, start_us = {start_us}, src_nic = {nic}, dst_nic = {nic} }}"
            )
        })
        .collect();
    let (tor_name, up_name) = (view.name(tor), view.name(toward));
    let toml = format!(
        "[[workload]]\nkind = \"flows\"\nflows = [{}]\n[[fault]]\nkind = \"ecmp_imbalance\"\nswitch = \"{tor_name}\"\ntoward = \"{up_name}\"\nfraction = 1.0\n",
        flows.join(", ")
    );
    let mut ports: Vec<PortRef> = topo
        .links
        .iter()
        .filter(|l| (l.a.node, l.b.node) == (tor, toward) || (l.a.node, l.b.node) == (toward, tor))
        .flat_map(|l| [l.a, l.b])
        .collect();
    ports.sort();
    let mut what = format!(
        "{tor_name} hashes every flow to {up_name}; {n} hosts send {:.1} MB each from {start_us} µs",
        size as f64 / 1e6
    );
    if !congests(n) {
        // At most the uplink's rate offered: no queue builds, nothing to find.
        what.push_str(" (no more than the uplink's rate: harmless)");
        ports.clear();
    }
    Some((toml, ports, what))
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
        Expected::LinkLatency { ports } => {
            problem.kind == ProblemKind::SwitchLatency
                && problem.links.iter().any(|(l, _)| ports.contains(l))
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
    let _ = writeln!(
        md,
        "# {} evaluation — `hawkmesh pingmesh eval`\n",
        match results.mode {
            Mode::Pingmesh => "R-Pingmesh",
            Mode::Hostmesh => "Hostmesh",
        }
    );
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
