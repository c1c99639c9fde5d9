//! `hawkmesh fitf --watch CONFIG`: continuous sampling of chosen ports as a daemon.
//!
//! Every `spacing_ms` (the study's 100 ms) each configured port is read from its source
//! (perfquery, `ethtool -S`, SONiC's COUNTERS_DB, a Tofino's `$PORT_STAT` over BF Runtime).
//! Each port keeps its last `window` reads (the study's round of 100); from them the FITF of
//! each interval (Yellowstone Eq. 3, from PortXmitWait) or its RoCE analogue (the paused
//! fraction of each watched priority, from the PFC pause-duration counters) is computed, and
//! the PFC watchdog takes every read. `GET /metrics` serves the counters, the latest FITF and
//! the round's max and mean per port (the exposition `hawkmesh fitf` writes to a file), the
//! watchdog's storm state and the daemon's own read counters. Reads may be appended to a
//! JSON-lines file that `hawkmesh fitf --samples` turns into the study's report; it is
//! rotated to `<file>.1` at `record_max_mb`.
//!
//! Memory is bounded by the configuration: `window` reads per port, at most
//! [`MAX_SAMPLES`] in all. SIGTERM or Ctrl-C stops it after the current read.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hawkmesh_congestion::fitf::{pause_round, PauseSide};
use hawkmesh_congestion::plan::SourceError;
use hawkmesh_congestion::report;
use hawkmesh_congestion::sources::SonicPort;
use hawkmesh_congestion::{
    fitf_round, CounterSource, EthPort, EthtoolSource, FitfConfig, IbPort, PerfquerySource, PortId,
    PortKey, Round, Sample, SonicSource, Tier, Tool, Verdict, Watchdog, WatchdogConfig,
};
use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use hawkmesh_switch_agent::port_counters::{SwitchCounterSource, SwitchPort};
use serde::Deserialize;

/// The most reads kept in memory across all ports (ports × `window`).
pub const MAX_SAMPLES: usize = 200_000;

/// The daemon's configuration (TOML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchConfig {
    /// Where `GET /metrics` is served.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Time between two reads of a port, ms (the study: 100).
    #[serde(default = "default_spacing")]
    pub spacing_ms: u64,
    /// Reads per port kept for the round statistics (the study: 100).
    #[serde(default = "default_window")]
    pub window: usize,
    /// τ, ns per PortXmitWait tick (FDR: 22).
    #[serde(default = "default_tau")]
    pub tau_ns: f64,
    /// The PFC priorities whose paused fraction is computed and watched (lossless classes).
    #[serde(default = "default_priorities")]
    pub priorities: Vec<u8>,
    /// Append every read here (JSON lines, `hawkmesh fitf --samples` replays them).
    #[serde(default)]
    pub record: Option<PathBuf>,
    /// Rotate the record to `<record>.1` past this size, MB.
    #[serde(default = "default_record_max")]
    pub record_max_mb: u64,
    /// The PFC watchdog's times.
    #[serde(default)]
    pub watchdog: WatchdogSection,
    /// How the tools are run.
    #[serde(default)]
    pub tools: ToolsSection,
    /// InfiniBand ports read with `perfquery`.
    #[serde(default)]
    pub perfquery: Vec<IbPort>,
    /// RoCE host interfaces read with `ethtool -S`.
    #[serde(default)]
    pub ethtool: Vec<EthPort>,
    /// SONiC switches read with `sonic-db-cli`.
    #[serde(default)]
    pub sonic: Vec<SonicSwitch>,
    /// Tofino switches running hawkmesh's program, read over BF Runtime.
    #[serde(default)]
    pub tofino: Vec<TofinoSwitch>,
}

/// `[watchdog]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchdogSection {
    /// Paused without transmitting this long is a storm, ms (SONiC pfcwd: 200).
    #[serde(default = "default_pfcwd")]
    pub detection_ms: u64,
    /// No pause for this long restores a stormed queue, ms (SONiC pfcwd: 200).
    #[serde(default = "default_pfcwd")]
    pub restoration_ms: u64,
}

impl Default for WatchdogSection {
    fn default() -> Self {
        WatchdogSection {
            detection_ms: default_pfcwd(),
            restoration_ms: default_pfcwd(),
        }
    }
}

