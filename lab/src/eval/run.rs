//! The evaluation runner: traces × parameter points × collection methods, judged against
//! ground truth, plus the telemetry ablations.

use super::fabrics::Family;
use super::judge::{
    attributed, judge_victim, round4, truth_of, Exposure, FlowPaths, Score, Truth, Verdict, Window,
};
use super::traces::{generate_on, AnomalyClass, TraceSpec};
use super::EvalError;
use crate::{IncidentOutcome, LoopConfig, LoopOutcome, PollingMode};
use hawkmesh_analyzer::{diagnose_reports, loaded, render, DiagnoseOptions};
use hawkmesh_wire::telemetry::TelemetryReport;
use hawkmesh_wire::topology::{FabricTopology, NodeId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Version of the `results.json` layout.
pub const RESULTS_SCHEMA_VERSION: u32 = 2;
/// Epoch sizes swept (log2 ns): 131 µs … 2.1 ms, HAWKEYE's 100 µs – 2 ms.
pub const EPOCHS_LOG2_NS: [u8; 5] = [17, 18, 19, 20, 21];
/// RTT thresholds swept, % of the base RTT (HAWKEYE: 200 % – 500 %).
pub const THRESHOLDS_PERCENT: [u32; 4] = [200, 300, 400, 500];
/// The epoch size the threshold sweep, the baselines' overhead and the ablations use.
pub const FIXED_EPOCH_LOG2_NS: u8 = 18;
/// The threshold the epoch sweep, the baselines' overhead and the ablations use.
pub const FIXED_THRESHOLD_PERCENT: u32 = 300;
/// Attempts per trace to draw one whose anomaly materialises.
pub const MAX_ATTEMPTS: u32 = 8;

/// Which parameter points run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grid {
    /// Every epoch size at the fixed threshold and every threshold at the fixed epoch size
    /// (5 + 3 = 8 points).
    Sweep,
    /// The full cross product (5 × 4 = 20 points).
    Full,
    /// Only the fixed point (quick runs and tests).
    Fixed,
}

impl Grid {
    /// Parses `sweep`, `full` or `fixed`.
    pub fn parse(text: &str) -> Result<Grid, EvalError> {
        match text {
            "sweep" => Ok(Grid::Sweep),
            "full" => Ok(Grid::Full),
            "fixed" => Ok(Grid::Fixed),
            other => Err(EvalError::Config(format!(
                "unknown grid {other:?}; use sweep, full or fixed"
            ))),
        }
    }

    /// The points, in run order (epoch, then threshold).
    pub fn points(self) -> Vec<Point> {
        let fixed = Point::fixed();
        let mut points = Vec::new();
        for epoch in EPOCHS_LOG2_NS {
            for threshold in THRESHOLDS_PERCENT {
                let point = Point {
                    epoch_log2_ns: epoch,
                    threshold_percent: threshold,
                };
                let wanted = match self {
                    Grid::Full => true,
                    Grid::Sweep => {
                        epoch == fixed.epoch_log2_ns || threshold == fixed.threshold_percent
                    }
                    Grid::Fixed => point == fixed,
                };
                if wanted {
                    points.push(point);
                }
            }
        }
        points
    }
}

/// One parameter point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Point {
    /// log2 of the epoch, ns.
    pub epoch_log2_ns: u8,
    /// Host RTT threshold, % of the base RTT.
    pub threshold_percent: u32,
}

impl Point {
    /// The fixed point of the sweeps.
    pub fn fixed() -> Point {
        Point {
            epoch_log2_ns: FIXED_EPOCH_LOG2_NS,
            threshold_percent: FIXED_THRESHOLD_PERCENT,
        }
    }

    /// Epoch size, µs.
    pub fn epoch_us(self) -> f64 {
        (1u64 << self.epoch_log2_ns) as f64 / 1000.0
    }

    /// `2^18 ns (262 µs), 300 %`.
    pub fn label(self) -> String {
        format!(
            "2^{} ns ({:.0} µs), {} %",
            self.epoch_log2_ns,
            self.epoch_us(),
            self.threshold_percent
        )
    }
}

/// What to evaluate.
#[derive(Clone, Debug)]
pub struct EvalConfig {
    /// Master seed of every trace.
    pub master_seed: u64,
    /// Traces per class (and fabric family).
    pub traces_per_class: u32,
    /// Classes, in report order.
    pub classes: Vec<AnomalyClass>,
    /// Fabric families, in report order.
    pub families: Vec<Family>,
    /// Parameter points.
    pub grid: Grid,
    /// Scratch directory for the analyzers' stores (emptied as runs finish).
    pub work_dir: PathBuf,
    /// Where to keep the evidence of every attributed incident at the fixed point
    /// (`<dir>/<trace>/topology.json` and `<dir>/<trace>/<method>/<event>.json` with the
    /// switch reports, for `hawkmesh diagnose`); `None` keeps nothing.
    pub keep_incidents: Option<PathBuf>,
}

