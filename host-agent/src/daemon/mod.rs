//! `hawkmesh host-agent`: the host agent as the daemon an operator runs on every RDMA host
//! (cargo feature `daemon`), probing over the kernel-UDP transport.
//!
//! What it does, in order:
//! 1. reads its configuration ([`DaemonConfig`], TOML) and takes the next incarnation from
//!    its state directory ([`state`]);
//! 2. opens one [`UdpTransport`] per interface (its address, the well-known port) and
//!    runs an [`Engine`] on a thread of its own per interface ([`interface`]): it answers
//!    other agents' probes at once, and probes its targets once it has a pinglist;
//! 3. registers its RNICs with the pingmesh controller (each interface's address, GID
//!    `::ffff:a.b.c.d`, QPN [`config::qpn_of`]), retrying while the controller is
//!    unreachable; a refusal (a host or address the fabric does not have) stops it with
//!    the controller's reason;
//! 4. fetches its pinglist, turns each RNIC's into its engine's targets and rate
//!    ([`plan`]), and fetches it again every `probing.pinglist_refresh_ms` (R-Pingmesh §5:
//!    5 minutes);
//! 5. every `upload.interval_ms` (R-Pingmesh §5: 5 s) batches the results finished since
//!    the last batch (an empty batch too: it says the agent is alive), numbers it, and
//!    queues it for delivery ([`uplink`]: byte-bounded, resent with back-off, nothing lost
//!    on an analyzer restart);
//! 6. serves its counters at `GET /metrics` ([`metrics`], Prometheus text format);
//! 7. on stop (SIGTERM in the CLI): stops probing, lets the probes in flight finish (one
//!    probe timeout), batches the last results and gives the buffer up to
//!    `upload.drain_ms` (10 s) to be delivered; returns what it did ([`DaemonSummary`]),
//!    including what it could not deliver.
//!
//! Threads: one per interface (the probing path: no lock but the results queue's, taken
//! once per step with reports), and a small Tokio runtime (two workers) for gRPC, the
//! upload schedule and the metrics endpoint. Every thread is created after the caller's
//! network namespace is in place, so a caller that enters a namespace first runs the
//! whole agent in it.

pub mod config;
pub mod interface;
pub mod link;
pub mod metrics;
pub mod plan;
pub mod services;
pub mod state;
pub mod trace;
pub mod tuning;
pub mod uplink;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hawkmesh_proto::v1 as pb;
use tokio::sync::Notify;

pub use config::{DaemonConfig, DaemonError};

use crate::engine::{Engine, EngineConfig};
use crate::probe::ProberConfig;
use interface::{Chunk, Interfaces, Pending, Route, Settings};
use link::Link;
use metrics::Metrics;
use uplink::{Controller, Delivery, EncodedBatch, Outbox};

/// How often a running daemon logs its counters.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// How long a failed pinglist fetch waits before the next try (at most the refresh time).
const PINGLIST_RETRY: Duration = Duration::from_secs(5);

/// What a daemon run did, at its end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonSummary {
    /// The host.
    pub host: String,
    /// The incarnation it ran as.
    pub incarnation: u64,
    /// Probes sent, over all interfaces.
    pub probes_sent: u64,
    /// Of which answered.
    pub probes_answered: u64,
    /// Of which timed out.
    pub probes_timeout: u64,
    /// Probes the kernel refused to send.
    pub probes_not_sent: u64,
    /// Results produced for upload.
    pub results: u64,
    /// Results the analyzer acknowledged.
    pub results_delivered: u64,
    /// Results still buffered when the drain time ran out.
    pub results_unsent: u64,
    /// Results dropped: buffer full, refused by the analyzer, or too many waiting.
    pub results_dropped: u64,
    /// Batches made.
    pub batches: u64,
    /// Uploads that failed (and were retried unless refused for good).
    pub upload_failures: u64,
}

impl DaemonSummary {
    /// Results that did not reach the analyzer.
    pub fn undelivered(&self) -> u64 {
        self.results_unsent + self.results_dropped
    }
}

impl std::fmt::Display for DaemonSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host agent `{}` (incarnation {}) stopped: {} probes sent ({} answered, {} timed out, {} not sent), {} results ({} delivered, {} undelivered, {} dropped), {} batches, {} failed uploads",
            self.host,
            self.incarnation,
            self.probes_sent,
            self.probes_answered,
            self.probes_timeout,
            self.probes_not_sent,
            self.results,
            self.results_delivered,
            self.results_unsent,
            self.results_dropped,
            self.batches,
            self.upload_failures
        )
    }
}

