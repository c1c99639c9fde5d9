//! The hawkmesh analyzer service: switch agents stream telemetry report chunks to it over
//! gRPC (`hawkmesh.v1.Collector`); it groups them into incidents by polling event id, decides
//! when an incident is complete (every switch the polling packet reached has reported, or a
//! timeout), runs the HAWKEYE diagnosis, keeps everything in an append-only store that
//! survives restarts, and serves the results over HTTP (JSON API and HTML report).
//!
//! Store appends (with their fsync), diagnoses and reads of the incident set run on tokio's
//! blocking pool, never on an async worker (see `shared`). The service logs with `tracing`
//! (it installs no subscriber: the binary decides where events go): `info` when it listens,
//! stops and concludes an incident, `warn` for rejected input, `error` for store and
//! internal failures. Every handled failure is also counted ([`counters`]).

pub mod conn;
pub mod counters;
pub mod framelog;
#[cfg(test)]
mod gate;
pub mod grpc;
pub mod http;
pub mod incidents;
pub mod pingmesh;
mod pingmesh_html;
pub mod pingmesh_service;
mod shared;
pub mod store;
#[cfg(test)]
mod tests;
pub mod tls;
pub mod tuning_service;

use counters::{CounterSnapshot, Counters};
use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_proto::v1::collector_server::CollectorServer;
use hawkmesh_wire::topology::FabricTopology;
use incidents::{IncidentError, IncidentSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// Concurrent gRPC streams one connection may hold (an agent needs one or two).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// How to run the service.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// gRPC listen address (port 0 picks a free one).
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0 picks a free one).
    pub http_addr: SocketAddr,
    /// Directory of the store.
    pub data_dir: PathBuf,
    /// The fabric.
    pub topology: FabricTopology,
    /// How long an incident waits for missing switches after its last chunk.
    pub incident_timeout: Duration,
    /// Diagnosis tunables.
    pub options: DiagnoseOptions,
    /// How long and how much the store keeps (checked about once a second).
    pub retention: incidents::Retention,
    /// What the service takes in (report size, incident rate per switch, incidents
    /// collecting at once).
    pub limits: incidents::IntakeLimits,
    /// Connection caps and idle timeout, of each listener.
    pub connections: conn::ConnectionLimits,
    /// Mutual TLS for the gRPC listener, or plaintext on loopback.
    pub tls: tls::TlsMode,
    /// The pingmesh controller (R-Pingmesh: host agents' registration, pinglists, probe
    /// results and their analysis), or none.
    pub pingmesh: Option<pingmesh::PingmeshConfig>,
    /// The PARALEON controller (ToRs' FSDs and hosts' metrics in, DCQCN/ECN settings out),
    /// or none.
    pub tuning: Option<tuning_service::TuningConfig>,
}

