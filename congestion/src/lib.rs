//! hawkmesh-congestion — congestion from counters (issue 27).
//!
//! - [`sample`]: the counter sample model — a port (node, tier, up/down direction, as the
//!   Yellowstone study classifies ports), the query's timing (tᵠ, tᵖ) and the counters read:
//!   PortXmitWait and its width, and per-priority PFC counters for RoCE;
//! - [`parse`]: parsers of the real tools' output — infiniband-diags `perfquery` (PortCounters
//!   and `-x` PortCountersExtended), mlx5 `ethtool -S`, SONiC `pfcstat` and COUNTERS_DB dumps;
//! - [`fitf`]: Yellowstone Eq. 3 — the forced idle time fraction per interval of a round,
//!   with the turnaround correction, saturation and reset detection, the FITF > 1 outliers
//!   flagged with the study's explanation, round statistics and the per-tier/direction
//!   classification; and its RoCE analogue, the paused fraction from PFC pause durations;
//! - [`plan`]: the study's sampling plan (random switch and port among the up ports, reset,
//!   100 reads 100 ms apart) and continuous sampling, seeded, over a [`plan::CounterSource`]
//!   and a [`plan::Clock`], with a [`plan::ReplaySource`] of recorded samples;
//! - [`watchdog`]: a PFC watchdog from counters alone in the spirit of SONiC pfcwd — storms
//!   (paused without transmitting for the detection time), restoration, and deadlocks as
//!   cycles of paused ports over the link map;
//! - [`sources`]: the real fabrics' counter sources — `perfquery` (InfiniBand), `ethtool -S`
//!   (RoCE hosts), `sonic-db-cli` COUNTERS_DB (SONiC switches) — run as processes with a
//!   timeout;
//! - [`report`]: CSV and JSON of intervals and rounds, an HTML page with hand-written SVG
//!   plots (the study's Fig. 5–7), and the Prometheus text exposition.
//!
//! Pure and deterministic apart from [`sources`] (which run the devices' tools): time is the
//! caller's (or the [`plan::Clock`]'s); nothing here depends on the simulator, which plugs in
//! as a [`plan::CounterSource`].

pub mod fitf;
pub mod parse;
pub mod plan;
pub mod report;
pub mod sample;
pub mod sources;
pub mod watchdog;

pub use fitf::{
    classify, fitf_round, pause_round, FitfConfig, GroupSummary, Interval, IntervalStatus, Metric,
    PauseSide, Round, RoundStats,
};
pub use parse::{ParseError, PerfBlock, PerfKind};
pub use plan::{
    Clock, CounterSource, ManualClock, ReplaySource, RoundRecord, Sampler, SamplingPlan,
    SourceError, SystemClock,
};
pub use sample::{Direction, PfcCounters, PortId, PortKey, Sample, Tier, Width, PRIORITIES};
pub use sources::{EthPort, EthtoolSource, IbPort, PerfquerySource, SonicPort, SonicSource, Tool};
pub use watchdog::{LinkMap, Verdict, Watchdog, WatchdogConfig};
