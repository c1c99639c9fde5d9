//! The counter-only PFC watchdog ([`hawkmesh_congestion::watchdog`], after SONiC pfcwd) on a
//! netsim scenario: every port of the fabric read continuously through
//! [`NetsimCounters`] while the scenario runs, each sample fed to the watchdog, and after
//! every sweep the wait graph over the fabric's links searched for deadlock cycles.
//!
//! Scenarios last milliseconds where a fabric runs for days, so the watchdog's times are
//! scaled down with the sampling: SONiC's 200 ms detection and restoration over a ~100 ms
//! poll become, say, 200 µs over a 20 µs sweep — both are [`WatchdogEvalConfig`] fields.
//! The simulation's ground truth (the injected anomalies) is returned beside the verdicts.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use hawkmesh_congestion::watchdog::link_map;
use hawkmesh_congestion::{
    Clock, CounterSource, LinkMap, PortId, PortKey, SourceError, Verdict, Watchdog, WatchdogConfig,
};
use hawkmesh_netsim::{LoadedScenario, ScenarioError, Simulation};
use hawkmesh_wire::topology::{FabricTopology, PortRef};
use serde::Serialize;

use crate::counters::{NetsimClock, NetsimCounters};

/// How the watchdog samples a scenario.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WatchdogEvalConfig {
    /// Time between the end of one sweep over every port and the start of the next, ns.
    pub spacing_ns: u64,
    /// A query's turnaround, ns, drawn between these (a sweep reads ports one after the
    /// other, so this is also the skew between a sweep's first and last port).
    pub turnaround_ns: (u64, u64),
    /// Paused without transmitting this long is a storm, ns (SONiC pfcwd: 200 ms).
    pub detection_ns: u64,
    /// No pauses for this long restores a stormed queue, ns (SONiC pfcwd: 200 ms).
    pub restoration_ns: u64,
    /// The priorities watched (`None`: the scenario's data priority).
    pub priorities: Option<Vec<u8>>,
    /// Seed of the turnarounds.
    pub seed: u64,
    /// Sample until this time, ns (`None`: the scenario's duration).
    pub until_ns: Option<u64>,
}

impl Default for WatchdogEvalConfig {
    fn default() -> Self {
        WatchdogEvalConfig {
            spacing_ns: 20_000,
            turnaround_ns: (0, 200),
            detection_ns: 200_000,
            restoration_ns: 200_000,
            priorities: None,
            seed: 1,
            until_ns: None,
        }
    }
}

/// A deadlock cycle, first seen at a sweep and followed while it lasts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeadlockSeen {
    /// The priority.
    pub priority: u8,
    /// The cycle's ports, each waiting on the next.
    pub cycle: Vec<PortId>,
    /// The first sweep that found it, ns (the latest read time among its ports).
    pub first_ns: u64,
    /// The last sweep that found it, ns.
    pub last_ns: u64,
    /// Sweeps that found it.
    pub sweeps: u32,
}

/// An anomaly the scenario injected (the simulation's ground truth), with port names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TruthLine {
    /// The kind (`PfcStorm`, `RoutingLoop`, `IncastBurst`, …).
    pub kind: String,
    /// Its start, ns.
    pub start_ns: u64,
    /// Its end, ns.
    pub end_ns: u64,
    /// The initial congestion ports, `node:port`.
    pub initial_ports: Vec<String>,
    /// The cyclic buffer dependency's ports, `node:port` (routing loops).
    pub loop_ports: Vec<String>,
}

/// What the watchdog concluded on a scenario.
#[derive(Clone, Debug, Serialize)]
pub struct WatchdogEval {
    /// The scenario's name.
    pub scenario: String,
    /// The settings.
    pub config: WatchdogEvalConfig,
    /// The priorities watched.
    pub priorities: Vec<u8>,
    /// Ports sampled.
    pub ports: usize,
    /// Sweeps made.
    pub sweeps: usize,
    /// Storms and restorations, in the order declared.
    pub verdicts: Vec<Verdict>,
    /// Deadlock cycles (one entry per distinct cycle).
    pub deadlocks: Vec<DeadlockSeen>,
    /// The injected anomalies.
    pub truth: Vec<TruthLine>,
}