/// The GID of a RoCEv2 RNIC with the IPv4 address `ip`: the IPv4-mapped IPv6 address
/// `::ffff:a.b.c.d` (IBTA RoCEv2 Annex A17.4.5.1); an IPv6 address is its own GID.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// What an interface registers as: its UD queue pair and GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The queue pair number probes carry and are sent to.
    pub qpn: u32,
    /// The GID.
    pub gid: [u8; 16],
}

impl Identity {
    /// An interface's identity on kernel UDP (no queue pair): the QPN derived from its id
    /// and the incarnation ([`config::qpn_of`]), the GID of its address ([`gid_of`]).
    pub fn derived(interface: &config::InterfaceSection, incarnation: u64) -> Self {
        Identity {
            qpn: config::qpn_of(interface.id, incarnation),
            gid: gid_of(interface.ip),
        }
    }
}

/// The registration of `config`'s interfaces, with their identities, as incarnation
/// `incarnation`.
pub fn registration(
    config: &DaemonConfig,
    incarnation: u64,
    identities: &[Identity],
) -> pb::RegisterRequest {
    pb::RegisterRequest {
        host: config.host.clone(),
        incarnation,
        rnics: config
            .interfaces
            .iter()
            .zip(identities)
            .map(|(i, id)| pb::RnicInfo {
                nic: i.nic,
                gid: id.gid.to_vec(),
                ip: i.ip.to_string(),
                qpn: id.qpn,
            })
            .collect(),
    }
}

/// The waiting results as batches, one per chunk (each at most `upload.max_batch_results`,
/// each distinct path once in its table), numbered from `next_seq`; the ACK routes go
/// with the first batch. One empty batch when there is nothing (it tells the analyzer the
/// agent is alive: R-Pingmesh §4.3.1, a host that uploads nothing is down).
pub fn batches(
    host: &str,
    incarnation: u64,
    next_seq: &AtomicU64,
    chunks: Vec<Chunk>,
    routes: Vec<Route>,
) -> Vec<EncodedBatch> {
    let mut chunks = chunks;
    if chunks.is_empty() {
        chunks.push(Chunk::default());
    }
    let mut routes = Some(routes);
    chunks
        .into_iter()
        .map(|mut chunk| {
            let ack_routes = routes
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|r| pb::AckRoute {
                    nic: r.nic,
                    prober_host: r.prober_host,
                    prober_nic: r.prober_nic,
                    src_port: u32::from(r.src_port),
                    path_ref: chunk.table.number(&r.path),
                })
                .collect();
            let header = pb::ResultBatch {
                host: host.to_string(),
                incarnation,
                batch_seq: next_seq.fetch_add(1, Ordering::Relaxed),
                results: Vec::new(),
                paths: chunk.table.into_paths(),
                ack_routes,
            };
            EncodedBatch::new(&header, chunk.count, chunk.encoded)
        })
        .collect()
}

/// Opens the interface transports ([`Link`]: verbs or kernel UDP) and builds their
/// engines, naming the interface on error; with each, what it registers as.
fn engines(
    config: &DaemonConfig,
    incarnation: u64,
) -> Result<Vec<(Engine<Link>, Identity)>, DaemonError> {
    let mut engines = Vec::new();
    for interface in &config.interfaces {
        let bad = |reason: String| DaemonError::Interface {
            nic: interface.nic,
            ip: interface.ip,
            reason,
        };
        let link = Link::open(config, interface).map_err(bad)?;
        // A verbs QP has its own number (a new one at every start, as R-Pingmesh's QPN
        // reset rule expects); on kernel UDP one is derived from the incarnation.
        let derived = Identity::derived(interface, incarnation);
        let identity = Identity {
            qpn: link.qpn().unwrap_or(derived.qpn),
            gid: link.gid().unwrap_or(derived.gid),
        };
        tracing::info!(
            nic = interface.nic,
            qpn = format!("{:#x}", identity.qpn),
            "probing over {}",
            link.describe()
        );
        let engine_config = EngineConfig {
            prober: ProberConfig {
                timeout_ns: config.probing.timeout_ms.saturating_mul(1_000_000),
                max_outstanding: config.probing.max_in_flight,
            },
            ack_hold: Duration::from_micros(config.probing.ack_hold_us),
            max_pending_acks: config.probing.max_in_flight,
            ..EngineConfig::new(identity.qpn, incarnation as u32)
        };
        let engine =
            Engine::new(link, engine_config, Vec::new()).map_err(|e| bad(e.to_string()))?;
        engines.push((engine, identity));
    }
    Ok(engines)
}