impl ServerConfig {
    /// The service on loopback for tests and labs: `grpc` (port 0 picks one), HTTP on a
    /// free loopback port, plaintext (loopback only), a 30-s incident timeout, and the
    /// default diagnosis options, retention, intake and connection limits.
    pub fn loopback(topology: FabricTopology, data_dir: PathBuf, grpc: SocketAddr) -> Self {
        ServerConfig {
            grpc_addr: grpc,
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir,
            topology,
            incident_timeout: Duration::from_secs(30),
            options: DiagnoseOptions::default(),
            retention: incidents::Retention::default(),
            limits: incidents::IntakeLimits::default(),
            connections: conn::ConnectionLimits::default(),
            tls: tls::TlsMode::PlaintextLoopback,
            pingmesh: None,
            tuning: None,
        }
    }
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened or replayed.
    #[error("opening the store: {0}")]
    Store(#[from] IncidentError),
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The TLS configuration was refused by the server.
    #[error("the gRPC server refused the TLS configuration: {0}")]
    TlsConfig(String),
    /// The pingmesh controller could not start.
    #[error(transparent)]
    Pingmesh(#[from] pingmesh::SetupError),
    /// The tuning controller's settings were refused.
    #[error("tuning controller: {0}")]
    Tuning(#[from] hawkmesh_tuner::sa::TunerError),
    /// A listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A running service.
#[derive(Debug)]
pub struct RunningServer {
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// The shared incident set. Locking it blocks (it may wait for a store append and its
    /// fsync): from async code, lock it inside `tokio::task::spawn_blocking`.
    pub incidents: Arc<Mutex<IncidentSet>>,
    /// The pingmesh controller, when it runs.
    pub pingmesh: Option<pingmesh_service::PingmeshShared>,
    /// The tuning controller, when it runs.
    pub tuning: Option<tuning_service::TuningShared>,
    counters: Arc<Counters>,
    shutdown: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// The service's counters now (also served at `GET /api/counters`).
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// Stops accepting, finishes in-flight requests and waits for the tasks.
    pub async fn stop(mut self) {
        for sender in self.shutdown.drain(..) {
            if sender.send(()).is_err() {
                tracing::debug!("a server task had already ended before stop");
            }
        }
        for task in self.tasks.drain(..) {
            if let Err(error) = task.await {
                self.counters.bump(counters::Counter::InternalErrors);
                tracing::error!(%error, "a server task failed");
            }
        }
        tracing::info!(grpc = %self.grpc_addr, http = %self.http_addr, "analyzer stopped");
    }
}

/// Resolves when `stop` asks the task to end, or when the [`RunningServer`] was dropped
/// without `stop` (its sender is gone): either way the task shuts down.
async fn stop_requested(rx: oneshot::Receiver<()>) {
    if rx.await.is_err() {
        tracing::debug!("server handle dropped without stop; shutting down");
    }
}

/// Starts the gRPC and HTTP servers and the timeout sweeper on the current tokio runtime.
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
    let set = IncidentSet::open(
        &config.data_dir,
        config.topology.clone(),
        config.options.clone(),
        config.incident_timeout,
    )?;
    let mut set = set;
    set.set_retention(config.retention);
    set.set_limits(config.limits);
    let counters = set.counters().clone();
    let known = set.list().len();
    let pingmesh = match &config.pingmesh {
        Some(pm) => {
            let (controller, replay) =
                pingmesh::Controller::open(&config.topology, &config.data_dir, pm.clone())?;
            if let Some(repaired) = &replay.repaired {
                tracing::warn!(%repaired, "pingmesh log repaired on start");
            }
            for skipped in &replay.skipped {
                counters.bump(counters::Counter::ReplaySkipped);
                tracing::warn!(%skipped, "pingmesh log record skipped");
            }
            tracing::info!(
                registrations = replay.registrations,
                pending = replay.pending_results,
                periods = replay.periods,
                "pingmesh controller replayed"
            );
            Some(pingmesh_service::PingmeshShared::new(
                controller,
                config.topology.clone(),
            ))
        }
        None => None,
    };
    let tuning = match &config.tuning {
        Some(t) => Some(tuning_service::TuningShared::new(t)?),
        None => None,
    };
    let incidents = Arc::new(Mutex::new(set));
    let bind = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })
    };
    let grpc_listener = bind(config.grpc_addr).await?;
    let http_listener = bind(config.http_addr).await?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: config.grpc_addr,
            source,
        })?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: config.http_addr,
            source,
        })?;

    let mut shutdown = Vec::new();
    let mut tasks = Vec::new();

    let (tx, rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    // A gRPC message is one chunk: anything larger is refused before it is buffered.
    let tls = config.tls.server_config(grpc_addr)?;
    let tls_on = tls.is_some();
    let mut collector = grpc::CollectorService::new(incidents.clone(), tls.is_some());
    if let Some(shared) = &pingmesh {
        collector = collector.with_pingmesh(shared.clone());
    }
    let service =
        CollectorServer::new(collector).max_decoding_message_size(grpc::MAX_CHUNK_BYTES + 1024);
    let pingmesh_grpc = pingmesh
        .as_ref()
        .map(|shared| pingmesh_service::PingmeshGrpc::new(shared.clone(), tls_on));
    let tuning_grpc = tuning
        .as_ref()
        .map(|shared| tuning_service::TuningService::new(shared.clone(), tls_on).into_server());
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| ServerError::TlsConfig(e.to_string()))?;
    }
    let incoming = conn::LimitedListener::new(grpc_listener, config.connections, counters.clone());
    let failures = counters.clone();
    tasks.push(tokio::spawn(async move {
        let served = builder
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
            .add_service(service)
            .add_optional_service(pingmesh_grpc)
            .add_optional_service(tuning_grpc)
            .serve_with_incoming_shutdown(incoming, stop_requested(rx))
            .await;
        if let Err(error) = served {
            failures.bump(counters::Counter::InternalErrors);
            tracing::error!(%error, "the gRPC server stopped with an error");
        }
    }));

    let (tx, rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    let mut app = http::router(incidents.clone(), pingmesh.clone());
    if let Some(shared) = &pingmesh {
        app = app.merge(pingmesh_service::router(shared.clone()));
    }
    if let Some(shared) = &tuning {
        app = app.merge(tuning_service::router(shared.clone()));
    }
    let failures = counters.clone();
    tasks.push(tokio::spawn(async move {
        let listener =
            conn::LimitedListener::new(http_listener, config.connections, failures.clone());
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop_requested(rx))
            .await;
        if let Err(error) = served {
            failures.bump(counters::Counter::InternalErrors);
            tracing::error!(%error, "the HTTP server stopped with an error");
        }
    }));

    let (tx, rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    let sweeper = shared::Shared::new(incidents.clone());
    let period =
        (config.incident_timeout / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        // A sweep that takes long (a large diagnosis) is not followed by a burst of sweeps.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let stop = stop_requested(rx);
        tokio::pin!(stop);
        let mut retained_at: Option<std::time::Instant> = None;
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = tick.tick() => {
                    // Store and internal failures are logged and counted where they happen;
                    // incidents whose timeout could not be stored stay due for the next tick.
                    if let Ok(Ok(expired)) = sweeper.expire().await {
                        if !expired.is_empty() {
                            tracing::debug!(?expired, "incidents timed out");
                        }
                    }
                    // Retention about once a second (a compaction failure is logged and
                    // counted; the next pass tries again).
                    if retained_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        retained_at = Some(std::time::Instant::now());
                        let _ = sweeper.retain().await;
                    }
                }
            }
        }
    }));

    if let (Some(shared), Some(pm)) = (&pingmesh, &config.pingmesh) {
        let (tx, rx) = oneshot::channel::<()>();
        shutdown.push(tx);
        let shared = shared.clone();
        let failures = counters.clone();
        // Due periods are looked for four times a period (at least every second).
        let every = Duration::from_nanos(pm.period_ns / 4)
            .clamp(Duration::from_millis(5), Duration::from_secs(1));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let stop = stop_requested(rx);
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    () = &mut stop => break,
                    _ = tick.tick() => {
                        if let Err(error) = shared.analyse_due().await {
                            failures.bump(counters::Counter::InternalErrors);
                            tracing::error!(%error, "pingmesh analysis failed");
                        }
                    }
                }
            }
        }));
    }

    tracing::info!(
        tls = tls_on,
        grpc = %grpc_addr,
        http = %http_addr,
        data_dir = %config.data_dir.display(),
        incidents = known,
        "analyzer listening"
    );
    Ok(RunningServer {
        grpc_addr,
        http_addr,
        incidents,
        pingmesh,
        tuning,
        counters,
        shutdown,
        tasks,
    })
}