impl EvalConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), EvalError> {
        if self.traces_per_class == 0 || self.traces_per_class > 1000 {
            return Err(EvalError::Config(format!(
                "--traces must be within 1..=1000, got {}",
                self.traces_per_class
            )));
        }
        if self.classes.is_empty() {
            return Err(EvalError::Config("no anomaly class selected".into()));
        }
        let unique: BTreeSet<_> = self.classes.iter().collect();
        if unique.len() != self.classes.len() {
            return Err(EvalError::Config("an anomaly class is listed twice".into()));
        }
        if self.families.is_empty() {
            return Err(EvalError::Config("no fabric family selected".into()));
        }
        let unique: BTreeSet<_> = self.families.iter().collect();
        if unique.len() != self.families.len() {
            return Err(EvalError::Config("a fabric family is listed twice".into()));
        }
        Ok(())
    }
}

/// One attempt at drawing a trace whose anomaly materialises (simulation only).
#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    /// Attempt number.
    pub attempt: u32,
    /// Scenario seed of that attempt.
    pub seed: u64,
    /// Whether the anomaly materialised.
    pub realized: bool,
    /// What the ground truth showed.
    pub note: String,
}

/// A trace with how it was drawn.
#[derive(Clone, Debug, Serialize)]
pub struct TraceRecord {
    /// The trace (the accepted attempt, or the last one).
    pub spec: TraceSpec,
    /// Every attempt.
    pub attempts: Vec<Attempt>,
    /// Whether an attempt materialised (otherwise the trace is not run).
    pub realized: bool,
}

/// One attributed incident, judged.
#[derive(Clone, Debug, Serialize)]
pub struct IncidentRecord {
    /// Polling event id.
    pub event_id: u64,
    /// Simulated time of the polling trigger, ns.
    pub trigger_ns: u64,
    /// The victim flow.
    pub victim: String,
    /// Analyzer state (`complete`, `timed_out`).
    pub state: String,
    /// The verdict.
    pub verdict: Verdict,
    /// How the anomaly reached the victim (ground truth; decides which claims are correct).
    pub exposure: Exposure,
    /// Victim-affecting anomalies named.
    pub claims: Vec<String>,
    /// Correct reports: whether the largest root-cause flow is an injected flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_flow_injected: Option<bool>,
    /// Switches that collected telemetry for the event.
    pub switches_collected: usize,
    /// Causally relevant switches: the victim's path, the anomaly's origin and the PFC
    /// spreading paths from the victim's paused ports back to it (at the trigger time).
    pub causal_switches: usize,
    /// Causal switches that collected.
    pub causal_collected: usize,
    /// Causal switches that did not collect, by name (where coverage fell short).
    pub causal_missed: Vec<String>,
    /// Telemetry bytes collected for the event.
    pub report_bytes: usize,
}

/// Overhead of one method in one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Overhead {
    /// Polling packets the hosts sent (RTT triggers).
    pub polling_packets: u64,
    /// Polling copies that reached switch CPUs (victim-only: on the victim path).
    pub polling_copies: u64,
    /// Collection requests of the full-polling controller.
    pub controller_requests: u64,
    /// Collections (reports) made by the switch agents.
    pub collections: usize,
    /// Register reads (collections within the guard interval share one).
    pub register_reads: usize,
    /// Telemetry bytes sent to the analyzer.
    pub telemetry_bytes: usize,
}

/// One method on one run.
#[derive(Clone, Debug, Serialize)]
pub struct ModeRun {
    /// The method.
    pub mode: PollingMode,
    /// Incidents the analyzer concluded.
    pub incidents: usize,
    /// Incidents not attributed to the anomaly (background congestion; not judged).
    pub unattributed: usize,
    /// The verdict of every attributed incident, by event id.
    pub verdicts: Vec<Verdict>,
    /// The attributed incidents in detail (at the fixed point only, to keep
    /// `results.json` small; the other points keep the verdicts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attributed: Vec<IncidentRecord>,
    /// Overhead.
    pub overhead: Overhead,
}

/// Which telemetry an ablation keeps (HAWKEYE §4.3, Fig. 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Telemetry {
    /// Everything (the same reports re-diagnosed: the reference for the two others).
    Full,
    /// Port records and causality meters only (flow records dropped).
    PortOnly,
    /// Flow records only (port records and meters dropped).
    FlowOnly,
}

impl Telemetry {
    /// Every variant.
    pub const ALL: [Telemetry; 3] = [Telemetry::Full, Telemetry::PortOnly, Telemetry::FlowOnly];

    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Telemetry::Full => "full",
            Telemetry::PortOnly => "port_only",
            Telemetry::FlowOnly => "flow_only",
        }
    }

    fn apply(self, reports: &[TelemetryReport]) -> Vec<TelemetryReport> {
        let mut reports = reports.to_vec();
        for report in &mut reports {
            for epoch in &mut report.epochs {
                match self {
                    Telemetry::Full => {}
                    Telemetry::PortOnly => {
                        epoch.flows.clear();
                        epoch.lost_evictions = 0;
                    }
                    Telemetry::FlowOnly => {
                        epoch.ports.clear();
                        epoch.meters.clear();
                    }
                }
            }
        }
        reports
    }
}