/// What each interface's plan is made of: its pinglist and its service connections. The
/// pinglist refresh and the service-tracing thread each update their part; a plan that
/// changed is handed to its interface (a new one restarts the round robin).
#[derive(Debug)]
pub struct Planner {
    mailboxes: Vec<(u32, IpAddr, Arc<interface::Shared>)>,
    lists: std::collections::HashMap<u32, pb::RnicPinglist>,
    services: std::collections::BTreeMap<u32, plan::ServiceLoop>,
    current: Vec<Option<plan::Plan>>,
}

impl Planner {
    fn new(mailboxes: Vec<(u32, IpAddr, Arc<interface::Shared>)>) -> Self {
        let current = vec![None; mailboxes.len()];
        Planner {
            mailboxes,
            lists: Default::default(),
            services: Default::default(),
            current,
        }
    }

    fn publish(&mut self) {
        let none = plan::ServiceLoop::default();
        for ((nic, ip, shared), current) in self.mailboxes.iter().zip(self.current.iter_mut()) {
            let services = self.services.get(nic).unwrap_or(&none);
            let plan = plan::plan(*ip, self.lists.get(nic), services);
            if current.as_ref() == Some(&plan) {
                continue;
            }
            if let Ok(mut slot) = shared.plan.lock() {
                *slot = Some(plan.clone());
                *current = Some(plan);
            }
        }
    }
}

/// Fetches the pinglist every `refresh` and hands each interface its plan.
async fn refresh_pinglists(
    mut controller: Controller,
    config: Arc<DaemonConfig>,
    planner: Arc<Mutex<Planner>>,
) {
    let refresh = config.pinglist_refresh();
    let mut generation = None;
    let nics: Vec<u32> = config.interfaces.iter().map(|i| i.nic).collect();
    loop {
        let wait = match controller.pinglist().await {
            Ok(reply) => {
                if generation != Some(reply.generation) || reply.unregistered_targets > 0 {
                    tracing::info!(
                        generation = reply.generation,
                        unregistered_targets = reply.unregistered_targets,
                        "pinglist fetched"
                    );
                }
                generation = Some(reply.generation);
                for list in &reply.rnics {
                    if !nics.contains(&list.nic) {
                        tracing::warn!(
                            nic = list.nic,
                            "the pinglist has a NIC this agent has no [[interface]] for"
                        );
                    }
                }
                if let Ok(mut planner) = planner.lock() {
                    planner.lists = reply
                        .rnics
                        .into_iter()
                        .filter(|l| nics.contains(&l.nic))
                        .map(|l| (l.nic, l))
                        .collect();
                    planner.publish();
                }
                refresh
            }
            Err(status) => {
                tracing::warn!(
                    "fetching the pinglist failed ({}: {}); probing the last one meanwhile",
                    status.code(),
                    status.message()
                );
                refresh.min(PINGLIST_RETRY)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// Batches the waiting results and queues them for delivery.
fn flush(
    config: &DaemonConfig,
    incarnation: u64,
    next_seq: &AtomicU64,
    pending: &Mutex<Pending>,
    delivery: &Delivery,
    metrics: &Metrics,
) {
    let (results, routes) = pending
        .lock()
        .map(|mut p| (p.take(), p.take_routes()))
        .unwrap_or_default();
    for batch in batches(&config.host, incarnation, next_seq, results, routes) {
        metrics.batches.fetch_add(1, Ordering::Relaxed);
        delivery.queue(batch, metrics);
    }
}

async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    host: Arc<str>,
    stop: Arc<Notify>,
) {
    use axum::http::header;
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let text = metrics.render(&host);
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.notified().await })
        .await
    {
        tracing::error!(%error, "the metrics endpoint stopped");
    }
}

/// The RNICs' interface names for tuning: as configured, or the interface holding each
/// `[[interface]]`'s address.
fn netdevs(
    config: &DaemonConfig,
    tuning: &config::TuningSection,
) -> Result<Vec<String>, DaemonError> {
    if let Some(n) = &tuning.netdevs {
        return Ok(n.clone());
    }
    let addrs: Vec<(String, IpAddr)> = nix::ifaddrs::getifaddrs()
        .map_err(|e| DaemonError::Setup(format!("listing the interfaces: {e}")))?
        .filter_map(|a| {
            let ip = a.address.as_ref().and_then(|s| {
                s.as_sockaddr_in()
                    .map(|v4| IpAddr::V4(v4.ip()))
                    .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
            })?;
            Some((a.interface_name, ip))
        })
        .collect();
    config
        .interfaces
        .iter()
        .map(|i| {
            addrs
                .iter()
                .find(|(_, ip)| *ip == i.ip)
                .map(|(name, _)| name.clone())
                .ok_or_else(|| DaemonError::Config {
                    path: "tuning.netdevs".into(),
                    reason: format!("no interface holds {} (give tuning.netdevs)", i.ip),
                })
        })
        .collect()
}

/// Hooks for labs and tests; none in production ([`run`]).
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// Every result is also sent here as it is queued for upload (dropped when full).
    pub results: Option<std::sync::mpsc::SyncSender<pb::ProbeResult>>,
    /// The responders' ACK hold in µs, read by every interface at each step (it replaces
    /// `probing.ack_hold_us` while the daemon runs): a lab varies a responder's delay.
    pub ack_hold_us: Option<Arc<AtomicU64>>,
}