/// `[tools]`: each tool as a command line (program and leading arguments, e.g.
/// `["ssh", "sw1", "sonic-db-cli"]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSection {
    /// `perfquery`.
    #[serde(default = "perfquery")]
    pub perfquery: Vec<String>,
    /// `ibportstate` (the port's state).
    #[serde(default = "ibportstate")]
    pub ibportstate: Vec<String>,
    /// `ethtool`.
    #[serde(default = "ethtool")]
    pub ethtool: Vec<String>,
    /// `sonic-db-cli`.
    #[serde(default = "sonic_db_cli")]
    pub sonic_db_cli: Vec<String>,
    /// Where the interfaces' operational state is read (`<sysfs>/class/net/<if>/operstate`).
    #[serde(default = "sysfs")]
    pub sysfs: PathBuf,
    /// A tool still running after this long is killed and the read fails, ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

impl Default for ToolsSection {
    fn default() -> Self {
        ToolsSection {
            perfquery: perfquery(),
            ibportstate: ibportstate(),
            ethtool: ethtool(),
            sonic_db_cli: sonic_db_cli(),
            sysfs: sysfs(),
            timeout_ms: default_timeout(),
        }
    }
}

/// `[[sonic]]`: one SONiC switch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SonicSwitch {
    /// The switch's name in reports.
    pub node: String,
    /// Its tier.
    pub tier: Tier,
    /// Its ports.
    pub ports: Vec<SonicPort>,
    /// A command line for this switch alone (e.g. `["ssh", "leaf1", "sonic-db-cli"]`);
    /// default `[tools] sonic_db_cli`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

/// `[[tofino]]`: one Tofino switch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofinoSwitch {
    /// bf_switchd's BF Runtime address, `host:port` (port 50052).
    pub bfrt: String,
    /// The switch's name in reports.
    pub node: String,
    /// Its tier.
    pub tier: Tier,
    /// Its ports.
    pub ports: Vec<SwitchPort>,
    /// Device id.
    #[serde(default)]
    pub device_id: u32,
    /// BF Runtime client id: unique on the switch (the switch agent uses 1).
    #[serde(default = "default_client")]
    pub client_id: u32,
    /// The program name hawkmesh's program runs under.
    #[serde(default = "default_p4")]
    pub p4_name: String,
}

fn default_listen() -> String {
    "127.0.0.1:9466".into()
}
fn default_spacing() -> u64 {
    100
}
fn default_window() -> usize {
    100
}
fn default_tau() -> f64 {
    22.0
}
fn default_priorities() -> Vec<u8> {
    vec![3, 4]
}
fn default_record_max() -> u64 {
    64
}
fn default_pfcwd() -> u64 {
    200
}
fn perfquery() -> Vec<String> {
    vec!["perfquery".into()]
}
fn ibportstate() -> Vec<String> {
    vec!["ibportstate".into()]
}
fn ethtool() -> Vec<String> {
    vec!["ethtool".into()]
}
fn sonic_db_cli() -> Vec<String> {
    vec!["sonic-db-cli".into()]
}
fn sysfs() -> PathBuf {
    "/sys".into()
}
fn default_timeout() -> u64 {
    5_000
}
fn default_client() -> u32 {
    2
}
fn default_p4() -> String {
    "hawkmesh".into()
}