/// One ablation on one run: the attributed HAWKEYE incidents re-diagnosed.
#[derive(Clone, Debug, Serialize)]
pub struct AblationRun {
    /// Telemetry kept.
    pub telemetry: Telemetry,
    /// Verdict per attributed incident (same order as the HAWKEYE incidents).
    pub verdicts: Vec<Verdict>,
    /// Claims per attributed incident.
    pub claims: Vec<Vec<String>>,
}

/// One trace at one parameter point.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    /// Trace id.
    pub trace: String,
    /// Fabric family.
    pub family: Family,
    /// Class.
    pub class: AnomalyClass,
    /// Parameter point.
    pub point: Point,
    /// Whether the anomaly materialised in this run.
    pub realized: bool,
    /// What the ground truth showed.
    pub realization: String,
    /// What a correct diagnosis names.
    pub expected: Expected,
    /// Simulation totals: PAUSE frames.
    pub pause_frames: u64,
    /// Each method.
    pub modes: Vec<ModeRun>,
    /// Telemetry ablations (fixed point only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ablations: Vec<AblationRun>,
}

/// The expected answer of a run, for people reading `results.json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Expected {
    /// Anomaly type.
    #[serde(rename = "type")]
    pub anomaly_type: String,
    /// Root-cause ports (`tor3.p0`).
    pub root_ports: Vec<String>,
    /// Loop ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loop_ports: Vec<String>,
    /// Injecting host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injector: Option<String>,
}

impl Expected {
    fn of(truth: &Truth, topology: &FabricTopology) -> Expected {
        let label = |p: &hawkmesh_wire::topology::PortRef| {
            let name = topology
                .nodes
                .get(p.node as usize)
                .map_or_else(|| p.node.to_string(), |n| n.name.clone());
            format!("{name}.p{}", p.port)
        };
        Expected {
            anomaly_type: truth.expected_type.clone(),
            root_ports: truth.root_ports.iter().map(label).collect(),
            loop_ports: truth.loop_ports.iter().map(label).collect(),
            injector: truth.injector.clone(),
        }
    }
}

/// A score with its coordinates.
#[derive(Clone, Debug, Serialize)]
pub struct ScoreRow {
    /// Class (`None`: all classes together).
    pub class: Option<AnomalyClass>,
    /// Parameter point.
    pub point: Point,
    /// Method.
    pub mode: PollingMode,
    /// Counts and ratios.
    pub score: Score,
}

/// An ablation score.
#[derive(Clone, Debug, Serialize)]
pub struct AblationRow {
    /// Class (`None`: all classes together, HAWKEYE's "mixed anomalies").
    pub class: Option<AnomalyClass>,
    /// Telemetry kept.
    pub telemetry: Telemetry,
    /// Counts and ratios.
    pub score: Score,
}

/// Mean overhead of a method over a class's runs at the fixed point.
#[derive(Clone, Debug, Serialize)]
pub struct OverheadRow {
    /// Class (`None`: all).
    pub class: Option<AnomalyClass>,
    /// Method.
    pub mode: PollingMode,
    /// Runs averaged.
    pub runs: usize,
    /// Mean polling packets per run (host triggers).
    pub polling_packets: f64,
    /// Mean polling copies at switch CPUs per run.
    pub polling_copies: f64,
    /// Mean controller requests per run.
    pub controller_requests: f64,
    /// Mean collections per run.
    pub collections: f64,
    /// Mean telemetry bytes per run.
    pub telemetry_bytes: f64,
    /// Attributed incidents averaged below.
    pub incidents: usize,
    /// Mean telemetry bytes per attributed incident.
    pub bytes_per_incident: f64,
    /// Mean switches collected per attributed incident.
    pub switches_collected: f64,
    /// Mean causally relevant switches per attributed incident.
    pub causal_switches: f64,
    /// Mean coverage (causal switches collected / causal switches) per attributed incident.
    pub coverage: f64,
}

/// The best parameter point of a method for a class.
#[derive(Clone, Debug, Serialize)]
pub struct BestRow {
    /// Class.
    pub class: AnomalyClass,
    /// Method.
    pub mode: PollingMode,
    /// Best point (highest F1, then precision, then recall, undefined ratios counting as 0;
    /// ties: smaller epoch, lower threshold).
    pub point: Point,
    /// Its score.
    pub score: Score,
}

/// A score of one fabric family at the fixed point.
#[derive(Clone, Debug, Serialize)]
pub struct FamilyRow {
    /// Family.
    pub family: Family,
    /// Class (`None`: all classes together).
    pub class: Option<AnomalyClass>,
    /// Method.
    pub mode: PollingMode,
    /// Counts and ratios.
    pub score: Score,
    /// Mean coverage of the causal switches per attributed incident (1 without incidents).
    pub coverage: f64,
}

