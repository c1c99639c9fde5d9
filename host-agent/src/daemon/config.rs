//! The daemon's configuration file (TOML; `hw-lab/host-agent.toml` has every key).
//!
//! Unknown keys are refused (a misspelt key would otherwise be silently ignored), and every
//! error names the file and the key (TOML syntax errors also the line).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::engine::MAX_ID;

/// Why the daemon cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is wrong.
    #[error("{path}: {reason}")]
    Config {
        /// The file (or what the setting came from).
        path: String,
        /// What is wrong, with the key or line.
        reason: String,
    },
    /// The state directory could not be read or written.
    #[error("state directory {path}: {reason}")]
    State {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// An interface could not be opened.
    #[error("interface NIC {nic} ({ip}): {reason}")]
    Interface {
        /// Its NIC index.
        nic: u32,
        /// Its address.
        ip: IpAddr,
        /// Why.
        reason: String,
    },
    /// The controller refused the agent for good (a host or NIC the fabric does not have).
    #[error("the pingmesh controller refused {what}: {reason}")]
    Refused {
        /// The request.
        what: &'static str,
        /// The controller's answer.
        reason: String,
    },
    /// The analyzer channel, the metrics listener or the runtime could not be set up.
    #[error("{0}")]
    Setup(String),
}

/// The configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// This host's name in the fabric description (and its certificate's common name).
    pub host: String,
    /// Where the agent keeps its state: the incarnation counter, increased at every start
    /// (a restarted agent's probes and QPNs are told from its earlier ones by it).
    pub state_dir: PathBuf,
    /// The pingmesh controller (the analyzer service).
    pub analyzer: AnalyzerSection,
    /// Probing settings.
    #[serde(default)]
    pub probing: ProbingSection,
    /// Uploads.
    #[serde(default)]
    pub upload: UploadSection,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// Path tracing of the 5-tuples probed and answered on.
    #[serde(default)]
    pub path_tracing: PathTracingSection,
    /// The router interface addresses path tracing meets, by fabric port (`[[port_address]]`:
    /// operators generate the rows from their switch configurations).
    #[serde(default, rename = "port_address")]
    pub port_addresses: Vec<PortAddressSection>,
    /// Service tracing: probes on the service's own connections.
    #[serde(default)]
    pub service_tracing: ServiceTracingSection,
    /// HAWKEYE polling when a traced service connection's RTT crosses the threshold.
    #[serde(default)]
    pub polling: PollingSection,
    /// PARALEON: the RNICs' metrics to the analyzer's tuning controller every interval, its
    /// DCQCN settings into the RNICs (absent: off).
    #[serde(default)]
    pub tuning: Option<TuningSection>,
    /// The RNICs (or, on kernel UDP, the interfaces standing for them) the agent probes
    /// from and answers on.
    #[serde(rename = "interface")]
    pub interfaces: Vec<InterfaceSection>,
}

/// `[tuning]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TuningSection {
    /// λ_MI, ms (the ToRs' interval; PARALEON's testbed: 30).
    #[serde(default = "default_tuning_ms")]
    pub interval_ms: u64,
    /// Where sysfs is (`/`; a lab's fake tree).
    #[serde(default = "default_sysfs_root")]
    pub sysfs_root: PathBuf,
    /// The RNICs' interface names, in `[[interface]]` order (default: the interface holding
    /// each one's address).
    #[serde(default)]
    pub netdevs: Option<Vec<String>>,
}

fn default_tuning_ms() -> u64 {
    30
}

fn default_sysfs_root() -> PathBuf {
    PathBuf::from("/")
}

/// `[analyzer]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalyzerSection {
    /// `https://host:port` (mutual TLS), or `http://` on a loopback address only.
    pub endpoint: String,
    /// The CA the analyzer's certificate chains to (PEM).
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// This agent's certificate (PEM; its common name is `host`).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// The analyzer's name as its certificate gives it (default: the endpoint's host).
    #[serde(default)]
    pub name: Option<String>,
}