/// What an operator runs (`hawkmesh-host-agent --config FILE`, `hawkmesh host-agent
/// --config FILE`): loads the configuration, logs to stderr, runs the daemon until SIGTERM
/// or SIGINT (watched on the daemon's own runtime: no thread of their own), then drains.
pub fn serve(config_path: &std::path::Path) -> Result<DaemonSummary, DaemonError> {
    let config = DaemonConfig::load(config_path)?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .try_init()
        .map_err(|e| DaemonError::Setup(format!("installing the log subscriber: {e}")))?;
    tracing::info!(
        "host agent `{}`: {} interfaces, analyzer {}",
        config.host,
        config.interfaces.len(),
        config.analyzer.endpoint
    );
    run_inner(
        &config,
        Arc::new(AtomicBool::new(false)),
        Hooks::default(),
        true,
    )
}

/// Runs the daemon until `stop` is set, then drains (see the module's documentation).
/// Blocks; creates its own threads and runtime, in the calling thread's network namespace.
pub fn run(config: &DaemonConfig, stop: Arc<AtomicBool>) -> Result<DaemonSummary, DaemonError> {
    run_with(config, stop, Hooks::default())
}

/// [`run`] with lab hooks.
pub fn run_with(
    config: &DaemonConfig,
    stop: Arc<AtomicBool>,
    hooks: Hooks,
) -> Result<DaemonSummary, DaemonError> {
    run_inner(config, stop, hooks, false)
}

/// Sets `stop` on SIGTERM or SIGINT. Registered before it returns, so a signal from then
/// on stops the daemon instead of killing it.
fn watch_signals(
    runtime: &tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let _entered = runtime.enter();
    let setup = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| DaemonError::Setup(format!("watching {name}: {e}")))
    };
    let mut term = setup(SignalKind::terminate(), "SIGTERM")?;
    let mut int = setup(SignalKind::interrupt(), "SIGINT")?;
    runtime.spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
        stop.store(true, Ordering::Release);
    });
    Ok(())
}