/// Aggregates.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Per class (and all classes), point and method, over every family.
    pub scores: Vec<ScoreRow>,
    /// Per fabric family, class (and all classes) and method at the fixed point.
    pub families: Vec<FamilyRow>,
    /// Best point per class and method.
    pub best: Vec<BestRow>,
    /// Ablations at the fixed point.
    pub ablations: Vec<AblationRow>,
    /// Overhead at the fixed point.
    pub overhead: Vec<OverheadRow>,
    /// Verdict counts per class and method at the fixed point.
    pub verdicts: Vec<VerdictRow>,
}

/// How the attributed incidents of a class were judged (fixed point).
#[derive(Clone, Debug, Serialize)]
pub struct VerdictRow {
    /// Class.
    pub class: AnomalyClass,
    /// Method.
    pub mode: PollingMode,
    /// Count per verdict.
    pub counts: BTreeMap<String, usize>,
    /// The most frequent wrong claims (claim, count), at most 5.
    pub wrong_claims: Vec<(String, usize)>,
}

/// Everything `results.json` holds (deterministic for a seed).
#[derive(Clone, Debug, Serialize)]
pub struct EvalResults {
    /// Layout version.
    pub schema_version: u32,
    /// Master seed.
    pub master_seed: u64,
    /// Traces per class and family.
    pub traces_per_class: u32,
    /// Classes.
    pub classes: Vec<AnomalyClass>,
    /// Fabric families.
    pub families: Vec<Family>,
    /// Grid.
    pub grid: Grid,
    /// Points run.
    pub points: Vec<Point>,
    /// The fixed point.
    pub fixed_point: Point,
    /// Loop settings other than the swept ones.
    pub loop_settings: BTreeMap<String, String>,
    /// The traces.
    pub traces: Vec<TraceRecord>,
    /// Every run.
    pub runs: Vec<RunRecord>,
    /// Aggregates.
    pub summary: Summary,
}

/// Wall times (not deterministic; `timing.json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct EvalTiming {
    /// Whole evaluation, s.
    pub total_s: f64,
    /// Per trace.
    pub traces: Vec<TraceTiming>,
}

/// Wall times of one trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceTiming {
    /// Trace id.
    pub trace: String,
    /// Simulation-only attempts, s.
    pub precheck_s: f64,
    /// Loop runs, s, by point label.
    pub runs: Vec<(String, f64)>,
}

fn loop_config(point: Point, data_dir: PathBuf) -> LoopConfig {
    let mut config = LoopConfig::new(data_dir);
    config.epoch_log2_ns = point.epoch_log2_ns;
    config.detector.threshold = f64::from(point.threshold_percent) / 100.0;
    // Incidents conclude when every switch has reported or when the simulation ends, never
    // because the machine was slow (`LoopConfig::analyzer_timeout`'s default).
    config.polling = PollingMode::Hawkeye;
    config.also = vec![PollingMode::FullPolling, PollingMode::VictimOnly];
    config
}

fn loop_settings() -> BTreeMap<String, String> {
    let config = LoopConfig::new(PathBuf::new());
    let mut settings = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        settings.insert(k.to_string(), v);
    };
    put("epochs_in_ring", config.epochs.to_string());
    put("flow_slots", config.flow_slots.to_string());
    put("guard_ns", config.guard_ns.to_string());
    put(
        "step_ns",
        (config.step / hawkmesh_netsim::time::NS).to_string(),
    );
    put(
        "incident_conclusion",
        "all polled switches reported, or the end of the simulation".to_string(),
    );
    put(
        "drain_ns",
        (config.drain / hawkmesh_netsim::time::NS).to_string(),
    );
    put(
        "polling_suppression_ns",
        config.detector.suppression_ns.to_string(),
    );
    put("stall_ns", config.detector.stall_ns.to_string());
    put(
        "polling_escalation",
        format!(
            "a suppressed flow is polled again at {}× the RTT of its last poll or on a new stall, at most {} times per suppression interval and {} ns apart",
            config.detector.escalation_factor,
            config.detector.max_escalations,
            config.detector.escalation_gap_ns
        ),
    );
    put(
        "trace_duration_us",
        super::traces::TRACE_DURATION_US.to_string(),
    );
    put(
        "modes",
        PollingMode::ALL.map(PollingMode::as_str).join(", "),
    );
    settings
}

/// Draws the trace, retrying until its anomaly materialises in a plain simulation.
fn draw_trace(
    family: Family,
    class: AnomalyClass,
    index: u32,
    master_seed: u64,
) -> Result<TraceRecord, EvalError> {
    let mut attempts = Vec::new();
    let mut last = None;
    for attempt in 0..MAX_ATTEMPTS {
        let spec = generate_on(family, class, index, attempt, master_seed)?;
        if let Some(reason) = &spec.unplaced {
            attempts.push(Attempt {
                attempt,
                seed: spec.seed,
                realized: false,
                note: reason.clone(),
            });
            last = Some(spec);
            continue;
        }
        let loaded = spec.scenario()?;
        let result = hawkmesh_netsim::run_loaded(&loaded).map_err(|e| EvalError::Trace {
            trace: spec.id.clone(),
            reason: e.to_string(),
        })?;
        let truth = truth_of(&spec, &result);
        attempts.push(Attempt {
            attempt,
            seed: spec.seed,
            realized: truth.realized,
            note: truth.realization.clone(),
        });
        if truth.realized {
            return Ok(TraceRecord {
                spec,
                attempts,
                realized: true,
            });
        }
        last = Some(spec);
    }
    let spec = match last {
        Some(spec) => spec,
        None => generate_on(family, class, index, 0, master_seed)?,
    };
    Ok(TraceRecord {
        spec,
        attempts,
        realized: false,
    })
}