/// `[probing]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProbingSection {
    /// The transport probes go over: `verbs` (a UD queue pair per RNIC, NIC completion
    /// timestamps), `udp` (kernel UDP with `SO_TIMESTAMPING`), or `auto` (verbs where the
    /// build has them and the interface's RDMA device opens, else UDP, saying why).
    pub transport: TransportChoice,
    /// The well-known UDP port every agent listens on (RoCEv2's 4791 by default; pick
    /// another where an RNIC owns the address, since it consumes 4791 itself).
    pub port: u16,
    /// DSCP of probes and ACKs (0–63, the TOS byte's upper six bits), so that they ride the
    /// RoCE traffic class; none keeps the system's.
    pub dscp: Option<u8>,
    /// A probe without both ACKs after this long is a timeout (R-Pingmesh §5: 500 ms).
    pub timeout_ms: u64,
    /// How often the pinglist (and with it the targets' comm info) is fetched again
    /// (R-Pingmesh §5: 5 minutes).
    pub pinglist_refresh_ms: u64,
    /// Probes in flight per interface at most.
    pub max_in_flight: usize,
    /// Source-port sockets kept open per interface at most (kernel UDP).
    pub max_source_sockets: usize,
    /// Ask the NIC for send timestamps too (only where its hardware timestamping is on).
    pub hardware_tx: bool,
    /// Fault injection for labs: hold every first ACK this long, as a responder whose CPU
    /// is busy would (0: none). Never set it in production.
    pub ack_hold_us: u64,
    /// One thread serves every interface and wakes once per tick (µs, 100–5000): it sends
    /// what fell due and handles what arrived since. A datagram waits at most a tick before
    /// it is handled; RTTs are measured on kernel or NIC timestamps, so this only adds to
    /// the responder delay the ACK reports (kept well under the analyzer's 10 ms CPU-noise
    /// bound). Fewer wake-ups are most of the agent's CPU saving.
    pub tick_us: u64,
}

impl Default for ProbingSection {
    fn default() -> Self {
        ProbingSection {
            transport: TransportChoice::Auto,
            port: crate::udp::DEFAULT_PROBE_PORT,
            dscp: None,
            timeout_ms: 500,
            pinglist_refresh_ms: 300_000,
            max_in_flight: 4096,
            max_source_sockets: 256,
            hardware_tx: false,
            ack_hold_us: 0,
            tick_us: 2000,
        }
    }
}

/// `probing.transport`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TransportChoice {
    /// Verbs where possible, else kernel UDP.
    Auto,
    /// RDMA verbs UD only (the agent does not start without it).
    Verbs,
    /// Kernel UDP only.
    Udp,
}

/// `[service_tracing]` (R-Pingmesh §4.1.2): each service connection this host's RNICs have
/// open is probed on its own 5-tuple, so the probes take its path.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceTracingSection {
    /// Where connections come from: `auto` (eBPF where this build has it and the kernel
    /// loads it, else the kernel's RDMA netlink dump, plus `static_file` if given), `ebpf`,
    /// `netlink`, `static` (`static_file` only), or `none`.
    pub source: ServiceSourceChoice,
    /// A static list of connections (`services::StaticList`'s format), read at every poll.
    pub static_file: Option<PathBuf>,
    /// How often the source is read, ms.
    pub poll_ms: u64,
    /// Time between two probes of one connection, ms (R-Pingmesh §4.1.2: 10 ms).
    pub interval_ms: u64,
    /// Service-tracing probes per second and interface at most: with more connections
    /// each is probed less often (and the agent says so).
    pub max_pps: f64,
    /// Connections traced at most, per host.
    pub max_connections: usize,
}

impl Default for ServiceTracingSection {
    fn default() -> Self {
        ServiceTracingSection {
            source: ServiceSourceChoice::Auto,
            static_file: None,
            poll_ms: 1_000,
            interval_ms: 10,
            max_pps: 2_000.0,
            max_connections: 1_024,
        }
    }
}

