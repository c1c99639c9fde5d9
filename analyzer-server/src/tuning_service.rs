//! The PARALEON controller as a service (`hawkmesh.v1.TuningController`,
//! proto/tuning.proto): ToR switch agents report each monitor interval's local FSD and port
//! pause shares, host agents their RNICs' uplink utilisation, normalised RTTs and pause
//! shares; [`hawkmesh_tuner::rounds::Rounds`] closes the intervals and runs the controller;
//! every reply carries the versioned setting in force, which the devices apply when its
//! version is new or its epoch (the controller's start) another: versions count from 1
//! again after a restart.
//!
//! gRPC status codes:
//! - `INVALID_ARGUMENT`: a device the controller does not tune, a number out of range, an
//!   interval reported twice, too many intervals open; nothing of the report was kept.
//! - `OUT_OF_RANGE`: the interval is closed (the report came late); send the next one.
//! - `PERMISSION_DENIED`: with mutual TLS, a device may only speak for itself.
//! - `INTERNAL`: the controller failed (a panic poisoned it).
//!
//! HTTP: `GET /api/tuning` — the setting in force by knob, its version, whether a search
//! runs, the counts.
//!
//! The controller's work per report is microseconds (no I/O): its lock is taken inline.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::tuning_controller_server::{TuningController, TuningControllerServer};
use hawkmesh_tuner::controller::{Controller, ControllerConfig};
use hawkmesh_tuner::fsd::{Fsd, BINS};
use hawkmesh_tuner::rounds::{Closed, HostReport, RoundError, RoundStats, Rounds, TorReport};
use hawkmesh_tuner::sa::{defaults, Space, TunerError};
use hawkmesh_wire::topology::{FabricTopology, NodeKind};
use serde::Serialize;
use tonic::{Request, Response, Status};

/// What the controller tunes.
#[derive(Clone, Debug)]
pub struct TuningConfig {
    /// The ToRs that report (every one must, for an interval to close in time).
    pub tors: Vec<String>,
    /// The hosts that report.
    pub hosts: Vec<String>,
    /// KL threshold, annealing, utility weights (PARALEON Table III by default).
    pub controller: ControllerConfig,
    /// The host links' speed, Gbit/s (the ECN thresholds' defaults scale with it).
    pub host_gbps: f64,
    /// The annealing's seed.
    pub seed: u64,
}

impl TuningConfig {
    /// Every switch a host is cabled to is a ToR, every host reports; the host links'
    /// speed from the fabric (the fastest, 100 Gbit/s without host links).
    pub fn for_fabric(topology: &FabricTopology) -> TuningConfig {
        let kind = |id: usize| topology.nodes.get(id).map(|n| n.kind);
        let mut tors = std::collections::BTreeSet::new();
        let mut gbps: f64 = 0.0;
        for l in &topology.links {
            let (a, b) = (l.a.node as usize, l.b.node as usize);
            for (host, switch) in [(a, b), (b, a)] {
                if kind(host) == Some(NodeKind::Host) && kind(switch) == Some(NodeKind::Switch) {
                    tors.insert(topology.nodes[switch].name.clone());
                    gbps = gbps.max(l.gbps);
                }
            }
        }
        TuningConfig {
            tors: tors.into_iter().collect(),
            hosts: topology
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::Host)
                .map(|n| n.name.clone())
                .collect(),
            controller: ControllerConfig::default(),
            host_gbps: if gbps > 0.0 { gbps } else { 100.0 },
            seed: 1,
        }
    }
}

/// The controller shared by gRPC and HTTP.
#[derive(Clone, Debug)]
pub struct TuningShared {
    rounds: Arc<Mutex<Rounds>>,
    space: Arc<Space>,
    /// When this controller started (ns since the Unix epoch): its versions' epoch.
    epoch: u64,
}

