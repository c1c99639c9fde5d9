//! HAWKEYE provenance graph and signature diagnosis: the answer to "why is this flow slow?".
//!
//! Pipeline (each step a module):
//!
//! 1. [`ingest`]: load telemetry reports (JSON or binary chunk streams, see
//!    [`hawkmesh_wire::telemetry`]), validate them against the topology and align their
//!    epochs by absolute start time.
//! 2. [`graph`]: build the heterogeneous wait-for provenance graph (HAWKEYE §3.5.1,
//!    Alg. 1) with port→port, flow→port and port→flow edges; [`replay`] rebuilds each
//!    congested queue's enqueue sequence for the port→flow weights.
//! 3. [`diagnose`]: match the six signatures of HAWKEYE Table 2 following Alg. 2 and report
//!    each anomaly with its root cause, spreading paths, loops, flows and evidence.
//! 4. [`render`]: JSON, a ten-second text explanation, Graphviz DOT and a self-contained
//!    HTML page drawing the graph.
//!
//! The CLI calls [`diagnose_files`] and the renderers; tests and other crates can call
//! [`diagnose_reports`] with reports already in memory.

pub mod diagnose;
pub mod error;
pub mod graph;
pub mod ingest;
pub mod model;
pub mod render;
pub mod replay;
pub mod testkit;
pub mod view;

use std::path::Path;
use std::time::{Duration, Instant};

use hawkmesh_wire::telemetry::{FiveTuple, TelemetryReport};
use hawkmesh_wire::topology::FabricTopology;

pub use error::AnalyzerError;
pub use graph::ProvenanceGraph;
pub use ingest::{Incident, LoadedReport};
pub use model::{Anomaly, AnomalyType, Diagnosis, Finding, RootCauseKind, Severity};
pub use view::GraphView;

/// Tunables of the analysis. The defaults suit 25-400 Gbit/s fabrics with ~1 KB packets.
#[derive(Clone, Debug, PartialEq)]
pub struct DiagnoseOptions {
    /// Expected epoch size in ns; reports with another size are refused. `None` takes the
    /// reports' own.
    pub epoch_ns: Option<u64>,
    /// A port is congested when the mean queue depth its packets met is at least this many
    /// bytes (the downstream end of a port→port edge must be congested, HAWKEYE §3.5.1; a
    /// port's non-paused packets must meet at least this much queue for its contention to
    /// be replayed).
    pub congestion_queue_bytes: u64,
    /// Packet size assumed where the causality meter gives no byte count.
    pub default_packet_bytes: u64,
    /// Target width of a replay time bin in ns (bins per epoch are clamped to 32..=512).
    pub replay_bin_ns: u64,
    /// Port→flow weights smaller than this (in packet-waits) are dropped as noise.
    pub min_contribution_packets: f64,
    /// Port→port edges weaker than this fraction of the strongest edge leaving the same
    /// port are dropped as noise.
    pub min_port_edge_share: f64,
    /// A loop port's wait-for edge out of the loop counts as an exit toward an out-of-loop
    /// initiator (Alg. 2 l.14) only when it carries at least this fraction of the weakest
    /// edge of the loop itself: a trickle of other traffic through a frozen loop switch
    /// meeting some queue is not what holds the loop.
    pub min_loop_exit_share: f64,
    /// With exits, the loop still counts as its own initiator when its ports' own
    /// contention (non-paused queueing) exceeds that of every queue the exits lead to and
    /// nothing there injects PFC (evidence `loop_contention_dominates`). `false` follows
    /// HAWKEYE Alg. 2 l.14 as written: any exit makes the initiator out of loop.
    pub loop_contention_check: bool,
    /// An exit that held a loop port before the loop's own wait-for edges existed, toward
    /// lasting contention, initiated the deadlock (evidence `loop_exit_before_loop`) unless
    /// the loop's own contention grew to more than this many times the contention it
    /// leads to: then it was background the loop's own traffic outgrew (evidence
    /// `loop_outgrew_early_exit`), and the other exits decide. Applies with
    /// `loop_contention_check` only.
    pub early_exit_outgrown_ratio: f64,
    /// A flow is a micro-burst if its enqueue window is at most this fraction of the epoch…
    pub burst_max_epoch_fraction: f64,
    /// …and its rate within that window is at least this fraction of the line rate.
    pub burst_min_line_rate_fraction: f64,
    /// ECMP uplinks are imbalanced when the busiest carries this many times the mean.
    pub ecmp_imbalance_ratio: f64,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        DiagnoseOptions {
            epoch_ns: None,
            congestion_queue_bytes: 8 * 1024,
            default_packet_bytes: 1024,
            replay_bin_ns: 500,
            min_contribution_packets: 0.5,
            min_port_edge_share: 0.02,
            min_loop_exit_share: 0.1,
            loop_contention_check: true,
            early_exit_outgrown_ratio: 4.0,
            burst_max_epoch_fraction: 0.5,
            burst_min_line_rate_fraction: 0.25,
            ecmp_imbalance_ratio: 1.5,
        }
    }
}