/// `service_tracing.source`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceSourceChoice {
    /// eBPF, else RDMA netlink; the static file too when given.
    Auto,
    /// eBPF only.
    Ebpf,
    /// RDMA netlink only.
    Netlink,
    /// The static file only.
    Static,
    /// No service tracing.
    None,
}

/// `[polling]`: the HAWKEYE polling packet, sent when a service connection's traced RTT
/// crosses the threshold (HAWKEYE §3.2), through a raw socket, rate-limited.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PollingSection {
    /// Send polling packets (needs service tracing, and the raw-socket capability).
    pub enabled: bool,
    /// DSCP of polling packets: the switches' control class.
    pub dscp: u8,
    /// A network RTT above `threshold` × the connection's base RTT (the least seen) polls
    /// (HAWKEYE §3.2).
    pub threshold: f64,
    /// A connection polled is not polled again for this long unless it gets worse, ms.
    pub suppression_ms: u64,
    /// Base RTTs below this are taken as this, µs (a loopback-short path would poll on
    /// scheduling noise).
    pub min_base_rtt_us: u64,
    /// Polls per second at most (all connections), and at once.
    pub per_second: f64,
    /// Polls that may leave at once.
    pub burst: u32,
}

impl Default for PollingSection {
    fn default() -> Self {
        let detector = crate::detector::DetectorConfig::default();
        let limits = crate::polling_sender::PollingLimits::default();
        PollingSection {
            enabled: false,
            dscp: 48,
            threshold: detector.threshold,
            suppression_ms: detector.suppression_ns / 1_000_000,
            min_base_rtt_us: 5,
            per_second: limits.per_second,
            burst: limits.burst,
        }
    }
}

/// `[upload]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UploadSection {
    /// Results are batched and uploaded this often (R-Pingmesh §5: every 5 s). A batch is
    /// uploaded even when empty: it tells the analyzer the agent is alive.
    pub interval_ms: u64,
    /// Results in one batch at most (more are split over several batches).
    pub max_batch_results: usize,
    /// Bytes of batches the analyzer has not acknowledged kept at most; beyond, the oldest
    /// are dropped and counted (the analyzer away for long).
    pub max_buffered_bytes: usize,
    /// Results waiting for the next batch at most (the oldest beyond are dropped, counted).
    pub max_pending_results: usize,
    /// Longest wait between two tries of a failed upload (the back-off doubles from 100 ms).
    pub max_backoff_ms: u64,
    /// How long a stop waits for the buffered batches to be delivered.
    pub drain_ms: u64,
}

impl Default for UploadSection {
    fn default() -> Self {
        UploadSection {
            interval_ms: 5_000,
            max_batch_results: 10_000,
            max_buffered_bytes: 64 << 20,
            max_pending_results: 200_000,
            max_backoff_ms: 10_000,
            drain_ms: 10_000,
        }
    }
}

/// `[metrics]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// Where `GET /metrics` (Prometheus text format) is served; none serves nothing.
    pub listen: Option<SocketAddr>,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 9464))),
        }
    }
}

/// `[path_tracing]` (R-Pingmesh §4.1; `daemon::trace`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PathTracingSection {
    /// Trace the paths of the 5-tuples probed (and of the ACKs answered) with a UDP
    /// traceroute that keeps the 5-tuple. Needs `topology` and the `[[port_address]]` table.
    pub enabled: bool,
    /// The fabric description (`topology.json`): its cabling turns the routers' ingress
    /// ports into the egress ports a path is made of.
    pub topology: Option<PathBuf>,
    /// Traces started per second and interface at most (each costs a datagram and an ICMP
    /// answer per hop, and switch CPU for the answers).
    pub traces_per_s: f64,
    /// Traces that may start at once after a quiet time.
    pub burst: u32,
    /// A traced path older than this is traced again (routes change), ms.
    pub refresh_ms: u64,
    /// 5-tuples remembered per interface at most.
    pub capacity: usize,
    /// The largest TTL a trace tries.
    pub max_ttl: u8,
    /// How long a hop has to answer before it is asked again (twice at most), ms.
    pub hop_timeout_ms: u64,
}