impl WatchdogEval {
    /// The storms declared, as (port, priority, since, detected).
    pub fn storms(&self) -> Vec<(&PortId, u8, u64, u64)> {
        self.verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Storm {
                    port,
                    priority,
                    since_ns,
                    detected_ns,
                    ..
                } => Some((port, *priority, *since_ns, *detected_ns)),
                _ => None,
            })
            .collect()
    }

    /// One line: how many storms on how many ports, the first, and the deadlocks.
    pub fn summary(&self) -> String {
        let storms = self.storms();
        let ports: BTreeSet<String> = storms.iter().map(|s| s.0.to_string()).collect();
        let mut out = match storms.iter().min_by_key(|s| (s.2, s.3)) {
            None => "no storm".to_string(),
            Some((port, prio, since, detected)) => format!(
                "{} storm(s) on {} port(s), first {port} prio {prio} (stalled from {:.0} µs, declared at {:.0} µs)",
                storms.len(),
                ports.len(),
                *since as f64 / 1e3,
                *detected as f64 / 1e3
            ),
        };
        if self.deadlocks.is_empty() {
            out.push_str("; no deadlock");
        } else {
            for d in &self.deadlocks {
                let ports: Vec<String> = d.cycle.iter().map(|p| p.to_string()).collect();
                out.push_str(&format!(
                    "; deadlock prio {} [{}] from {:.0} µs",
                    d.priority,
                    ports.join(" → "),
                    d.first_ns as f64 / 1e3
                ));
            }
        }
        out
    }
}

/// The fabric's links as the watchdog's link map, by node name and port number.
pub fn fabric_links(topology: &FabricTopology) -> LinkMap {
    let key = |r: PortRef| {
        topology
            .nodes
            .get(r.node as usize)
            .map(|n| PortKey::new(n.name.clone(), u32::from(r.port)))
    };
    let pairs: Vec<(PortKey, PortKey)> = topology
        .links
        .iter()
        .filter_map(|l| Some((key(l.a)?, key(l.b)?)))
        .collect();
    link_map(&pairs)
}

fn name_of(topology: &FabricTopology, r: &PortRef) -> String {
    match topology.nodes.get(r.node as usize) {
        Some(n) => format!("{}:{}", n.name, r.port),
        None => format!("node{}:{}", r.node, r.port),
    }
}

/// Why the evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum WatchdogEvalError {
    /// The scenario does not build.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A port could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Samples every port of `loaded`'s fabric through the scenario and runs the watchdog.
pub fn run(
    loaded: &LoadedScenario,
    cfg: &WatchdogEvalConfig,
) -> Result<WatchdogEval, WatchdogEvalError> {
    let sim = Rc::new(RefCell::new(Simulation::new(loaded)?));
    let priorities = cfg
        .priorities
        .clone()
        .unwrap_or_else(|| vec![loaded.scenario.nic.data_priority]);
    let links = fabric_links(sim.borrow().topology());
    // τ does not matter here: the watchdog reads the PFC counters only.
    let mut source = NetsimCounters::new(sim.clone(), 1.0, cfg.turnaround_ns, cfg.seed);
    let mut clock = NetsimClock(sim.clone());
    let ports = source.ports();
    let mut watchdog = Watchdog::new(WatchdogConfig {
        detection_ns: cfg.detection_ns,
        restoration_ns: cfg.restoration_ns,
        priorities: priorities.clone(),
    });
    let end_ns = cfg
        .until_ns
        .unwrap_or((loaded.scenario.duration_us * 1_000.0) as u64);
    let mut verdicts = Vec::new();
    let mut deadlocks: Vec<DeadlockSeen> = Vec::new();
    let mut sweeps = 0;
    while clock.now_ns() < end_ns {
        for port in &ports {
            let sample = source.read(port)?;
            verdicts.extend(watchdog.observe(&sample));
        }
        sweeps += 1;
        for v in watchdog.deadlocks(&links) {
            let Verdict::Deadlock {
                priority,
                cycle,
                detected_ns,
            } = v
            else {
                continue;
            };
            let set: BTreeSet<PortKey> = cycle.iter().map(PortId::key).collect();
            match deadlocks.iter_mut().find(|d| {
                d.priority == priority
                    && d.cycle.iter().map(PortId::key).collect::<BTreeSet<_>>() == set
            }) {
                Some(d) => {
                    d.last_ns = detected_ns;
                    d.sweeps += 1;
                }
                None => deadlocks.push(DeadlockSeen {
                    priority,
                    cycle,
                    first_ns: detected_ns,
                    last_ns: detected_ns,
                    sweeps: 1,
                }),
            }
        }
        clock.sleep_ns(cfg.spacing_ns.max(1));
    }
    let s = &loaded.scenario;
    let result = sim.borrow().result(&s.name, s.seed, &s.output.fct_bins);
    let topology = sim.borrow().topology().clone();
    let truth = result
        .ground_truth
        .iter()
        .map(|a| TruthLine {
            kind: format!("{:?}", a.kind),
            start_ns: a.start_ns,
            end_ns: a.end_ns,
            initial_ports: a
                .initial_ports
                .iter()
                .map(|p| name_of(&topology, p))
                .collect(),
            loop_ports: a.loop_ports.iter().map(|p| name_of(&topology, p)).collect(),
        })
        .collect();
    Ok(WatchdogEval {
        scenario: s.name.clone(),
        config: cfg.clone(),
        priorities,
        ports: ports.len(),
        sweeps,
        verdicts,
        deadlocks,
        truth,
    })
}