fn run_inner(
    config: &DaemonConfig,
    stop: Arc<AtomicBool>,
    hooks: Hooks,
    signals: bool,
) -> Result<DaemonSummary, DaemonError> {
    let config = Arc::new(config.clone());
    let port_map = config.port_map()?.map(Arc::new);
    let incarnation = state::next_incarnation(&config.state_dir)?;
    let nics: Vec<u32> = config.interfaces.iter().map(|i| i.nic).collect();
    let metrics = Arc::new(Metrics::new(&nics));
    metrics.incarnation.store(incarnation, Ordering::Relaxed);
    // One worker: uploads, the pinglist refresh, service tracing and /metrics are light,
    // and each worker thread holds a malloc arena of its own (~3 MB at 150 probes/s per
    // RNIC in the overhead benchmark).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("hawkmesh-host-rt")
        .enable_all()
        .build()
        .map_err(|e| DaemonError::Setup(format!("starting the runtime: {e}")))?;
    if signals {
        watch_signals(&runtime, stop.clone())?;
    }
    let engines = engines(&config, incarnation)?;
    let identities: Vec<Identity> = engines.iter().map(|(_, id)| *id).collect();

    let metrics_stop = Arc::new(Notify::new());
    if let Some(listen) = config.metrics.listen {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(listen))
            .map_err(|e| DaemonError::Setup(format!("metrics.listen {listen}: {e}")))?;
        runtime.spawn(serve_metrics(
            listener,
            metrics.clone(),
            Arc::from(config.host.as_str()),
            metrics_stop.clone(),
        ));
        tracing::info!(%listen, "serving /metrics");
    }
    let bound: Option<SocketAddr> = config.metrics.listen;

    // Answer other agents' probes from now on; probe once a pinglist comes.
    let pending = Arc::new(Mutex::new(Pending::new(
        config.upload.max_pending_results,
        config.upload.max_batch_results,
    )));
    let tuning_setup = match &config.tuning {
        Some(t) => Some((
            t.clone(),
            netdevs(&config, t)?,
            Arc::new(Mutex::new(tuning::RttWindow::default())),
        )),
        None => None,
    };
    let mut lanes = Vec::with_capacity(engines.len());
    for (index, ((engine, _), section)) in engines.into_iter().zip(&config.interfaces).enumerate() {
        let tracing = match &port_map {
            Some(map) => {
                match trace::Tracer::new(
                    config.trace_settings(),
                    map.clone(),
                    &config.host,
                    section.nic,
                ) {
                    Ok(tracer) => Some((tracer, map.clone())),
                    Err(reason) => {
                        return Err(DaemonError::Config {
                            path: config
                                .path_tracing
                                .topology
                                .as_ref()
                                .map(|p| p.display().to_string())
                                .unwrap_or_default(),
                            reason,
                        });
                    }
                }
            }
            None => None,
        };
        let trigger = if config.polling.enabled {
            let p = &config.polling;
            let detector = crate::detector::DetectorConfig {
                threshold: p.threshold,
                suppression_ns: p.suppression_ms.saturating_mul(1_000_000),
                min_base_rtt_ns: p.min_base_rtt_us.saturating_mul(1_000),
                ..crate::detector::DetectorConfig::default()
            };
            let limits = crate::polling_sender::PollingLimits {
                per_second: p.per_second,
                burst: p.burst,
                ..crate::polling_sender::PollingLimits::default()
            };
            match crate::polling_sender::PollingSender::new(limits, p.dscp) {
                Ok(sender) => Some(interface::Trigger {
                    detector: crate::detector::RttDetector::new(
                        interface::detector_host_id(&config.host, section.nic),
                        detector,
                    ),
                    sender,
                }),
                Err(reason) => {
                    return Err(DaemonError::Config {
                        path: "polling".into(),
                        reason,
                    });
                }
            }
        } else {
            None
        };
        let settings = Settings {
            nic: section.nic,
            local: section.ip,
            trigger,
            timeout: config.probe_timeout(),
            tracing,
            ack_hold_us: hooks.ack_hold_us.clone(),
            tap: hooks.results.clone(),
            rtts: tuning_setup.as_ref().map(|(_, _, w)| w.clone()),
        };
        lanes.push((settings, engine, index));
    }
    let interfaces = interface::spawn_all(
        lanes,
        metrics.clone(),
        pending.clone(),
        Duration::from_micros(config.probing.tick_us),
    )
    .map_err(|e| DaemonError::Setup(format!("starting the interfaces' thread: {e}")))?;

    let channel = {
        let _entered = runtime.enter();
        uplink::channel(&config.analyzer)
    };
    let channel = match channel {
        Ok(c) => c,
        Err(e) => {
            stop_interfaces(interfaces);
            return Err(e);
        }
    };
    let tuning_stop = Arc::new(AtomicBool::new(false));
    let tuning_task = tuning_setup.map(|(t, netdevs, rtts)| {
        tracing::info!(interval_ms = t.interval_ms, ?netdevs, "tuning on");
        runtime.spawn(tuning::run(
            tuning::HostTuning {
                host: config.host.clone(),
                interval: Duration::from_millis(t.interval_ms),
                netdevs,
                root: t.sysfs_root.clone(),
                rtts,
            },
            channel.clone(),
            tuning_stop.clone(),
        ))
    });
    let mut controller = Controller::new(
        channel,
        registration(&config, incarnation, &identities),
        metrics.clone(),
    );
    let max_backoff = Duration::from_millis(config.upload.max_backoff_ms);
    let registered =
        runtime.block_on(controller.register_until(max_backoff, || stop.load(Ordering::Acquire)));
    match registered {
        Ok(Some(reply)) => {
            let advised = [
                (
                    "upload.interval_ms",
                    config.upload.interval_ms,
                    reply.upload_interval_ms,
                ),
                (
                    "probing.pinglist_refresh_ms",
                    config.probing.pinglist_refresh_ms,
                    reply.pinglist_refresh_ms,
                ),
                (
                    "probing.timeout_ms",
                    config.probing.timeout_ms,
                    reply.probe_timeout_ms,
                ),
            ];
            for (key, ours, theirs) in advised {
                if theirs != 0 && ours != theirs {
                    tracing::info!(
                        "{key} = {ours}; the controller advises {theirs} (this agent keeps its configuration)"
                    );
                }
            }
        }
        Ok(None) => {
            stop_interfaces(interfaces);
            metrics_stop.notify_one();
            return Ok(DaemonSummary {
                host: config.host.clone(),
                incarnation,
                ..DaemonSummary::default()
            });
        }
        Err(e) => {
            stop_interfaces(interfaces);
            metrics_stop.notify_one();
            return Err(e);
        }
    }

    let delivery = Arc::new(Delivery {
        outbox: Mutex::new(Outbox::new(config.upload.max_buffered_bytes)),
        wake: Notify::new(),
    });
    let next_seq = Arc::new(AtomicU64::new(0));
    let deliverer = runtime.spawn(uplink::deliver(
        controller.clone(),
        delivery.clone(),
        metrics.clone(),
        max_backoff,
    ));
    let mailboxes = config
        .interfaces
        .iter()
        .zip(&interfaces.interfaces)
        .map(|(section, i)| (section.nic, section.ip, i.shared.clone()))
        .collect();
    let planner = Arc::new(Mutex::new(Planner::new(mailboxes)));
    let refresher = runtime.spawn(refresh_pinglists(
        controller.clone(),
        config.clone(),
        planner.clone(),
    ));
    let services_stop = Arc::new(AtomicBool::new(false));
    let services_thread = if config.service_tracing.source == config::ServiceSourceChoice::None {
        None
    } else {
        let (sources, missing) = services::open_sources(&config);
        for reason in &missing {
            tracing::warn!("service connections source unavailable: {reason}");
        }
        if sources.is_empty() {
            tracing::warn!(
                "service tracing is off: no source of service connections could be opened (service_tracing.source = {:?})",
                config.service_tracing.source
            );
            None
        } else {
            tracing::info!(
                sources = sources
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                "service tracing on"
            );
            let (config, controller, handle, stop, planner) = (
                config.clone(),
                controller.clone(),
                runtime.handle().clone(),
                services_stop.clone(),
                planner.clone(),
            );
            std::thread::Builder::new()
                .name("hawkmesh-services".into())
                .spawn(move || {
                    services::run(config, sources, controller, handle, stop, |loops| {
                        if let Ok(mut planner) = planner.lock() {
                            planner.services = loops;
                            planner.publish();
                        }
                    })
                })
                .map_err(|e| tracing::error!("starting the service-tracing thread: {e}"))
                .ok()
        }
    };
    let batcher = {
        let (config, next_seq, pending, delivery, metrics) = (
            config.clone(),
            next_seq.clone(),
            pending.clone(),
            delivery.clone(),
            metrics.clone(),
        );
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(config.upload_interval());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                flush(
                    &config,
                    incarnation,
                    &next_seq,
                    &pending,
                    &delivery,
                    &metrics,
                );
            }
        })
    };
    tracing::info!(
        host = config.host,
        incarnation,
        interfaces = interfaces.interfaces.len(),
        metrics = ?bound,
        "host agent running"
    );

    let mut last_log = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last_log.elapsed() >= LOG_EVERY {
            last_log = Instant::now();
            log_counters(&metrics);
        }
    }

    // Stop: no more probes; the ones in flight finish; the last results are batched; the
    // buffer gets the drain time to reach the analyzer.
    let deadline = Instant::now() + Duration::from_millis(config.upload.drain_ms);
    tracing::info!("stopping: finishing the probes in flight, delivering the buffered results");
    refresher.abort();
    batcher.abort();
    if let Some(task) = tuning_task {
        tuning_stop.store(true, Ordering::Release);
        let wait = Duration::from_millis(config.tuning.as_ref().map_or(0, |t| t.interval_ms))
            .saturating_mul(3)
            .max(Duration::from_millis(200));
        match runtime.block_on(async { tokio::time::timeout(wait, task).await }) {
            Ok(Ok(s)) => tracing::info!(
                "tuning: {} intervals reported, {} not, {} settings written",
                s.reported,
                s.failed,
                s.applied
            ),
            _ => tracing::warn!("tuning: the task did not stop in time"),
        }
    }
    services_stop.store(true, Ordering::Release);
    if let Some(thread) = services_thread {
        let _ = thread.join();
    }
    let stats = stop_interfaces(interfaces);
    flush(
        &config,
        incarnation,
        &next_seq,
        &pending,
        &delivery,
        &metrics,
    );
    delivery.wake.notify_one();
    while Instant::now() < deadline
        && delivery
            .outbox
            .lock()
            .map(|o| !o.is_empty())
            .unwrap_or(false)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    deliverer.abort();
    metrics_stop.notify_one();
    let unsent = delivery.outbox.lock().map(|o| o.results()).unwrap_or(0)
        + pending.lock().map(|p| p.len() as u64).unwrap_or(0);
    runtime.shutdown_timeout(Duration::from_secs(1));

    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let summary = DaemonSummary {
        host: config.host.clone(),
        incarnation,
        probes_sent: stats.iter().map(|s| s.probes_sent).sum(),
        probes_answered: metrics
            .interfaces
            .iter()
            .map(|m| get(&m.probes_answered))
            .sum(),
        probes_timeout: metrics
            .interfaces
            .iter()
            .map(|m| get(&m.probes_timeout))
            .sum(),
        probes_not_sent: stats.iter().map(|s| s.probes_not_sent).sum(),
        results: get(&metrics.results),
        results_delivered: get(&metrics.results_delivered),
        results_unsent: unsent,
        results_dropped: get(&metrics.results_dropped) + get(&metrics.results_dropped_pending),
        batches: get(&metrics.batches),
        upload_failures: get(&metrics.uploads_failed),
    };
    if summary.undelivered() > 0 {
        tracing::error!(
            unsent = summary.results_unsent,
            dropped = summary.results_dropped,
            "some results did not reach the analyzer"
        );
    }
    Ok(summary)
}

