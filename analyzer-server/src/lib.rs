//! The hawkmesh analyzer service: switch agents stream telemetry report chunks to it over
//! gRPC (`hawkmesh.v1.Collector`); it groups them into incidents by polling event id, decides
//! when an incident is complete (every switch the polling packet reached has reported, or a
//! timeout), runs the HAWKEYE diagnosis, keeps everything in an append-only store that
//! survives restarts, and serves the results over HTTP (JSON API and HTML report).

pub mod grpc;
pub mod http;
pub mod incidents;
pub mod store;

use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_proto::v1::collector_server::CollectorServer;
use hawkmesh_wire::topology::FabricTopology;
use incidents::{IncidentError, IncidentSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened or replayed.
    #[error("opening the store: {0}")]
    Store(#[from] IncidentError),
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
    /// The shared incident set.
    pub incidents: Arc<Mutex<IncidentSet>>,
    shutdown: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// Stops accepting, finishes in-flight requests and waits for the tasks.
    pub async fn stop(mut self) {
        for sender in self.shutdown.drain(..) {
            let _ = sender.send(());
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
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
    let service = CollectorServer::new(grpc::CollectorService::new(incidents.clone()));
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_listener);
    tasks.push(tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            })
            .await;
    }));

    let (tx, rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    let app = http::router(incidents.clone());
    tasks.push(tokio::spawn(async move {
        let _ = axum::serve(http_listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    }));

    let (tx, mut rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    let sweeper = incidents.clone();
    let period =
        (config.incident_timeout / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = &mut rx => break,
                _ = tick.tick() => {
                    if let Ok(mut set) = sweeper.lock() {
                        let _ = set.expire(Instant::now());
                    }
                }
            }
        }
    }));

    Ok(RunningServer {
        grpc_addr,
        http_addr,
        incidents,
        shutdown,
        tasks,
    })
}
