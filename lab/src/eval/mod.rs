//! `hawkmesh eval`: HAWKEYE's evaluation (§4.2–4.3, Figs. 7–11) as a reproducible run.
//!
//! 1. [`traces`] draws N randomised traces per anomaly class from a master seed.
//! 2. [`run`] runs the whole loop ([`crate::run`]) on each trace at each parameter point
//!    (epoch size × RTT threshold), with HAWKEYE's polling and the full-polling and
//!    victim-only baselines side by side, and re-diagnoses HAWKEYE's incidents with
//!    port-level-only and flow-level-only telemetry (ablations).
//! 3. [`judge`] compares every diagnosis with the trace's ground truth.
//! 4. [`report`] and [`svg`] write `results.json`, `report.md` and the charts.
//!
//! Everything in `results.json` is a function of the master seed and the configuration;
//! wall times go to `timing.json` (and the last section of `report.md`).

pub mod fabrics;
pub mod judge;
pub mod report;
pub mod run;
pub mod svg;
pub mod traces;

pub use fabrics::{FabricSpec, FabricView, Family};
pub use judge::{judge, judge_victim, truth_of, Exposure, Judgement, Score, Truth, Verdict};
pub use run::{run_eval, EvalConfig, EvalResults, EvalTiming, Grid, Point};
pub use traces::{generate, generate_on, AnomalyClass, TraceSpec};

/// Why the evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// Bad configuration (unknown class, bad trace count...).
    #[error("{0}")]
    Config(String),
    /// A generated trace is not a valid scenario (a bug in the generator).
    #[error("trace {trace}: {reason}")]
    Trace {
        /// The trace.
        trace: String,
        /// Why.
        reason: String,
    },
    /// The loop failed on a trace.
    #[error("trace {trace} at {point}: {source}")]
    Loop {
        /// The trace.
        trace: String,
        /// The parameter point.
        point: String,
        /// The error.
        #[source]
        source: Box<crate::LoopError>,
    },
    /// Writing the results failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