/// Trace generation only (what `results.json` lists under `traces`), e.g. for tests.
pub fn draw_traces(config: &EvalConfig) -> Result<Vec<TraceRecord>, EvalError> {
    config.validate()?;
    let mut out = Vec::new();
    for family in &config.families {
        for class in &config.classes {
            for index in 0..config.traces_per_class {
                out.push(draw_trace(*family, *class, index, config.master_seed)?);
            }
        }
    }
    Ok(out)
}

struct Judged {
    mode_run: ModeRun,
    /// Attributed incidents (for ablations).
    incidents: Vec<IncidentOutcome>,
}

fn judge_mode(
    mode: PollingMode,
    outcome: &LoopOutcome,
    truth: &Truth,
    paths: &FlowPaths,
) -> Judged {
    let (collections, incidents, counters) =
        outcome
            .of_mode(mode)
            .unwrap_or((&[], &[], crate::PollingCounters::default()));
    let topology = &outcome.sim.topology;
    let triggers: BTreeMap<u64, (String, u64, u64)> = outcome
        .triggers
        .iter()
        .map(|t| (t.event_id, (t.victim.to_string(), t.at_ns, t.rtt_ns)))
        .collect();
    let mut by_event: BTreeMap<u64, (BTreeSet<NodeId>, usize)> = BTreeMap::new();
    for c in collections {
        let entry = by_event.entry(c.event_id).or_default();
        entry.0.insert(c.switch);
        entry.1 += c.report_bytes;
    }
    let mut attributed_records = Vec::new();
    let mut attributed_incidents = Vec::new();
    let mut unattributed = 0;
    for incident in incidents {
        let event = incident.summary.event_id;
        let Some((victim, at, rtt)) = triggers.get(&event) else {
            unattributed += 1;
            continue;
        };
        let window = Window::of_sample(*at, *rtt);
        if !attributed(truth, paths, victim, window) {
            unattributed += 1;
            continue;
        }
        let exposure = exposure(truth, paths, victim, window, topology);
        let judgement = judge_victim(truth, exposure, incident.diagnosis.as_ref());
        let (collected, bytes) = by_event.get(&event).cloned().unwrap_or_default();
        let causal = causal_switches(truth, paths, victim, window, topology);
        attributed_records.push(IncidentRecord {
            event_id: event,
            trigger_ns: *at,
            victim: victim.clone(),
            state: incident.summary.state.as_str().to_string(),
            verdict: judgement.verdict,
            exposure,
            claims: judgement.claims,
            top_flow_injected: judgement.top_flow_injected,
            switches_collected: collected.len(),
            causal_switches: causal.len(),
            causal_collected: causal.intersection(&collected).count(),
            causal_missed: causal
                .difference(&collected)
                .map(|n| {
                    topology
                        .nodes
                        .get(*n as usize)
                        .map_or_else(|| n.to_string(), |d| d.name.clone())
                })
                .collect(),
            report_bytes: bytes,
        });
        attributed_incidents.push(incident.clone());
    }
    let overhead = Overhead {
        polling_packets: outcome.triggers.len() as u64,
        polling_copies: counters.polling_copies,
        controller_requests: counters.controller_requests,
        collections: collections.len(),
        register_reads: collections.iter().filter(|c| c.read_registers).count(),
        telemetry_bytes: collections.iter().map(|c| c.report_bytes).sum(),
    };
    Judged {
        mode_run: ModeRun {
            mode,
            incidents: incidents.len(),
            unattributed,
            verdicts: attributed_records.iter().map(|i| i.verdict).collect(),
            attributed: attributed_records,
            overhead,
        },
        incidents: attributed_incidents,
    }
}

/// Writes the switch reports of judged incidents where `hawkmesh diagnose` reads them.
fn keep_incidents(
    dir: &Path,
    mode: PollingMode,
    incidents: &[IncidentOutcome],
    topology: &FabricTopology,
) -> Result<(), EvalError> {
    let mode_dir = dir.join(mode.as_str());
    std::fs::create_dir_all(&mode_dir).map_err(|source| EvalError::Io {
        path: mode_dir.display().to_string(),
        source,
    })?;
    write_json(&dir.join("topology.json"), topology)?;
    for incident in incidents {
        let path = mode_dir.join(format!("{}.json", incident.summary.event_id));
        write_json(&path, &incident.reports)?;
    }
    Ok(())
}

fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), EvalError> {
    let io = |source| EvalError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_string_pretty(value).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)
}