impl Default for PathTracingSection {
    fn default() -> Self {
        let schedule = crate::paths::PathTracingConfig::default();
        PathTracingSection {
            enabled: false,
            topology: None,
            traces_per_s: schedule.traces_per_s,
            burst: schedule.burst,
            refresh_ms: schedule.refresh_ns / 1_000_000,
            capacity: schedule.capacity,
            max_ttl: 8,
            hop_timeout_ms: 200,
        }
    }
}

/// `[[port_address]]`: a router interface's address and the fabric port it is on.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortAddressSection {
    /// The address (what the router answers time-exceeded from: the interface a datagram
    /// came in by).
    pub ip: IpAddr,
    /// The switch's name in the fabric description.
    pub node: String,
    /// The port.
    pub port: u16,
}

/// `[[interface]]`: one RNIC.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InterfaceSection {
    /// NIC index on the host (its port number in the fabric description).
    pub nic: u32,
    /// Its address (the fabric description's: the host's address plus the NIC index).
    pub ip: IpAddr,
    /// The interface's 24-bit id. On kernel UDP it stands for the UD queue pair number:
    /// the QPN the agent registers and carries in its probes is derived from it and the
    /// incarnation ([`qpn_of`]), so that a restarted agent, like a verbs agent that
    /// created a new QP, has a new one (R-Pingmesh §4.3.1, QPN reset).
    pub id: u32,
    /// The RDMA device of this RNIC (`mlx5_0`, `rxe0`) for the verbs transport; none takes
    /// the first device libibverbs lists (name it on multi-RNIC hosts).
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// The device's port.
    #[serde(default = "default_rdma_port")]
    pub rdma_port: u8,
    /// The GID index; none takes the first RoCE v2 IPv4-mapped GID (it must be `ip`'s).
    #[serde(default)]
    pub gid_index: Option<u32>,
}

fn default_rdma_port() -> u8 {
    1
}

/// The QPN of an interface with id `id` in incarnation `incarnation`: 2 + ((id +
/// incarnation × 40,503) mod (2²⁴ − 2)), in 2..2²⁴ (0 and 1 are QP0 and QP1, IBTA vol. 1
/// §9.2). Consecutive incarnations never share one (40,503 is below 2²⁴ − 2), and two ids of
/// a host differ in every incarnation.
pub fn qpn_of(id: u32, incarnation: u64) -> u32 {
    const SPAN: u64 = (1 << 24) - 2;
    let mixed = (u64::from(id) + (incarnation % SPAN) * 40_503) % SPAN;
    2 + mixed as u32
}