impl WatchConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> anyhow::Result<WatchConfig> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let c: WatchConfig =
            toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        c.check().with_context(|| format!("{}", path.display()))?;
        Ok(c)
    }

    fn ports(&self) -> usize {
        self.perfquery.len()
            + self.ethtool.len()
            + self.sonic.iter().map(|s| s.ports.len()).sum::<usize>()
            + self.tofino.iter().map(|s| s.ports.len()).sum::<usize>()
    }

    fn check(&self) -> anyhow::Result<()> {
        self.listen
            .parse::<std::net::SocketAddr>()
            .with_context(|| format!("listen: {:?} is not an address:port", self.listen))?;
        if !(1..=60_000).contains(&self.spacing_ms) {
            anyhow::bail!("spacing_ms: {} (allowed 1–60000)", self.spacing_ms);
        }
        if !(2..=10_000).contains(&self.window) {
            anyhow::bail!("window: {} reads (allowed 2–10000)", self.window);
        }
        if !(self.tau_ns.is_finite() && self.tau_ns > 0.0) {
            anyhow::bail!("tau_ns: {} (a positive number of ns)", self.tau_ns);
        }
        if let Some(p) = self.priorities.iter().find(|p| **p > 7) {
            anyhow::bail!("priorities: {p} (IEEE 802.1Qbb priorities are 0–7)");
        }
        if self.record_max_mb == 0 {
            anyhow::bail!("record_max_mb: 0 (at least 1)");
        }
        if !(1..=600_000).contains(&self.tools.timeout_ms) {
            anyhow::bail!(
                "tools.timeout_ms: {} (allowed 1–600000)",
                self.tools.timeout_ms
            );
        }
        for (name, cmd) in [
            ("perfquery", &self.tools.perfquery),
            ("ibportstate", &self.tools.ibportstate),
            ("ethtool", &self.tools.ethtool),
            ("sonic_db_cli", &self.tools.sonic_db_cli),
        ] {
            if cmd.is_empty() {
                anyhow::bail!("tools.{name}: an empty command line");
            }
        }
        for (i, s) in self.sonic.iter().enumerate() {
            if s.command.as_ref().is_some_and(Vec::is_empty) {
                anyhow::bail!("sonic[{i}].command: an empty command line");
            }
        }
        for (i, t) in self.tofino.iter().enumerate() {
            BfrtEndpoint::parse(&t.bfrt).map_err(|e| anyhow::anyhow!("tofino[{i}].bfrt: {e}"))?;
        }
        let ports = self.ports();
        if ports == 0 {
            anyhow::bail!("no ports: add [[perfquery]], [[ethtool]], [[sonic]] or [[tofino]]");
        }
        if ports * self.window > MAX_SAMPLES {
            anyhow::bail!(
                "{ports} ports × window {} = {} reads kept, more than {MAX_SAMPLES}: fewer ports per daemon or a smaller window",
                self.window,
                ports * self.window
            );
        }
        Ok(())
    }
}

fn tool(cmd: &[String], timeout: Duration) -> Tool {
    Tool::new(&cmd[0])
        .with_prefix(cmd[1..].iter().cloned())
        .with_timeout(timeout)
}

/// The configured sources, each with its ports.
fn sources(
    c: &WatchConfig,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Vec<Box<dyn CounterSource>>> {
    let timeout = Duration::from_millis(c.tools.timeout_ms);
    let mut out: Vec<Box<dyn CounterSource>> = Vec::new();
    if !c.perfquery.is_empty() {
        out.push(Box::new(PerfquerySource::new(
            tool(&c.tools.perfquery, timeout),
            tool(&c.tools.ibportstate, timeout),
            c.perfquery.clone(),
        )));
    }
    if !c.ethtool.is_empty() {
        out.push(Box::new(EthtoolSource::new(
            tool(&c.tools.ethtool, timeout),
            &c.tools.sysfs,
            c.ethtool.clone(),
        )));
    }
    for s in &c.sonic {
        let cmd = s.command.as_ref().unwrap_or(&c.tools.sonic_db_cli);
        out.push(Box::new(SonicSource::new(
            tool(cmd, timeout),
            s.node.clone(),
            s.tier.clone(),
            s.ports.clone(),
            c.priorities.clone(),
        )));
    }
    for (i, t) in c.tofino.iter().enumerate() {
        let parsed =
            BfrtEndpoint::parse(&t.bfrt).map_err(|e| anyhow::anyhow!("tofino[{i}].bfrt: {e}"))?;
        let endpoint = BfrtEndpoint {
            host: parsed.host,
            port: parsed.port,
            device_id: t.device_id,
            client_id: t.client_id,
            p4_name: t.p4_name.clone(),
        };
        let backend = BfrtBackend::connect(runtime.clone(), &endpoint)
            .with_context(|| format!("tofino[{i}] ({}, {})", t.node, t.bfrt))?;
        out.push(Box::new(SwitchCounterSource::new(
            backend,
            t.node.clone(),
            t.tier.clone(),
            t.ports.clone(),
        )));
    }
    Ok(out)
}

/// A port's reads and read outcomes.
#[derive(Default)]
struct PortState {
    samples: VecDeque<Sample>,
    reads: u64,
    errors: u64,
    up: Option<bool>,
    failing: bool,
}

/// What the sampler keeps between sweeps.
pub struct Watcher {
    cfg: FitfConfig,
    priorities: Vec<u8>,
    window: usize,
    ports: BTreeMap<PortKey, (PortId, PortState)>,
    watchdog: Watchdog,
    storms: BTreeMap<(PortKey, u8), bool>,
    storms_total: u64,
    sweeps: u64,
    overruns: u64,
    record: Option<Record>,
}

struct Record {
    path: PathBuf,
    max_bytes: u64,
    file: std::fs::File,
    bytes: u64,
    written: u64,
    failed: u64,
}

impl Record {
    fn open(path: &Path, max_bytes: u64) -> anyhow::Result<Record> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("record: opening {}", path.display()))?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Record {
            path: path.to_path_buf(),
            max_bytes,
            file,
            bytes,
            written: 0,
            failed: 0,
        })
    }

    fn append(&mut self, s: &Sample) {
        let mut line = match serde_json::to_string(s) {
            Ok(l) => l,
            Err(_) => {
                self.failed += 1;
                return;
            }
        };
        line.push('\n');
        if self.bytes + line.len() as u64 > self.max_bytes {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            let rotated = std::fs::rename(&self.path, &old).and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
            });
            match rotated {
                Ok(f) => {
                    self.file = f;
                    self.bytes = 0;
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "record: rotation failed");
                }
            }
        }
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => {
                self.bytes += line.len() as u64;
                self.written += 1;
            }
            Err(e) => {
                if self.failed == 0 {
                    tracing::warn!(path = %self.path.display(), error = %e, "record: write failed");
                }
                self.failed += 1;
            }
        }
    }
}