impl DiagnoseOptions {
    /// Replay bins for an epoch size.
    pub fn replay_bins(&self, epoch_ns: u64) -> usize {
        let bins = epoch_ns / self.replay_bin_ns.max(1);
        bins.clamp(32, 512) as usize
    }
}

/// Wall-clock time of each stage (single thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Validation and alignment.
    pub ingest: Duration,
    /// Provenance graph construction (Alg. 1).
    pub graph_build: Duration,
    /// Signature matching (Alg. 2).
    pub diagnosis: Duration,
}

/// Everything the CLI needs to print or write.
#[derive(Debug)]
pub struct DiagnosisOutput {
    /// The diagnosis (serialise with [`render::to_json`]).
    pub diagnosis: Diagnosis,
    /// The relevant part of the provenance graph, for DOT and HTML.
    pub view: GraphView,
    /// The full graph.
    pub graph: ProvenanceGraph,
    /// Stage timings.
    pub timings: Timings,
}

/// Diagnoses reports already in memory.
pub fn diagnose_reports(
    reports: Vec<LoadedReport>,
    topology: FabricTopology,
    victim: FiveTuple,
    options: &DiagnoseOptions,
) -> Result<DiagnosisOutput, AnalyzerError> {
    let started = Instant::now();
    let incident = Incident::build(reports, topology, victim, options.epoch_ns)?;
    let ingest = started.elapsed();
    let started = Instant::now();
    let graph = ProvenanceGraph::build(&incident, options);
    let graph_build = started.elapsed();
    let started = Instant::now();
    let diagnosis = diagnose::diagnose(&incident, &graph, options);
    let diagnosis_time = started.elapsed();
    let view = GraphView::build(&incident, &graph, &diagnosis);
    Ok(DiagnosisOutput {
        diagnosis,
        view,
        graph,
        timings: Timings {
            ingest,
            graph_build,
            diagnosis: diagnosis_time,
        },
    })
}

/// Wraps plain reports with synthetic source names (`report[0]`, …).
pub fn loaded(reports: Vec<TelemetryReport>) -> Vec<LoadedReport> {
    reports
        .into_iter()
        .enumerate()
        .map(|(index, report)| LoadedReport {
            source_name: format!("report[{index}]"),
            report,
        })
        .collect()
}

/// What `hawkmesh diagnose --reports DIR --topology FILE --victim 5-TUPLE [--epoch NS]`
/// runs: loads the reports (a directory of `*.json`/`*.hkt` files, or one file), the
/// topology JSON, parses the victim (`10.0.0.1:49152->10.0.0.9:4791`) and diagnoses.
pub fn diagnose_files(
    reports: &Path,
    topology: &Path,
    victim: &str,
    epoch_ns: Option<u64>,
) -> Result<DiagnosisOutput, AnalyzerError> {
    let options = DiagnoseOptions {
        epoch_ns,
        ..DiagnoseOptions::default()
    };
    diagnose_files_with(reports, topology, victim, &options)
}

/// [`diagnose_files`] with explicit options.
pub fn diagnose_files_with(
    reports: &Path,
    topology: &Path,
    victim: &str,
    options: &DiagnoseOptions,
) -> Result<DiagnosisOutput, AnalyzerError> {
    let victim: FiveTuple = victim.parse()?;
    let topology = ingest::load_topology(topology)?;
    let reports = ingest::load_reports(reports)?;
    diagnose_reports(reports, topology, victim, options)
}