impl DaemonConfig {
    /// Parses a configuration; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<DaemonConfig, DaemonError> {
        let config: DaemonConfig = toml::from_str(text).map_err(|e| DaemonError::Config {
            path: origin.to_string(),
            reason: e.to_string().trim_end().to_string(),
        })?;
        config.check(origin)?;
        Ok(config)
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<DaemonConfig, DaemonError> {
        let text = std::fs::read_to_string(path).map_err(|e| DaemonError::Config {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        DaemonConfig::parse(&text, &path.display().to_string())
    }

    fn check(&self, origin: &str) -> Result<(), DaemonError> {
        let bad = |reason: String| DaemonError::Config {
            path: origin.to_string(),
            reason,
        };
        if let Some(t) = &self.tuning {
            if !(1..=60_000).contains(&t.interval_ms) {
                return Err(bad(format!(
                    "tuning.interval_ms {}: must be in 1..=60000",
                    t.interval_ms
                )));
            }
            if let Some(n) = &t.netdevs {
                if n.len() != self.interfaces.len()
                    || n.iter().any(|d| d.is_empty() || d.contains('/'))
                {
                    return Err(bad(format!(
                        "tuning.netdevs: one interface name per [[interface]] ({}), got {:?}",
                        self.interfaces.len(),
                        n
                    )));
                }
            }
        }
        if self.host.is_empty() {
            return Err(bad("host: empty; give the host's name in the fabric".into()));
        }
        let tls = [&self.analyzer.ca, &self.analyzer.cert, &self.analyzer.key];
        hawkmesh_proto::tls::check_analyzer_endpoint(
            &self.analyzer.endpoint,
            tls.iter().all(|f| f.is_some()),
        )
        .map_err(bad)?;
        let p = &self.probing;
        if p.port == 0 {
            return Err(bad("probing.port: 0 is not a port".into()));
        }
        if p.dscp.is_some_and(|d| d > 63) {
            return Err(bad(format!(
                "probing.dscp: {} is not a DSCP (0–63)",
                p.dscp.unwrap_or_default()
            )));
        }
        for (key, value, min) in [
            ("probing.timeout_ms", p.timeout_ms, 1),
            ("probing.pinglist_refresh_ms", p.pinglist_refresh_ms, 100),
            ("upload.interval_ms", self.upload.interval_ms, 10),
            ("upload.max_backoff_ms", self.upload.max_backoff_ms, 100),
        ] {
            if value < min {
                return Err(bad(format!("{key}: {value} is below {min}")));
            }
        }
        if !(100..=5000).contains(&p.tick_us) {
            return Err(bad(format!(
                "probing.tick_us: {} is outside 100–5000",
                p.tick_us
            )));
        }
        if p.timeout_ms > 60_000 {
            return Err(bad(format!(
                "probing.timeout_ms: {} is above a minute",
                p.timeout_ms
            )));
        }
        for (key, value) in [
            ("probing.max_in_flight", p.max_in_flight),
            ("probing.max_source_sockets", p.max_source_sockets),
            ("upload.max_batch_results", self.upload.max_batch_results),
            ("upload.max_buffered_bytes", self.upload.max_buffered_bytes),
            (
                "upload.max_pending_results",
                self.upload.max_pending_results,
            ),
        ] {
            if value == 0 {
                return Err(bad(format!("{key}: must be at least 1")));
            }
        }
        let t = &self.path_tracing;
        if t.enabled {
            if t.topology.is_none() {
                return Err(bad(
                    "path_tracing.topology: path tracing needs the fabric description".into(),
                ));
            }
            if self.port_addresses.is_empty() {
                return Err(bad(
                    "path_tracing: enabled without a [[port_address]] table (router addresses → fabric ports)"
                        .into(),
                ));
            }
            if !(t.traces_per_s.is_finite() && t.traces_per_s > 0.0) {
                return Err(bad(format!(
                    "path_tracing.traces_per_s: {} must be above 0",
                    t.traces_per_s
                )));
            }
            if t.burst == 0 || t.capacity == 0 || t.max_ttl == 0 || t.hop_timeout_ms == 0 {
                return Err(bad(
                    "path_tracing: burst, capacity, max_ttl and hop_timeout_ms must be above 0"
                        .into(),
                ));
            }
            if t.max_ttl > 64 {
                return Err(bad(format!(
                    "path_tracing.max_ttl: {} is more hops than a fabric has (at most 64)",
                    t.max_ttl
                )));
            }
        }
        let st = &self.service_tracing;
        if st.source != ServiceSourceChoice::None {
            if st.poll_ms < 10 || st.interval_ms == 0 {
                return Err(bad(format!(
                    "service_tracing: poll_ms {} (at least 10) and interval_ms {} (at least 1)",
                    st.poll_ms, st.interval_ms
                )));
            }
            if !(st.max_pps.is_finite() && st.max_pps > 0.0) || st.max_connections == 0 {
                return Err(bad(
                    "service_tracing: max_pps and max_connections must be above 0".into(),
                ));
            }
            if st.source == ServiceSourceChoice::Static && st.static_file.is_none() {
                return Err(bad(
                    "service_tracing.static_file: source \"static\" needs the file".into(),
                ));
            }
        }
        let pl = &self.polling;
        if pl.enabled {
            if st.source == ServiceSourceChoice::None {
                return Err(bad(
                    "polling: enabled, but service_tracing.source is \"none\": polling is triggered by service tracing".into(),
                ));
            }
            if pl.dscp > 63 {
                return Err(bad(format!(
                    "polling.dscp: {} is not a DSCP (0–63)",
                    pl.dscp
                )));
            }
            if !(pl.threshold.is_finite() && pl.threshold > 1.0) {
                return Err(bad(format!(
                    "polling.threshold: {} must be above 1 (a multiple of the base RTT)",
                    pl.threshold
                )));
            }
            if !(pl.per_second.is_finite() && pl.per_second > 0.0) || pl.burst == 0 {
                return Err(bad("polling: per_second and burst must be above 0".into()));
            }
        }
        let mut addresses = BTreeSet::new();
        for (i, row) in self.port_addresses.iter().enumerate() {
            if !addresses.insert(row.ip) {
                return Err(bad(format!("port_address[{i}]: ip {} given twice", row.ip)));
            }
        }
        if self.interfaces.is_empty() {
            return Err(bad(
                "no [[interface]]: give each RNIC's nic, ip and id".into()
            ));
        }
        let mut nics = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut ips = BTreeSet::new();
        for (i, interface) in self.interfaces.iter().enumerate() {
            let place = format!("interface[{i}] (nic {})", interface.nic);
            if !nics.insert(interface.nic) {
                return Err(bad(format!("{place}: nic {} given twice", interface.nic)));
            }
            if interface.id > MAX_ID {
                return Err(bad(format!(
                    "{place}: id {:#x} does not fit in 24 bits (at most {MAX_ID:#x})",
                    interface.id
                )));
            }
            if !ids.insert(interface.id) {
                return Err(bad(format!("{place}: id {:#x} given twice", interface.id)));
            }
            let ip = interface.ip;
            if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
                return Err(bad(format!(
                    "{place}: ip {ip} is not an interface's unicast address"
                )));
            }
            if !ip.is_ipv4() {
                return Err(bad(format!(
                    "{place}: ip {ip}: the controller knows RNICs by their IPv4 address"
                )));
            }
            if !ips.insert(ip) {
                return Err(bad(format!("{place}: ip {ip} given twice")));
            }
            if interface.rdma_port == 0 {
                return Err(bad(format!(
                    "{place}: rdma_port 0: device ports are numbered from 1"
                )));
            }
        }
        Ok(())
    }

    /// The probe timeout.
    pub fn probe_timeout(&self) -> Duration {
        Duration::from_millis(self.probing.timeout_ms)
    }

    /// The upload interval.
    pub fn upload_interval(&self) -> Duration {
        Duration::from_millis(self.upload.interval_ms)
    }

    /// The pinglist refresh interval.
    pub fn pinglist_refresh(&self) -> Duration {
        Duration::from_millis(self.probing.pinglist_refresh_ms)
    }

    /// Path tracing's settings.
    pub fn trace_settings(&self) -> super::trace::TraceSettings {
        let t = &self.path_tracing;
        super::trace::TraceSettings {
            schedule: crate::paths::PathTracingConfig {
                traces_per_s: t.traces_per_s,
                burst: t.burst,
                refresh_ns: t.refresh_ms.saturating_mul(1_000_000),
                capacity: t.capacity,
            },
            max_ttl: t.max_ttl,
            hop_timeout_ns: t.hop_timeout_ms.saturating_mul(1_000_000),
        }
    }

    /// The router address table and the fabric's cabling (reads the fabric description),
    /// when path tracing is on; errors name the file or the row.
    pub fn port_map(&self) -> Result<Option<super::trace::PortMap>, DaemonError> {
        let t = &self.path_tracing;
        let (true, Some(path)) = (t.enabled, &t.topology) else {
            return Ok(None);
        };
        let bad = |reason: String| DaemonError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let fabric: hawkmesh_wire::topology::FabricTopology = serde_json::from_str(&text)
            .map_err(|e| bad(format!("not a fabric description: {e}")))?;
        let rows: Vec<super::trace::PortAddress> = self
            .port_addresses
            .iter()
            .map(|r| super::trace::PortAddress {
                ip: r.ip,
                node: r.node.clone(),
                port: r.port,
            })
            .collect();
        super::trace::PortMap::new(fabric, &rows)
            .map(Some)
            .map_err(bad)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MINIMAL: &str = r#"
host = "h0"
state_dir = "/var/lib/hawkmesh"
[analyzer]
endpoint = "http://127.0.0.1:50051"
[[interface]]
nic = 0
ip = "10.0.0.1"
id = 0x0a01
"#;

    #[test]
    fn a_minimal_configuration_takes_the_defaults() {
        let config = DaemonConfig::parse(MINIMAL, "agent.toml").expect("parses");
        assert_eq!(config.probing, ProbingSection::default());
        assert_eq!(config.upload, UploadSection::default());
        assert_eq!(config.probe_timeout(), Duration::from_millis(500));
        assert_eq!(config.upload_interval(), Duration::from_secs(5));
        assert_eq!(config.pinglist_refresh(), Duration::from_secs(300));
        assert_eq!(config.interfaces[0].id, 0x0a01);
        assert_eq!(
            config.metrics.listen,
            Some("127.0.0.1:9464".parse().expect("an address"))
        );
    }

    #[test]
    fn the_lab_example_configuration_parses_with_every_key() {
        let text = include_str!("../../../hw-lab/host-agent.toml");
        let config = DaemonConfig::parse(text, "hw-lab/host-agent.toml").expect("parses");
        assert_eq!(config.host, "h0");
        assert_eq!(config.interfaces.len(), 2);
        assert_eq!(config.analyzer.name.as_deref(), Some("analyzer.lab"));
        // Every key is written out, with the defaults' values.
        assert_eq!(config.probing.dscp, Some(26));
        assert_eq!(
            ProbingSection {
                dscp: None,
                ..config.probing.clone()
            },
            ProbingSection::default()
        );
        assert_eq!(config.upload, UploadSection::default());
        assert_eq!(config.metrics, MetricsSection::default());
        assert_eq!(
            config.path_tracing,
            PathTracingSection {
                enabled: true,
                topology: Some("/etc/hawkmesh/topology.json".into()),
                ..PathTracingSection::default()
            }
        );
        assert_eq!(config.port_addresses.len(), 3);
        assert_eq!(config.port_addresses[2].node, "spine0");
        assert_eq!(config.service_tracing, ServiceTracingSection::default());
        assert_eq!(config.polling, PollingSection::default());
        assert_eq!(config.interfaces[1].rdma_device.as_deref(), Some("mlx5_1"));
        assert_eq!(config.interfaces[1].rdma_port, 1);
    }

    #[test]
    fn configuration_errors_name_the_file_and_the_key() {
        let cases = [
            (
                MINIMAL.replace("http://127.0.0.1", "http://10.1.1.1"),
                "agent.toml: analyzer.endpoint: plaintext is for a loopback analyzer only",
            ),
            (
                MINIMAL.replace("http://127.0.0.1", "https://analyzer"),
                "agent.toml: analyzer: an https endpoint needs `ca`, `cert` and `key`",
            ),
            (
                MINIMAL.replace("id = 0x0a01", "id = 0x1000000"),
                "agent.toml: interface[0] (nic 0): id 0x1000000 does not fit in 24 bits",
            ),
            (
                MINIMAL.replace("10.0.0.1", "0.0.0.0"),
                "agent.toml: interface[0] (nic 0): ip 0.0.0.0 is not",
            ),
            (
                MINIMAL.replace("[analyzer]", "[probing]\ndscp = 64\n[analyzer]"),
                "agent.toml: probing.dscp: 64 is not a DSCP",
            ),
            (
                MINIMAL.replace("[analyzer]", "[upload]\ninterval_ms = 0\n[analyzer]"),
                "agent.toml: upload.interval_ms: 0 is below 10",
            ),
            (
                format!("{MINIMAL}[[interface]]\nnic = 0\nip = \"10.0.0.2\"\nid = 2\n"),
                "agent.toml: interface[1] (nic 0): nic 0 given twice",
            ),
            (
                MINIMAL.replace("[analyzer]", "[probing]\nprot = 1\n[analyzer]"),
                "agent.toml: TOML parse error at line 5",
            ),
            (
                MINIMAL.replace("[analyzer]", "[probing]\ntransport = \"rdma\"\n[analyzer]"),
                "agent.toml: TOML parse error at line 5",
            ),
            (
                MINIMAL.replace(
                    "[analyzer]",
                    "[service_tracing]\nsource = \"none\"\n[polling]\nenabled = true\n[analyzer]",
                ),
                "agent.toml: polling: enabled, but service_tracing.source is \"none\"",
            ),
            (
                MINIMAL.replace(
                    "[analyzer]",
                    "[service_tracing]\nsource = \"static\"\n[analyzer]",
                ),
                "agent.toml: service_tracing.static_file: source \"static\" needs the file",
            ),
            (
                MINIMAL.replace(
                    "[analyzer]",
                    "[polling]\nenabled = true\nthreshold = 1.0\n[analyzer]",
                ),
                "agent.toml: polling.threshold: 1 must be above 1",
            ),
            (
                format!("{MINIMAL}rdma_port = 0\n"),
                "agent.toml: interface[0] (nic 0): rdma_port 0",
            ),
            (
                MINIMAL.replace("[analyzer]", "[path_tracing]\nenabled = true\n[analyzer]"),
                "agent.toml: path_tracing.topology: path tracing needs the fabric description",
            ),
            (
                MINIMAL.replace(
                    "[analyzer]",
                    "[path_tracing]\nenabled = true\ntopology = \"t.json\"\n[analyzer]",
                ),
                "agent.toml: path_tracing: enabled without a [[port_address]] table",
            ),
            (
                format!(
                    "{MINIMAL}[[port_address]]\nip = \"172.16.0.1\"\nnode = \"tor0\"\nport = 1\n\
                     [[port_address]]\nip = \"172.16.0.1\"\nnode = \"tor0\"\nport = 2\n"
                ),
                "agent.toml: port_address[1]: ip 172.16.0.1 given twice",
            ),
            (
                MINIMAL.replace("[analyzer]", "[tuning]\ninterval_ms = 0\n[analyzer]"),
                "agent.toml: tuning.interval_ms 0: must be in 1..=60000",
            ),
            (
                MINIMAL.replace(
                    "[analyzer]",
                    "[tuning]\nnetdevs = [\"eth0\", \"eth1\"]\n[analyzer]",
                ),
                "agent.toml: tuning.netdevs: one interface name per [[interface]] (1)",
            ),
        ];
        for (text, expected) in cases {
            let e = DaemonConfig::parse(&text, "agent.toml").expect_err(expected);
            assert!(e.to_string().starts_with(expected), "{e}");
        }
        let e = DaemonConfig::parse(
            &MINIMAL.replace("[analyzer]", "[probing]\nprot = 1\n[analyzer]"),
            "agent.toml",
        )
        .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `prot`"), "{e}");
    }

    #[test]
    fn a_restart_changes_every_qpn_and_keeps_them_in_range() {
        for id in [0, 1, 0x0a01, MAX_ID] {
            for incarnation in [0, 1, 2, 414, u64::from(u32::MAX), u64::MAX] {
                let qpn = qpn_of(id, incarnation);
                assert!((2..1 << 24).contains(&qpn), "{id} {incarnation}: {qpn}");
                assert_ne!(qpn, qpn_of(id, incarnation.wrapping_add(1)));
            }
        }
        assert_ne!(qpn_of(1, 7), qpn_of(2, 7));
    }
}