impl Watcher {
    /// A watcher for `config`'s ports (named by `ports`).
    pub fn new(config: &WatchConfig, ports: Vec<PortId>) -> anyhow::Result<Watcher> {
        let record = match &config.record {
            Some(p) => Some(Record::open(p, config.record_max_mb * 1_000_000)?),
            None => None,
        };
        let mut map = BTreeMap::new();
        for p in ports {
            if map
                .insert(p.key(), (p.clone(), PortState::default()))
                .is_some()
            {
                anyhow::bail!("port {p} is configured twice");
            }
        }
        Ok(Watcher {
            cfg: FitfConfig {
                tau_ns: config.tau_ns,
                ..FitfConfig::default()
            },
            priorities: config.priorities.clone(),
            window: config.window,
            ports: map,
            watchdog: Watchdog::new(WatchdogConfig {
                detection_ns: config.watchdog.detection_ms * 1_000_000,
                restoration_ns: config.watchdog.restoration_ms * 1_000_000,
                priorities: config.priorities.clone(),
            }),
            storms: BTreeMap::new(),
            storms_total: 0,
            sweeps: 0,
            overruns: 0,
            record,
        })
    }

    /// Takes one read of `port` (or its failure).
    pub fn observe(&mut self, port: &PortId, read: Result<Sample, SourceError>) {
        let Some((_, state)) = self.ports.get_mut(&port.key()) else {
            return;
        };
        match read {
            Ok(s) => {
                if state.failing {
                    tracing::info!(%port, "reads again");
                }
                state.failing = false;
                state.reads += 1;
                if let Some(r) = self.record.as_mut() {
                    r.append(&s);
                }
                for v in self.watchdog.observe(&s) {
                    match v {
                        Verdict::Storm {
                            port,
                            priority,
                            since_ns,
                            ..
                        } => {
                            tracing::warn!(%port, priority, since_ns, "PFC storm: paused without transmitting");
                            self.storms.insert((port.key(), priority), true);
                            self.storms_total += 1;
                        }
                        Verdict::Restored { port, priority, .. } => {
                            tracing::info!(%port, priority, "PFC storm over");
                            self.storms.insert((port.key(), priority), false);
                        }
                        Verdict::Deadlock { .. } => {}
                    }
                }
                if state.samples.len() == self.window {
                    state.samples.pop_front();
                }
                state.samples.push_back(s);
            }
            Err(e) => {
                state.errors += 1;
                if !state.failing {
                    tracing::warn!(%port, error = %e, "read failed");
                }
                state.failing = true;
            }
        }
    }

    /// Records `port`'s link state.
    pub fn set_up(&mut self, port: &PortId, up: Result<bool, SourceError>) {
        if let Some((_, state)) = self.ports.get_mut(&port.key()) {
            match up {
                Ok(u) => state.up = Some(u),
                Err(e) => {
                    state.errors += 1;
                    if !state.failing {
                        tracing::warn!(%port, error = %e, "link state unknown");
                    }
                    state.up = None;
                }
            }
        }
    }