/// What `GET /api/tuning` shows.
#[derive(Clone, Debug, Serialize)]
pub struct TuningStatus {
    /// The setting's version.
    pub version: u64,
    /// The setting in force, by knob.
    pub setting: Vec<(&'static str, f64)>,
    /// A search is running (the setting is a trial).
    pub tuning: bool,
    /// Searches started.
    pub searches: u64,
    /// The last interval closed.
    pub closed: Option<u64>,
    /// Counts since start.
    pub stats: RoundStats,
}

impl TuningShared {
    /// A controller for `config`, starting from the knob table's defaults.
    pub fn new(config: &TuningConfig) -> Result<TuningShared, TunerError> {
        let space = Space::paraleon()?;
        let start = defaults(&space, config.host_gbps, &[])?;
        let controller = Controller::new(config.controller, space.clone(), start, config.seed)?;
        Ok(TuningShared {
            rounds: Arc::new(Mutex::new(Rounds::new(
                controller,
                config.tors.iter().cloned(),
                config.hosts.iter().cloned(),
            ))),
            space: Arc::new(space),
            epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Rounds>, Status> {
        self.rounds.lock().map_err(|_| {
            tracing::error!("the tuning controller is poisoned by an earlier panic");
            Status::internal("the tuning controller is poisoned by an earlier panic")
        })
    }

    /// The controller's state now.
    pub fn status(&self) -> Result<TuningStatus, Status> {
        let rounds = self.lock()?;
        let (version, setting) = rounds.setting();
        Ok(TuningStatus {
            version,
            setting: self.space.named(setting),
            tuning: rounds.controller().tuning(),
            searches: rounds.controller().searches(),
            closed: rounds.closed(),
            stats: rounds.stats(),
        })
    }

    fn reply(&self, rounds: &Rounds) -> pb::TuningReply {
        let (version, setting) = rounds.setting();
        pb::TuningReply {
            version,
            knobs: self
                .space
                .named(setting)
                .into_iter()
                .map(|(name, value)| pb::KnobValue {
                    name: name.to_string(),
                    value,
                })
                .collect(),
            closed: rounds.closed().unwrap_or(0),
            tuning: rounds.controller().tuning(),
            epoch: self.epoch,
        }
    }
}

/// The gRPC service.
#[derive(Clone, Debug)]
pub struct TuningService {
    shared: TuningShared,
    identified: bool,
}

impl TuningService {
    /// The service; `identified` when clients present certificates (mutual TLS).
    pub fn new(shared: TuningShared, identified: bool) -> Self {
        TuningService { shared, identified }
    }

    /// The tonic server.
    pub fn into_server(self) -> TuningControllerServer<TuningService> {
        TuningControllerServer::new(self).max_decoding_message_size(MAX_REPORT_BYTES)
    }
}

/// A report's size at most: 16 bins and a few thousand ports, RNICs or RNIC pairs.
pub const MAX_REPORT_BYTES: usize = 256 * 1024;

fn status(error: RoundError) -> Status {
    let message = error.to_string();
    tracing::warn!(%message, "tuning report refused");
    match error {
        RoundError::Closed { .. } => Status::out_of_range(message),
        RoundError::Controller(_) => Status::internal(message),
        _ => Status::invalid_argument(message),
    }
}

fn log_closed(closed: &[Closed]) {
    for c in closed {
        if c.outcome.triggered {
            // `drift` is the distance from what the setting in force was tuned for (None
            // before a first search settled one: the first traffic triggers on its own);
            // `held` is how many intervals the change lasted before it triggered.
            tracing::info!(
                interval = c.interval,
                kl = c.outcome.kl,
                drift = ?c.outcome.drift,
                held = c.outcome.pending,
                "tuning: a search started"
            );
        } else if c.outcome.pending > 0 {
            tracing::debug!(
                interval = c.interval,
                drift = ?c.outcome.drift,
                held = c.outcome.pending,
                "tuning: a change is holding"
            );
        }
        if let Some(step) = &c.outcome.dispatch {
            tracing::debug!(interval = c.interval, version = c.version, kind = ?step.kind, "tuning: a new setting");
        }
    }
}

#[tonic::async_trait]
impl TuningController for TuningService {
    async fn report_tor(
        &self,
        request: Request<pb::TorInterval>,
    ) -> Result<Response<pb::TuningReply>, Status> {
        crate::tls::check_identity(&request, self.identified, &request.get_ref().tor)?;
        let r = request.into_inner();
        if r.bins.len() != BINS {
            return Err(Status::invalid_argument(format!(
                "ToR `{}`, interval {}: {} size bins, expected {BINS}",
                r.tor,
                r.interval,
                r.bins.len()
            )));
        }
        let mut bins = [0.0; BINS];
        bins.copy_from_slice(&r.bins);
        let report = TorReport {
            tor: r.tor,
            interval: r.interval,
            fsd: Fsd {
                bins,
                elephants: r.elephants,
                mice: r.mice,
                elephant_flows: r.elephant_flows,
                potential_elephants: r.potential_elephants,
            },
            pause_fraction: r.pause_fraction,
        };
        let mut rounds = self.shared.lock()?;
        let closed = rounds.report_tor(report).map_err(status)?;
        log_closed(&closed);
        Ok(Response::new(self.shared.reply(&rounds)))
    }

    async fn report_host(
        &self,
        request: Request<pb::HostInterval>,
    ) -> Result<Response<pb::TuningReply>, Status> {
        crate::tls::check_identity(&request, self.identified, &request.get_ref().host)?;
        let r = request.into_inner();
        let mut rounds = self.shared.lock()?;
        rounds
            .report_host(HostReport {
                host: r.host,
                interval: r.interval,
                uplink_utilisation: r.uplink_utilisation,
                normalised_rtt: r.normalised_rtt,
                pause_fraction: r.pause_fraction,
            })
            .map_err(status)?;
        Ok(Response::new(self.shared.reply(&rounds)))
    }

    async fn get_setting(
        &self,
        request: Request<pb::SettingRequest>,
    ) -> Result<Response<pb::TuningReply>, Status> {
        crate::tls::check_identity(&request, self.identified, &request.get_ref().device)?;
        let rounds = self.shared.lock()?;
        Ok(Response::new(self.shared.reply(&rounds)))
    }
}

/// `GET /api/tuning`.
pub fn router(shared: TuningShared) -> Router {
    Router::new()
        .route("/api/tuning", get(tuning_status))
        .with_state(shared)
}

async fn tuning_status(
    State(shared): State<TuningShared>,
) -> Result<Json<TuningStatus>, (axum::http::StatusCode, String)> {
    shared.status().map(Json).map_err(|s| {
        (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            s.message().to_string(),
        )
    })
}