/// How the anomaly reached a victim (see [`Truth::exposure`]).
fn exposure(
    truth: &Truth,
    paths: &FlowPaths,
    victim: &str,
    window: Window,
    topology: &FabricTopology,
) -> Exposure {
    let empty = BTreeSet::new();
    truth.exposure(paths.ports(victim).unwrap_or(&empty), window, topology)
}

/// Causally relevant switches of an incident (see [`Truth::causal_switches_for`]).
fn causal_switches(
    truth: &Truth,
    paths: &FlowPaths,
    victim: &str,
    window: Window,
    topology: &FabricTopology,
) -> BTreeSet<NodeId> {
    let empty = BTreeSet::new();
    let path = paths.ports_at(victim, window.at_ns).unwrap_or(&empty);
    truth.causal_switches_for(path, window, topology)
}

fn ablate(
    incidents: &[IncidentOutcome],
    exposures: &[Exposure],
    truth: &Truth,
    topology: &FabricTopology,
) -> Vec<AblationRun> {
    Telemetry::ALL
        .into_iter()
        .map(|telemetry| {
            let mut verdicts = Vec::new();
            let mut claims = Vec::new();
            for (incident, exposure) in incidents.iter().zip(exposures) {
                let diagnosis = incident.reports.first().and_then(|first| {
                    let victim = first.polling.victim;
                    diagnose_reports(
                        loaded(telemetry.apply(&incident.reports)),
                        topology.clone(),
                        victim,
                        &DiagnoseOptions::default(),
                    )
                    .ok()
                    .and_then(|out| render::to_json(&out.diagnosis).ok())
                    .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                });
                let judgement = judge_victim(truth, *exposure, diagnosis.as_ref());
                verdicts.push(judgement.verdict);
                claims.push(judgement.claims);
            }
            AblationRun {
                telemetry,
                verdicts,
                claims,
            }
        })
        .collect()
}