    /// The rounds of every port over its window: FITF where PortXmitWait is read, the
    /// paused fraction of each watched priority where pause durations are.
    pub fn rounds(&self) -> Vec<Round> {
        let mut out = Vec::new();
        for (id, state) in self.ports.values() {
            let samples: Vec<Sample> = state.samples.iter().cloned().collect();
            if samples.len() < 2 {
                continue;
            }
            if samples.iter().any(|s| s.xmit_wait.is_some()) {
                match fitf_round(&samples, &self.cfg) {
                    Ok(r) => out.push(r),
                    Err(e) => tracing::debug!(port = %id, error = %e, "no FITF round"),
                }
            }
            for &p in &self.priorities {
                if samples
                    .iter()
                    .any(|s| s.pfc(p).is_some_and(|c| c.rx_pause_duration_us.is_some()))
                {
                    if let Ok(r) = pause_round(&samples, p, PauseSide::Rx, &self.cfg) {
                        out.push(r);
                    }
                }
            }
        }
        out
    }

    /// The Prometheus exposition.
    pub fn render(&self) -> String {
        let latest: Vec<Sample> = self
            .ports
            .values()
            .filter_map(|(_, s)| s.samples.back().cloned())
            .collect();
        let mut text = report::prometheus(&latest, &self.rounds());
        let label = |p: &PortId| {
            format!(
                "node=\"{}\",port=\"{}\",tier=\"{}\",dir=\"{}\"",
                report::escape_label(&p.node),
                p.port,
                report::escape_label(&p.tier.to_string()),
                p.dir
            )
        };
        let mut family = |name: &str, help: &str, kind: &str, lines: Vec<String>| {
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for l in lines {
                let _ = writeln!(text, "{name}{l}");
            }
        };
        let per_port = |f: &dyn Fn(&PortState) -> Option<String>| -> Vec<String> {
            self.ports
                .values()
                .filter_map(|(id, s)| f(s).map(|v| format!("{{{}}} {v}", label(id))))
                .collect()
        };
        family(
            "hawkmesh_fitf_reads_total",
            "Reads of the port's counters.",
            "counter",
            per_port(&|s| Some(s.reads.to_string())),
        );
        family(
            "hawkmesh_fitf_read_errors_total",
            "Failed reads of the port's counters or link state.",
            "counter",
            per_port(&|s| Some(s.errors.to_string())),
        );
        family(
            "hawkmesh_port_up",
            "The port's link state (1 up), as its source last reported it.",
            "gauge",
            per_port(&|s| s.up.map(|u| u8::from(u).to_string())),
        );
        let storms: Vec<String> = self
            .storms
            .iter()
            .filter_map(|((k, prio), on)| {
                self.ports.get(k).map(|(id, _)| {
                    format!("{{{},priority=\"{prio}\"}} {}", label(id), u8::from(*on))
                })
            })
            .collect();
        family(
            "hawkmesh_pfcwd_storm",
            "1 while the queue is in a PFC storm (paused without transmitting for the detection time; SONiC pfcwd).",
            "gauge",
            storms,
        );
        family(
            "hawkmesh_pfcwd_storms_total",
            "PFC storms declared.",
            "counter",
            vec![format!(" {}", self.storms_total)],
        );
        family(
            "hawkmesh_fitf_sweeps_total",
            "Sweeps over every port.",
            "counter",
            vec![format!(" {}", self.sweeps)],
        );
        family(
            "hawkmesh_fitf_sweep_overruns_total",
            "Sweeps that took longer than spacing_ms (the next one started late).",
            "counter",
            vec![format!(" {}", self.overruns)],
        );
        if let Some(r) = &self.record {
            family(
                "hawkmesh_fitf_recorded_samples_total",
                "Reads appended to the record file.",
                "counter",
                vec![format!(" {}", r.written)],
            );
            family(
                "hawkmesh_fitf_record_errors_total",
                "Reads that could not be appended to the record file.",
                "counter",
                vec![format!(" {}", r.failed)],
            );
        }
        text
    }
}