/// Stops the interfaces' threads (each finishes its probes in flight) and returns their
/// engines' counters.
fn stop_interfaces(interfaces: Interfaces) -> Vec<crate::engine::EngineStats> {
    for i in &interfaces.interfaces {
        i.shared.stop.store(true, Ordering::Release);
    }
    interfaces.thread.join().unwrap_or_else(|_| {
        tracing::error!("the interfaces' thread panicked");
        Vec::new()
    })
}

fn log_counters(metrics: &Metrics) {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let sum = |f: fn(&metrics::InterfaceMetrics) -> &AtomicU64| -> u64 {
        metrics.interfaces.iter().map(|m| get(f(m))).sum()
    };
    tracing::info!(
        probes_sent = sum(|m| &m.probes_sent),
        answered = sum(|m| &m.probes_answered),
        timeouts = sum(|m| &m.probes_timeout),
        not_sent = sum(|m| &m.probes_not_sent),
        results_delivered = get(&metrics.results_delivered),
        uploads_failed = get(&metrics.uploads_failed),
        buffered_bytes = get(&metrics.buffered_bytes),
        batches_dropped = get(&metrics.batches_dropped_full)
            + get(&metrics.batches_dropped_invalid)
            + get(&metrics.batches_dropped_too_old),
        "host agent counters"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use interface::Finished;

    fn hop(node: &str, port: u32) -> pb::Hop {
        pb::Hop {
            node: node.into(),
            port,
        }
    }

    #[test]
    fn results_are_split_into_numbered_batches_and_none_makes_one_empty_batch() {
        let seq = AtomicU64::new(7);
        let results: Vec<Finished> = (0..5)
            .map(|i| Finished {
                result: pb::ProbeResult {
                    sent_ns: i,
                    ..pb::ProbeResult::default()
                },
                path: None,
            })
            .collect();
        let made = decoded(batches("h0", 3, &seq, chunks(results, 2), Vec::new()));
        let shape: Vec<(u64, usize)> = made
            .iter()
            .map(|b| (b.batch_seq, b.results.len()))
            .collect();
        assert_eq!(shape, [(7, 2), (8, 2), (9, 1)]);
        assert!(made.iter().all(|b| b.host == "h0" && b.incarnation == 3));
        let sent: Vec<u64> = made
            .iter()
            .flat_map(|b| b.results.iter().map(|r| r.sent_ns))
            .collect();
        assert_eq!(sent, [0, 1, 2, 3, 4]);
        let empty = decoded(batches("h0", 3, &seq, Vec::new(), Vec::new()));
        assert_eq!(empty.len(), 1);
        assert_eq!((empty[0].batch_seq, empty[0].results.len()), (10, 0));
        let two = made[0]
            .results
            .iter()
            .map(|r| Finished {
                result: r.clone(),
                path: None,
            })
            .collect();
        let exact = batches("h0", 3, &seq, chunks(two, 2), Vec::new());
        assert_eq!(exact.len(), 1);
    }

    /// `results` as they wait for their batch, `per_batch` to a batch.
    fn chunks(results: Vec<Finished>, per_batch: usize) -> Vec<Chunk> {
        let mut pending = Pending::new(1000, per_batch);
        for r in results {
            assert_eq!(pending.push(r), 0);
        }
        pending.take()
    }

    /// The batches as the analyzer reads them, each checked against its own count.
    fn decoded(made: Vec<EncodedBatch>) -> Vec<pb::ResultBatch> {
        made.iter()
            .map(|b| {
                let batch = b.decode().expect("a batch decodes");
                assert_eq!(
                    (batch.batch_seq, batch.results.len() as u64),
                    (b.seq, b.results)
                );
                batch
            })
            .collect()
    }

    #[test]
    fn a_batch_encoded_result_by_result_decodes_as_the_batch_encoded_whole() {
        let result = |n: u64| pb::ProbeResult {
            target_host: format!("h{n}"),
            sent_ns: n,
            path_ref: 1,
            ..pb::ProbeResult::default()
        };
        let whole = pb::ResultBatch {
            host: "h0".into(),
            incarnation: 2,
            batch_seq: 9,
            results: (1..=3).map(result).collect(),
            paths: vec![pb::Path {
                hops: vec![hop("tor0", 1)],
            }],
            ack_routes: Vec::new(),
        };
        let mut encoded = Vec::new();
        for r in &whole.results {
            prost::encoding::message::encode(interface::RESULTS_FIELD, r, &mut encoded);
        }
        let header = pb::ResultBatch {
            results: Vec::new(),
            ..whole.clone()
        };
        let parts = EncodedBatch::new(&header, 3, encoded);
        assert_eq!((parts.seq, parts.results), (9, 3));
        assert_eq!(parts.decode().expect("decodes"), whole);
        assert_eq!(parts.len(), prost::Message::encoded_len(&whole));
        assert_eq!(
            EncodedBatch::encode(&whole).decode().expect("decodes"),
            whole
        );
    }

    #[test]
    fn each_distinct_path_is_once_in_its_batch_and_routes_refer_to_it() {
        let up: trace::Path = vec![
            hop("h0", 0),
            hop("tor0", 2),
            hop("spine0", 1),
            hop("tor1", 0),
        ]
        .into();
        let other: trace::Path = vec![hop("h0", 0), hop("tor0", 1)].into();
        let finished = |path: Option<&trace::Path>| Finished {
            result: pb::ProbeResult::default(),
            path: path.cloned(),
        };
        let results = vec![
            finished(Some(&up)),
            finished(None),
            finished(Some(&other)),
            // The same hops in another allocation.
            finished(Some(&up.to_vec().into())),
        ];
        let routes = vec![Route {
            nic: 0,
            prober_host: "h3".into(),
            prober_nic: 1,
            src_port: 50_000,
            path: up.clone(),
        }];
        let made = decoded(batches(
            "h0",
            1,
            &AtomicU64::new(0),
            chunks(results, 10),
            routes,
        ));
        assert_eq!(made.len(), 1);
        let b = &made[0];
        assert_eq!(b.paths.len(), 2);
        let refs: Vec<u32> = b.results.iter().map(|r| r.path_ref).collect();
        assert_eq!(refs, [1, 0, 2, 1]);
        assert_eq!(b.paths[0].hops, up.to_vec());
        assert_eq!(b.ack_routes.len(), 1);
        let route = &b.ack_routes[0];
        assert_eq!(
            (
                route.prober_host.as_str(),
                route.prober_nic,
                route.src_port,
                route.path_ref
            ),
            ("h3", 1, 50_000, 1)
        );
    }

    #[test]
    fn registration_gives_ipv4_mapped_gids_and_incarnation_qpns() {
        let config = DaemonConfig::parse(config::tests::MINIMAL, "agent.toml").expect("parses");
        let derived = |incarnation| -> Vec<Identity> {
            config
                .interfaces
                .iter()
                .map(|i| Identity::derived(i, incarnation))
                .collect()
        };
        let r = registration(&config, 5, &derived(5));
        assert_eq!((r.host.as_str(), r.incarnation), ("h0", 5));
        assert_eq!(r.rnics.len(), 1);
        let rnic = &r.rnics[0];
        assert_eq!(
            rnic.gid,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]
        );
        assert_eq!(rnic.ip, "10.0.0.1");
        assert_eq!(rnic.qpn, config::qpn_of(0x0a01, 5));
        assert_ne!(rnic.qpn, registration(&config, 6, &derived(6)).rnics[0].qpn);
        // A verbs queue pair registers its own number and GID.
        let verbs = Identity {
            qpn: 0x11,
            gid: [9; 16],
        };
        let r = registration(&config, 5, &[verbs]);
        assert_eq!(
            (r.rnics[0].qpn, r.rnics[0].gid.as_slice()),
            (0x11, [9u8; 16].as_slice())
        );
    }
}