/// Runs the evaluation. `progress` receives one line per step (for stderr).
pub fn run_eval(
    config: &EvalConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<(EvalResults, EvalTiming), EvalError> {
    config.validate()?;
    let started = Instant::now();
    let points = config.grid.points();
    let fixed = Point::fixed();
    let mut timing = EvalTiming::default();
    let mut traces = Vec::new();
    let mut runs = Vec::new();
    let total =
        config.families.len() as u32 * config.classes.len() as u32 * config.traces_per_class;
    let mut number = 0;
    let jobs: Vec<(Family, AnomalyClass, u32)> = config
        .families
        .iter()
        .flat_map(|family| {
            config.classes.iter().flat_map(move |class| {
                (0..config.traces_per_class).map(move |index| (*family, *class, index))
            })
        })
        .collect();
    for (family, class, index) in jobs {
        let class = &class;
        {
            number += 1;
            let mut trace_timing = TraceTiming::default();
            let drawn_at = Instant::now();
            let record = draw_trace(family, *class, index, config.master_seed)?;
            trace_timing.trace = record.spec.id.clone();
            trace_timing.precheck_s = round4(drawn_at.elapsed().as_secs_f64());
            progress(&format!(
                "[{number}/{total}] {} (attempt {}, load {:.2}): {}",
                record.spec.id,
                record.spec.attempt,
                record.spec.load,
                if record.realized {
                    record.spec.description.clone()
                } else {
                    format!(
                        "no attempt materialised the anomaly ({}); skipped",
                        record
                            .attempts
                            .last()
                            .map(|a| a.note.as_str())
                            .unwrap_or("")
                    )
                }
            ));
            if record.realized {
                let loaded = record.spec.scenario()?;
                let paths = FlowPaths::of(&loaded).map_err(|e| EvalError::Trace {
                    trace: record.spec.id.clone(),
                    reason: e.to_string(),
                })?;
                for point in &points {
                    let run_started = Instant::now();
                    let data_dir = config.work_dir.join(format!(
                        "{}-e{}-t{}",
                        record.spec.id, point.epoch_log2_ns, point.threshold_percent
                    ));
                    let _ = std::fs::remove_dir_all(&data_dir);
                    let outcome = crate::run(&loaded, &loop_config(*point, data_dir.clone()))
                        .map_err(|source| EvalError::Loop {
                            trace: record.spec.id.clone(),
                            point: point.label(),
                            source: Box::new(source),
                        })?;
                    let _ = std::fs::remove_dir_all(&data_dir);
                    let truth = truth_of(&record.spec, &outcome.sim);
                    let mut modes = Vec::new();
                    let mut ablations = Vec::new();
                    for mode in PollingMode::ALL {
                        let mut judged = judge_mode(mode, &outcome, &truth, &paths);
                        if mode == PollingMode::Hawkeye && *point == fixed && truth.realized {
                            let exposures: Vec<Exposure> = judged
                                .mode_run
                                .attributed
                                .iter()
                                .map(|i| i.exposure)
                                .collect();
                            ablations = ablate(
                                &judged.incidents,
                                &exposures,
                                &truth,
                                &outcome.sim.topology,
                            );
                        }
                        if let (Some(dir), true) = (&config.keep_incidents, *point == fixed) {
                            keep_incidents(
                                &dir.join(&record.spec.id),
                                mode,
                                &judged.incidents,
                                &outcome.sim.topology,
                            )?;
                        }
                        if *point != fixed {
                            judged.mode_run.attributed.clear();
                        }
                        modes.push(judged.mode_run);
                    }
                    let seconds = run_started.elapsed().as_secs_f64();
                    progress(&format!(
                        "    {}: {}{}; {:.1} s",
                        point.label(),
                        modes
                            .iter()
                            .map(|m| {
                                let correct = m
                                    .verdicts
                                    .iter()
                                    .filter(|v| **v == Verdict::Correct)
                                    .count();
                                let reports = m.verdicts.iter().filter(|v| v.is_report()).count();
                                format!(
                                    "{} {correct}/{reports} correct ({} incidents)",
                                    m.mode.as_str(),
                                    m.incidents
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                        if truth.realized {
                            String::new()
                        } else {
                            format!("; anomaly did not materialise: {}", truth.realization)
                        },
                        seconds
                    ));
                    trace_timing.runs.push((point.label(), round4(seconds)));
                    runs.push(RunRecord {
                        trace: record.spec.id.clone(),
                        family,
                        class: *class,
                        point: *point,
                        realized: truth.realized,
                        realization: truth.realization.clone(),
                        expected: Expected::of(&truth, &outcome.sim.topology),
                        pause_frames: outcome.sim.totals.pause_frames,
                        modes,
                        ablations,
                    });
                }
            }
            traces.push(record);
            timing.traces.push(trace_timing);
        }
    }
    let summary = summarise(&config.classes, &points, &runs);
    timing.total_s = round4(started.elapsed().as_secs_f64());
    Ok((
        EvalResults {
            schema_version: RESULTS_SCHEMA_VERSION,
            master_seed: config.master_seed,
            traces_per_class: config.traces_per_class,
            classes: config.classes.clone(),
            families: config.families.clone(),
            grid: config.grid,
            points,
            fixed_point: fixed,
            loop_settings: loop_settings(),
            traces,
            runs,
            summary,
        },
        timing,
    ))
}

fn verdicts_of(run: &RunRecord, mode: PollingMode) -> Vec<Verdict> {
    run.modes
        .iter()
        .find(|m| m.mode == mode)
        .map(|m| m.verdicts.clone())
        .unwrap_or_default()
}

/// Aggregates the runs (also used by the tests on hand-built runs).
pub fn summarise(classes: &[AnomalyClass], points: &[Point], runs: &[RunRecord]) -> Summary {
    let fixed = Point::fixed();
    let mut scores = Vec::new();
    for point in points {
        for mode in PollingMode::ALL {
            let mut all = Score::default();
            for class in classes {
                let mut score = Score::default();
                for run in runs
                    .iter()
                    .filter(|r| r.class == *class && r.point == *point)
                {
                    score.add_trace(run.realized, &verdicts_of(run, mode));
                }
                score.finish();
                all.merge(&score);
                scores.push(ScoreRow {
                    class: Some(*class),
                    point: *point,
                    mode,
                    score,
                });
            }
            all.finish();
            scores.push(ScoreRow {
                class: None,
                point: *point,
                mode,
                score: all,
            });
        }
    }
    let mut best = Vec::new();
    for class in classes {
        for mode in PollingMode::ALL {
            let candidates = scores
                .iter()
                .filter(|r| r.class == Some(*class) && r.mode == mode);
            // Undefined ratios (no reports, no traces) rank as 0.
            let key = |r: &ScoreRow| {
                (
                    r.score.f1.unwrap_or(0.0),
                    r.score.precision.unwrap_or(0.0),
                    r.score.recall.unwrap_or(0.0),
                )
            };
            let mut chosen: Option<&ScoreRow> = None;
            for row in candidates {
                let better = match chosen {
                    None => true,
                    Some(current) => key(row) > key(current),
                };
                if better {
                    chosen = Some(row);
                }
            }
            if let Some(row) = chosen {
                best.push(BestRow {
                    class: *class,
                    mode,
                    point: row.point,
                    score: row.score.clone(),
                });
            }
        }
    }
    let fixed_runs: Vec<&RunRecord> = runs.iter().filter(|r| r.point == fixed).collect();
    let mut ablations = Vec::new();
    for telemetry in Telemetry::ALL {
        let mut all = Score::default();
        for class in classes {
            let mut score = Score::default();
            for run in fixed_runs.iter().filter(|r| r.class == *class) {
                let verdicts = run
                    .ablations
                    .iter()
                    .find(|a| a.telemetry == telemetry)
                    .map(|a| a.verdicts.clone())
                    .unwrap_or_default();
                score.add_trace(run.realized, &verdicts);
            }
            score.finish();
            all.merge(&score);
            ablations.push(AblationRow {
                class: Some(*class),
                telemetry,
                score,
            });
        }
        all.finish();
        ablations.push(AblationRow {
            class: None,
            telemetry,
            score: all,
        });
    }
    let mut overhead = Vec::new();
    let class_options: Vec<Option<AnomalyClass>> = classes
        .iter()
        .map(|c| Some(*c))
        .chain(std::iter::once(None))
        .collect();
    for class in &class_options {
        for mode in PollingMode::ALL {
            let selected: Vec<&ModeRun> = fixed_runs
                .iter()
                .filter(|r| r.realized && class.is_none_or(|c| r.class == c))
                .filter_map(|r| r.modes.iter().find(|m| m.mode == mode))
                .collect();
            let runs_count = selected.len();
            let mean = |f: &dyn Fn(&ModeRun) -> f64| {
                if runs_count == 0 {
                    0.0
                } else {
                    round4(selected.iter().map(|m| f(m)).sum::<f64>() / runs_count as f64)
                }
            };
            let incidents: Vec<&IncidentRecord> =
                selected.iter().flat_map(|m| m.attributed.iter()).collect();
            let per_incident = |f: &dyn Fn(&IncidentRecord) -> f64| {
                if incidents.is_empty() {
                    0.0
                } else {
                    round4(incidents.iter().map(|i| f(i)).sum::<f64>() / incidents.len() as f64)
                }
            };
            overhead.push(OverheadRow {
                class: *class,
                mode,
                runs: runs_count,
                polling_packets: mean(&|m| m.overhead.polling_packets as f64),
                polling_copies: mean(&|m| m.overhead.polling_copies as f64),
                controller_requests: mean(&|m| m.overhead.controller_requests as f64),
                collections: mean(&|m| m.overhead.collections as f64),
                telemetry_bytes: mean(&|m| m.overhead.telemetry_bytes as f64),
                incidents: incidents.len(),
                bytes_per_incident: per_incident(&|i| i.report_bytes as f64),
                switches_collected: per_incident(&|i| i.switches_collected as f64),
                causal_switches: per_incident(&|i| i.causal_switches as f64),
                coverage: per_incident(&incident_coverage),
            });
        }
    }
    let mut verdicts = Vec::new();
    for class in classes {
        for mode in PollingMode::ALL {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            let mut wrong: BTreeMap<String, usize> = BTreeMap::new();
            for run in fixed_runs
                .iter()
                .filter(|r| r.class == *class && r.realized)
            {
                for incident in run
                    .modes
                    .iter()
                    .filter(|m| m.mode == mode)
                    .flat_map(|m| m.attributed.iter())
                {
                    *counts
                        .entry(incident.verdict.as_str().to_string())
                        .or_default() += 1;
                    if matches!(
                        incident.verdict,
                        Verdict::WrongType | Verdict::WrongRootCause
                    ) {
                        let claim = incident
                            .claims
                            .first()
                            .map(|c| generic_claim(c))
                            .unwrap_or_default();
                        *wrong.entry(claim).or_default() += 1;
                    }
                }
            }
            let mut wrong_claims: Vec<(String, usize)> = wrong.into_iter().collect();
            wrong_claims.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            wrong_claims.truncate(5);
            verdicts.push(VerdictRow {
                class: *class,
                mode,
                counts,
                wrong_claims,
            });
        }
    }
    let mut families = Vec::new();
    let present: Vec<Family> = Family::ALL
        .into_iter()
        .filter(|f| runs.iter().any(|r| r.family == *f))
        .collect();
    for family in present {
        for mode in PollingMode::ALL {
            let mut all = Score::default();
            let mut all_coverage = Vec::new();
            for class in classes {
                let mut score = Score::default();
                let mut coverage = Vec::new();
                for run in fixed_runs
                    .iter()
                    .filter(|r| r.family == family && r.class == *class)
                {
                    score.add_trace(run.realized, &verdicts_of(run, mode));
                    coverage.extend(
                        run.modes
                            .iter()
                            .filter(|m| m.mode == mode)
                            .flat_map(|m| m.attributed.iter())
                            .map(incident_coverage),
                    );
                }
                score.finish();
                all.merge(&score);
                all_coverage.extend(coverage.iter().copied());
                families.push(FamilyRow {
                    family,
                    class: Some(*class),
                    mode,
                    score,
                    coverage: mean_or_one(&coverage),
                });
            }
            all.finish();
            families.push(FamilyRow {
                family,
                class: None,
                mode,
                score: all,
                coverage: mean_or_one(&all_coverage),
            });
        }
    }
    Summary {
        scores,
        families,
        best,
        ablations,
        overhead,
        verdicts,
    }
}

/// Causal switches collected / causal switches of one incident (1 when none is causal).
fn incident_coverage(i: &IncidentRecord) -> f64 {
    if i.causal_switches == 0 {
        1.0
    } else {
        i.causal_collected as f64 / i.causal_switches as f64
    }
}

fn mean_or_one(values: &[f64]) -> f64 {
    if values.is_empty() {
        1.0
    } else {
        round4(values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// A claim without its concrete ports (`pfc_storm@tor3.p2,by h7` → `pfc_storm@tor.p,by h`),
/// so that wrong claims of different traces group together.
fn generic_claim(claim: &str) -> String {
    claim.chars().filter(|c| !c.is_ascii_digit()).collect()
}