/// Runs the daemon until SIGTERM or Ctrl-C.
pub fn run(path: &Path) -> anyhow::Result<()> {
    let config = WatchConfig::load(path)?;
    // One worker: the HTTP endpoint and the BF Runtime connections are light; the sweep
    // runs on its own thread (the tools block).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let mut sources = sources(&config, runtime.handle())?;
    let ports: Vec<PortId> = sources.iter().flat_map(|s| s.ports()).collect();
    let mut watcher = Watcher::new(&config, ports)?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&config.listen))
        .with_context(|| format!("listen: binding {}", config.listen))?;
    let local = listener.local_addr().context("listen")?;
    let text = Arc::new(Mutex::new(watcher.render()));
    let stop = Arc::new(AtomicBool::new(false));
    let served = text.clone();
    let server_stop = stop.clone();
    let server = runtime.spawn(async move {
        use axum::http::header;
        use axum::routing::get;
        let app = axum::Router::new().route(
            "/metrics",
            get(move || {
                let body = served.lock().map(|t| t.clone()).unwrap_or_default();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        body,
                    )
                }
            }),
        );
        let shutdown = async move {
            while !server_stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    });
    let signal_stop = stop.clone();
    runtime.spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = term => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        signal_stop.store(true, Ordering::Relaxed);
    });
    tracing::info!(
        %local,
        ports = watcher.ports.len(),
        spacing_ms = config.spacing_ms,
        "serving /metrics"
    );
    eprintln!(
        "hawkmesh fitf: watching {} ports every {} ms; metrics at http://{local}/metrics",
        watcher.ports.len(),
        config.spacing_ms
    );
    let spacing = Duration::from_millis(config.spacing_ms);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // The link state every 50 sweeps (ibportstate and sonic-db-cli are processes).
        let check_state = watcher.sweeps % 50 == 0;
        for source in sources.iter_mut() {
            for port in source.ports() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if check_state {
                    let up = source.is_up(&port);
                    watcher.set_up(&port, up);
                }
                let read = source.read(&port);
                watcher.observe(&port, read);
            }
        }
        watcher.sweeps += 1;
        let rendered = watcher.render();
        if let Ok(mut t) = text.lock() {
            *t = rendered;
        }
        next += spacing;
        let now = Instant::now();
        if next < now {
            watcher.overruns += 1;
            next = now;
        }
        while !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    runtime
        .block_on(server)
        .context("the metrics server")?
        .context("the metrics server")?;
    eprintln!("hawkmesh fitf: stopped after {} sweeps", watcher.sweeps);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_loads_with_every_source() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hw-lab/fitf-watch.toml");
        let c = WatchConfig::load(&path).expect("hw-lab/fitf-watch.toml");
        assert_eq!(
            (
                c.perfquery.len(),
                c.ethtool.len(),
                c.sonic.len(),
                c.tofino.len()
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(c.ports(), 6);
        assert_eq!((c.spacing_ms, c.window), (100, 100));
        assert_eq!(c.tofino[0].client_id, 2, "not the switch agent's client");
    }

    #[test]
    fn too_many_reads_kept_are_refused() {
        let mut text = String::from("window = 10000\n");
        for i in 0..21 {
            text.push_str(&format!(
                "[[ethtool]]\nifname = \"e{i}\"\nnode = \"h\"\nport = {i}\ntier = \"host\"\ndir = \"up\"\n"
            ));
        }
        let c: WatchConfig = toml::from_str(&text).expect("parses");
        let e = c.check().expect_err("210,000 reads").to_string();
        assert!(e.contains("21 ports") && e.contains("200000"), "{e}");
    }

    #[test]
    fn a_window_keeps_its_last_reads_and_a_port_configured_twice_is_refused() {
        let c: WatchConfig = toml::from_str(
            "window = 3\n[[ethtool]]\nifname = \"e0\"\nnode = \"h\"\nport = 1\ntier = \"host\"\ndir = \"up\"\n",
        )
        .expect("parses");
        let id = PortId::new("h", 1, Tier::Host, hawkmesh_congestion::Direction::Up);
        let mut w = Watcher::new(&c, vec![id.clone()]).expect("watcher");
        for t in 0..10u64 {
            let mut s = Sample::new(id.clone(), t * 1_000_000, 0);
            s.pfc[3].rx_pause_duration_us = Some(t * 250);
            w.observe(&id, Ok(s));
        }
        let state = &w.ports[&id.key()].1;
        assert_eq!(state.samples.len(), 3);
        assert_eq!(state.reads, 10);
        let rounds = w.rounds();
        assert_eq!(rounds.len(), 1, "the paused fraction of priority 3");
        assert!((rounds[0].stats.mean - 0.25).abs() < 1e-9);
        assert!(Watcher::new(&c, vec![id.clone(), id]).is_err());
    }
}
