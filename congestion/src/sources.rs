//! Counter sources of real fabrics: each runs the device's own tool with
//! [`std::process::Command`] and parses its output with [`crate::parse`].
//!
//! - [`PerfquerySource`] (InfiniBand): `perfquery -x <lid> <port>` (PortCountersExtended,
//!   64-bit PortXmitWait) per read, falling back to plain `perfquery <lid> <port>`
//!   (PortCounters, 32-bit and saturating) for a port whose PMA refuses `-x` or whose
//!   extended attribute has no PortXmitWait; `perfquery [-x] -R <lid> <port>` for the study's
//!   reset (Yellowstone §III-B step iv); operational state from `ibportstate <lid> <port>`
//!   (`LinkState: Active`).
//! - [`EthtoolSource`] (RoCE hosts): `ethtool -S <ifname>` with mlx5's per-priority PFC
//!   counters (IEEE 802.1Qbb frames, pause durations in µs, per-priority transmissions), the
//!   operational state from `/sys/class/net/<ifname>/operstate`. NIC counters cannot be
//!   cleared from user space: a reset is a baseline kept here.
//! - [`SonicSource`] (SONiC switches): COUNTERS_DB through `sonic-db-cli` — the port's SAI
//!   object from `COUNTERS_DB HGET COUNTERS_PORT_NAME_MAP <Ethernet0>`, its stats from
//!   `COUNTERS_DB HGETALL COUNTERS:<oid>` (`SAI_PORT_STAT_PFC_<p>_RX_PKTS`, `…_PAUSE_DURATION_US`,
//!   saiport.h), each watched priority's queue (`COUNTERS_QUEUE_NAME_MAP <Ethernet0>:<p>`,
//!   `SAI_QUEUE_STAT_PACKETS`) as that priority's transmissions, as SONiC's own pfcwd reads
//!   them (SONiC pfcwd HLD), and the state from `APPL_DB HGET PORT_TABLE:<Ethernet0>
//!   oper_status`. The switch's counters are shared with every other user: we never clear
//!   them; a reset is a baseline kept here.
//! - Tofino: the switch agent already reads the MAC counters through BF Runtime — the
//!   `$PORT_STAT` table keyed by `$DEV_PORT` (`hawkmesh_switch_agent::bfrt_backend`,
//!   `SwitchBackend::port_counters`, feature `bfrt`): `$Pri{N}FramesReceived` and
//!   `$ReceivePri{N}Pause1USCount` are this crate's `rx_pause` and `rx_pause_duration_us`,
//!   `$FramesTransmittedOK` the port's transmissions (per port, not per priority). The
//!   `CounterSource` over it is in the switch agent (`hawkmesh_switch_agent::port_counters`;
//!   this crate depends on no agent).
//!
//! Every tool is a [`Tool`]: a program (configurable, so an operator can point it at a
//! wrapper such as `ssh switch1 sonic-db-cli`, and tests at a recorded-output double), fixed
//! leading arguments, and a timeout after which a hanging process is killed (5 s by
//! default). Errors name the port, the command line and, for unreadable output, the line.
//! Each read stamps tᵠ and tᵖ (Yellowstone Eq. 2–3) with the wall clock around its
//! commands, so [`CounterSource::stamps_time`] is true.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::parse::{self, ParseError, PerfKind};
use crate::plan::{Clock, CounterSource, SourceError, SystemClock};
use crate::sample::{Direction, PfcCounters, PortId, PortKey, Sample, Tier, PRIORITIES};

/// The default time a tool may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most output read from one run (a runaway tool is cut off, then times out).
const MAX_OUTPUT: u64 = 16 << 20;

/// How to run one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    /// The program (a name looked up in `PATH`, or a path).
    pub program: PathBuf,
    /// Arguments put before the tool's own (e.g. `program = "ssh"`,
    /// `prefix = ["sw1", "sonic-db-cli"]`).
    pub prefix: Vec<String>,
    /// Killed when not finished after this long.
    pub timeout: Duration,
}

impl Tool {
    /// `program` with no leading arguments and the default timeout.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Tool {
            program: program.into(),
            prefix: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// With leading arguments.
    pub fn with_prefix(mut self, prefix: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.prefix = prefix.into_iter().map(Into::into).collect();
        self
    }

    /// With a timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line of a run with `args`, as an operator would type it.
    pub fn command_line(&self, args: &[String]) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.prefix.iter().cloned())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the tool with `args`; its standard output when it exits with success.
    pub fn run(&self, args: &[String]) -> Result<String, RunError> {
        let mut child = Command::new(&self.program)
            .args(&self.prefix)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| RunError::Spawn(e.to_string()))?;
        let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
        let pipes: [(bool, Option<Box<dyn Read + Send>>); 2] = [
            (
                true,
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
            (
                false,
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
        ];
        let mut pending = 0;
        for (is_out, pipe) in pipes {
            let Some(pipe) = pipe else { continue };
            let tx = tx.clone();
            // The readers are detached: after a timeout a grandchild may still hold the pipe.
            let spawned = std::thread::Builder::new()
                .name("tool-output".into())
                .spawn(move || {
                    let mut buf = Vec::new();
                    let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut buf);
                    let _ = tx.send((is_out, buf));
                });
            if let Err(e) = spawned {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Spawn(format!("output reader: {e}")));
            }
            pending += 1;
        }
        drop(tx);
        let deadline = Instant::now() + self.timeout;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((true, b)) => stdout = b,
                Ok((false, b)) => stderr = b,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RunError::Timeout(self.timeout));
                }
            }
            pending -= 1;
        }
        // Both pipes are closed: the process has exited, or is about to.
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RunError::Timeout(self.timeout));
                }
                Err(e) => {
                    let _ = child.kill();
                    return Err(RunError::Spawn(e.to_string()));
                }
            }
        };
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        if status.success() {
            Ok(stdout)
        } else {
            let stderr = String::from_utf8_lossy(&stderr);
            let said = stderr
                .lines()
                .chain(stdout.lines())
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string();
            Err(RunError::Failed {
                status: status
                    .code()
                    .map_or_else(|| "a signal".to_string(), |c| format!("status {c}")),
                said,
            })
        }
    }
}

/// Why a tool did not give its output.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The program could not be started.
    #[error("could not start: {0}")]
    Spawn(String),
    /// It did not finish in time and was killed.
    #[error("killed after {0:?} without finishing")]
    Timeout(Duration),
    /// It exited with a failure.
    #[error("exited with {status}: {said:?}")]
    Failed {
        /// The exit status (or the signal).
        status: String,
        /// The first non-empty line of its standard error (else of its output).
        said: String,
    },
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A failed run of `tool` for `port`, as a source error.
fn run_failed(port: &str, tool: &Tool, argv: &[String], e: &RunError) -> SourceError {
    SourceError::Other(format!("port {port}: `{}`: {e}", tool.command_line(argv)))
}

/// Unreadable output of `tool` for `port`, with the offending line.
fn parse_failed(
    port: &str,
    tool: &Tool,
    argv: &[String],
    output: &str,
    e: &ParseError,
) -> SourceError {
    let line = e
        .line
        .and_then(|n| output.lines().nth(n.saturating_sub(1)))
        .map(|l| format!(" (output line: {:?})", l.trim()))
        .unwrap_or_default();
    SourceError::Other(format!(
        "port {port}: `{}`: {e}{line}",
        tool.command_line(argv)
    ))
}

/// `now` less `base`, per counter; a counter that went below its baseline was cleared since
/// (driver reload, `sonic-clear pfccounters`) and counts from zero.
fn since(now: Option<u64>, base: Option<u64>) -> Option<u64> {
    let n = now?;
    Some(base.and_then(|b| n.checked_sub(b)).unwrap_or(n))
}

/// The rise of every counter in `now` since `base` (a source's reset when the device's
/// counters are shared and never cleared). A counter below its baseline was cleared by
/// someone else: its current value is the rise since.
pub fn pfc_since(
    now: &[PfcCounters; PRIORITIES],
    base: Option<&[PfcCounters; PRIORITIES]>,
) -> [PfcCounters; PRIORITIES] {
    let Some(base) = base else { return *now };
    let mut out = *now;
    for (o, (n, b)) in out.iter_mut().zip(now.iter().zip(base)) {
        o.rx_pause = since(n.rx_pause, b.rx_pause);
        o.tx_pause = since(n.tx_pause, b.tx_pause);
        o.rx_pause_duration_us = since(n.rx_pause_duration_us, b.rx_pause_duration_us);
        o.tx_pause_duration_us = since(n.tx_pause_duration_us, b.tx_pause_duration_us);
        o.rx_pause_transition = since(n.rx_pause_transition, b.rx_pause_transition);
        o.tx_pkts = since(n.tx_pkts, b.tx_pkts);
        o.tx_bytes = since(n.tx_bytes, b.tx_bytes);
    }
    out
}

// ---------------------------------------------------------------------------------------
// InfiniBand: perfquery

/// An InfiniBand port to sample: its LID and port number (what `perfquery` addresses), and
/// the name, tier and direction it is reported under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IbPort {
    /// The node's LID.
    pub lid: u32,
    /// The port number.
    pub port: u32,
    /// The node's name (e.g. from `ibnetdiscover`).
    pub node: String,
    /// The node's tier.
    pub tier: Tier,
    /// The link's direction.
    pub dir: Direction,
}

impl IbPort {
    /// The port as samples name it.
    pub fn id(&self) -> PortId {
        PortId::new(self.node.clone(), self.port, self.tier.clone(), self.dir)
    }
}

/// InfiniBand ports read with infiniband-diags `perfquery` (see the module doc).
#[derive(Debug)]
pub struct PerfquerySource {
    perfquery: Tool,
    ibportstate: Tool,
    ports: Vec<IbPort>,
    /// Ports whose PMA refused PortCountersExtended (or has no PortXmitWait in it).
    basic_only: BTreeSet<PortKey>,
    clock: SystemClock,
}

impl PerfquerySource {
    /// A source over `ports`, running `perfquery` and `ibportstate` as given.
    pub fn new(perfquery: Tool, ibportstate: Tool, ports: Vec<IbPort>) -> Self {
        PerfquerySource {
            perfquery,
            ibportstate,
            ports,
            basic_only: BTreeSet::new(),
            clock: SystemClock,
        }
    }

    fn find(&self, port: &PortId) -> Result<&IbPort, SourceError> {
        self.ports
            .iter()
            .find(|p| p.node == port.node && p.port == port.port)
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }

    /// Whether `port` is read with plain PortCounters (its PMA refused `-x`).
    pub fn is_basic_only(&self, port: &PortId) -> bool {
        self.basic_only.contains(&port.key())
    }

    /// Runs perfquery (`-x` when `extended`) on `ib`; the block of the port with
    /// PortXmitWait, or why not.
    fn query(
        &self,
        ib: &IbPort,
        extended: bool,
        t0: u64,
    ) -> Result<Result<Sample, SourceError>, SourceError> {
        let name = ib.id().to_string();
        let mut argv = Vec::new();
        if extended {
            argv.push("-x".to_string());
        }
        argv.extend([ib.lid.to_string(), ib.port.to_string()]);
        let out = match self.perfquery.run(&argv) {
            Ok(out) => out,
            Err(e @ RunError::Failed { .. }) if extended => {
                return Ok(Err(run_failed(&name, &self.perfquery, &argv, &e)))
            }
            Err(e) => return Err(run_failed(&name, &self.perfquery, &argv, &e)),
        };
        let t1 = self.clock.now_ns();
        let blocks = parse::perfquery(&out)
            .map_err(|e| parse_failed(&name, &self.perfquery, &argv, &out, &e))?;
        let want = if extended {
            PerfKind::Extended
        } else {
            PerfKind::Basic
        };
        let Some(block) = blocks
            .iter()
            .find(|b| b.kind == want && b.lid == ib.lid && b.port == Some(ib.port))
        else {
            return Err(SourceError::Other(format!(
                "port {name}: `{}`: no {want:?} block of Lid {} port {} in the output",
                self.perfquery.command_line(&argv),
                ib.lid,
                ib.port
            )));
        };
        match block.to_sample(ib.id(), t0, t1.saturating_sub(t0)) {
            Ok(s) => Ok(Ok(s)),
            Err(e) if extended => Ok(Err(parse_failed(&name, &self.perfquery, &argv, &out, &e))),
            Err(e) => Err(parse_failed(&name, &self.perfquery, &argv, &out, &e)),
        }
    }
}

impl CounterSource for PerfquerySource {
    fn ports(&self) -> Vec<PortId> {
        self.ports.iter().map(IbPort::id).collect()
    }

    /// `ibportstate <lid> <port>` (its default operation, `query`): up when `LinkState` is
    /// `Active`.
    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        let ib = self.find(port)?;
        let argv = vec![ib.lid.to_string(), ib.port.to_string()];
        let out = self
            .ibportstate
            .run(&argv)
            .map_err(|e| run_failed(&port.to_string(), &self.ibportstate, &argv, &e))?;
        for line in out.lines() {
            let Some((name, value)) = line.trim().split_once(':') else {
                continue;
            };
            if name.trim() == "LinkState" {
                return Ok(value.trim_start_matches('.').trim() == "Active");
            }
        }
        Err(SourceError::Other(format!(
            "port {port}: `{}`: no \"LinkState:\" line in the output",
            self.ibportstate.command_line(&argv)
        )))
    }

    /// `perfquery -R <lid> <port>` (`-x -R` when the port is read extended): clears the
    /// counters, as the study does before each round.
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        let ib = self.find(port)?;
        let mut argv = Vec::new();
        if !self.basic_only.contains(&port.key()) {
            argv.push("-x".to_string());
        }
        argv.extend(["-R".to_string(), ib.lid.to_string(), ib.port.to_string()]);
        self.perfquery
            .run(&argv)
            .map(|_| ())
            .map_err(|e| run_failed(&port.to_string(), &self.perfquery, &argv, &e))
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let ib = self.find(port)?.clone();
        let key = port.key();
        if !self.basic_only.contains(&key) {
            let t0 = self.clock.now_ns();
            match self.query(&ib, true, t0)? {
                Ok(sample) => return Ok(sample),
                // The PMA refused PortCountersExtended, or it has no PortXmitWait: this
                // port is read with PortCounters from now on.
                Err(_) => {
                    self.basic_only.insert(key);
                }
            }
        }
        let t0 = self.clock.now_ns();
        self.query(&ib, false, t0)?
    }

    fn stamps_time(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------
// RoCE hosts: ethtool -S

/// A host interface to sample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EthPort {
    /// The Linux interface (e.g. `enp65s0f0np0`).
    pub ifname: String,
    /// The host's name.
    pub node: String,
    /// The port number reported (e.g. the NIC's port index).
    pub port: u32,
    /// The node's tier (normally [`Tier::Host`]).
    pub tier: Tier,
    /// The link's direction (normally [`Direction::Up`]).
    pub dir: Direction,
}

impl EthPort {
    /// The port as samples name it.
    pub fn id(&self) -> PortId {
        PortId::new(self.node.clone(), self.port, self.tier.clone(), self.dir)
    }
}

/// RoCE host interfaces read with `ethtool -S` (mlx5 per-priority PFC counters).
#[derive(Debug)]
pub struct EthtoolSource {
    ethtool: Tool,
    sysfs: PathBuf,
    ports: Vec<EthPort>,
    baseline: BTreeMap<PortKey, [PfcCounters; PRIORITIES]>,
    clock: SystemClock,
}

impl EthtoolSource {
    /// A source over `ports`, running `ethtool` as given and reading the operational state
    /// under `sysfs` (`/sys` on a host).
    pub fn new(ethtool: Tool, sysfs: impl Into<PathBuf>, ports: Vec<EthPort>) -> Self {
        EthtoolSource {
            ethtool,
            sysfs: sysfs.into(),
            ports,
            baseline: BTreeMap::new(),
            clock: SystemClock,
        }
    }

    fn find(&self, port: &PortId) -> Result<&EthPort, SourceError> {
        self.ports
            .iter()
            .find(|p| p.node == port.node && p.port == port.port)
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }

    fn raw(&self, eth: &EthPort) -> Result<[PfcCounters; PRIORITIES], SourceError> {
        let name = eth.id().to_string();
        let argv = vec!["-S".to_string(), eth.ifname.clone()];
        let out = self
            .ethtool
            .run(&argv)
            .map_err(|e| run_failed(&name, &self.ethtool, &argv, &e))?;
        let pfc = parse::ethtool_pfc(&out)
            .map_err(|e| parse_failed(&name, &self.ethtool, &argv, &out, &e))?;
        if pfc.iter().all(PfcCounters::is_empty) {
            return Err(SourceError::Other(format!(
                "port {name}: `{}`: no per-priority PFC statistics (rx_prio<N>_pause…) in the \
                 output: not an mlx5-style driver, or PFC counters unsupported",
                self.ethtool.command_line(&argv)
            )));
        }
        Ok(pfc)
    }
}

/// The operational state in `<root>/class/net/<ifname>/operstate` (`up`, `down`,
/// `lowerlayerdown`, …).
fn operstate(root: &Path, ifname: &str, port: &PortId) -> Result<bool, SourceError> {
    if ifname.is_empty() || ifname.contains('/') || ifname == "." || ifname == ".." {
        return Err(SourceError::Other(format!(
            "port {port}: bad interface name {ifname:?}"
        )));
    }
    let path = root.join("class/net").join(ifname).join("operstate");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| SourceError::Other(format!("port {port}: {}: {e}", path.display())))?;
    Ok(text.trim() == "up")
}

impl CounterSource for EthtoolSource {
    fn ports(&self) -> Vec<PortId> {
        self.ports.iter().map(EthPort::id).collect()
    }

    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        let eth = self.find(port)?;
        operstate(&self.sysfs, &eth.ifname, port)
    }

    /// NIC counters are not cleared: the current values become the baseline.
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        let eth = self.find(port)?.clone();
        let now = self.raw(&eth)?;
        self.baseline.insert(port.key(), now);
        Ok(())
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let eth = self.find(port)?.clone();
        let t0 = self.clock.now_ns();
        let now = self.raw(&eth)?;
        let t1 = self.clock.now_ns();
        let mut s = Sample::new(eth.id(), t0, t1.saturating_sub(t0));
        s.pfc = pfc_since(&now, self.baseline.get(&port.key()));
        Ok(s)
    }

    fn stamps_time(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------
// SONiC: COUNTERS_DB through sonic-db-cli

/// A SONiC front-panel port to sample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SonicPort {
    /// The SONiC port name (`Ethernet0`).
    pub name: String,
    /// The port number reported.
    pub port: u32,
    /// The link's direction.
    pub dir: Direction,
}

/// One SONiC switch's ports read from its COUNTERS_DB with `sonic-db-cli`.
#[derive(Debug)]
pub struct SonicSource {
    cli: Tool,
    node: String,
    tier: Tier,
    ports: Vec<SonicPort>,
    /// The priorities whose queue transmissions are read (SONiC's lossless 3 and 4).
    queue_priorities: Vec<u8>,
    port_oids: BTreeMap<String, String>,
    queue_oids: BTreeMap<(String, u8), Option<String>>,
    baseline: BTreeMap<PortKey, [PfcCounters; PRIORITIES]>,
    clock: SystemClock,
}

/// Parses `sonic-db-cli … HGETALL` output: the Python-style dictionary the tool prints,
/// `{'field': 'value', …}` (`{}` when the key does not exist).
pub fn hgetall_dict(text: &str) -> Result<BTreeMap<String, String>, ParseError> {
    let err = |reason: String| ParseError {
        format: parse::Format::CountersDb,
        line: Some(1),
        field: None,
        reason,
    };
    let t = text.trim();
    let inner = t
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| err(format!("expected {{'field': 'value', …}}, got {t:?}")))?;
    let mut out = BTreeMap::new();
    let mut rest = inner.trim_start();
    let quoted = |s: &str| -> Option<(String, usize)> {
        let q = s.chars().next().filter(|&c| c == '\'' || c == '"')?;
        let body = &s[1..];
        let end = body.find(q)?;
        Some((body[..end].to_string(), end + 2))
    };
    while !rest.is_empty() {
        let (key, used) =
            quoted(rest).ok_or_else(|| err(format!("expected a quoted field at {rest:?}")))?;
        rest = rest[used..].trim_start();
        rest = rest
            .strip_prefix(':')
            .ok_or_else(|| err(format!("expected ':' after {key:?}")))?
            .trim_start();
        let (value, used) = quoted(rest)
            .ok_or_else(|| err(format!("expected a quoted value of {key:?} at {rest:?}")))?;
        rest = rest[used..].trim_start();
        out.insert(key, value);
        match rest.strip_prefix(',') {
            Some(r) => rest = r.trim_start(),
            None if rest.is_empty() => {}
            None => return Err(err(format!("expected ',' or '}}' at {rest:?}"))),
        }
    }
    Ok(out)
}

impl SonicSource {
    /// A source over switch `node`'s `ports`, running `sonic-db-cli` as given, reading the
    /// transmissions of the queues of `queue_priorities`.
    pub fn new(
        cli: Tool,
        node: impl Into<String>,
        tier: Tier,
        ports: Vec<SonicPort>,
        queue_priorities: Vec<u8>,
    ) -> Self {
        SonicSource {
            cli,
            node: node.into(),
            tier,
            ports,
            queue_priorities: queue_priorities
                .into_iter()
                .filter(|&p| usize::from(p) < PRIORITIES)
                .collect(),
            port_oids: BTreeMap::new(),
            queue_oids: BTreeMap::new(),
            baseline: BTreeMap::new(),
            clock: SystemClock,
        }
    }

    fn id(&self, p: &SonicPort) -> PortId {
        PortId::new(self.node.clone(), p.port, self.tier.clone(), p.dir)
    }

    fn find(&self, port: &PortId) -> Result<SonicPort, SourceError> {
        if port.node != self.node {
            return Err(SourceError::UnknownPort(port.to_string()));
        }
        self.ports
            .iter()
            .find(|p| p.port == port.port)
            .cloned()
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }

    fn cli(&self, port: &PortId, argv: &[String]) -> Result<String, SourceError> {
        self.cli
            .run(argv)
            .map_err(|e| run_failed(&port.to_string(), &self.cli, argv, &e))
    }

    /// `HGET`: the value, `None` when the field does not exist (an empty line, or `None`
    /// from the older Python tool).
    fn hget(
        &self,
        port: &PortId,
        db: &str,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, SourceError> {
        let out = self.cli(port, &args(&[db, "HGET", key, field]))?;
        let v = out.trim();
        Ok((!v.is_empty() && v != "None").then(|| v.to_string()))
    }

    fn hgetall(&self, port: &PortId, key: &str) -> Result<BTreeMap<String, String>, SourceError> {
        let argv = args(&["COUNTERS_DB", "HGETALL", key]);
        let out = self.cli(port, &argv)?;
        hgetall_dict(&out).map_err(|e| parse_failed(&port.to_string(), &self.cli, &argv, &out, &e))
    }

    fn port_oid(&mut self, port: &PortId, name: &str) -> Result<String, SourceError> {
        if let Some(oid) = self.port_oids.get(name) {
            return Ok(oid.clone());
        }
        let oid = self
            .hget(port, "COUNTERS_DB", "COUNTERS_PORT_NAME_MAP", name)?
            .ok_or_else(|| {
                SourceError::Other(format!(
                    "port {port}: `{}`: no {name} in COUNTERS_PORT_NAME_MAP",
                    self.cli.command_line(&args(&[
                        "COUNTERS_DB",
                        "HGET",
                        "COUNTERS_PORT_NAME_MAP",
                        name
                    ]))
                ))
            })?;
        self.port_oids.insert(name.to_string(), oid.clone());
        Ok(oid)
    }

    fn queue_oid(
        &mut self,
        port: &PortId,
        name: &str,
        prio: u8,
    ) -> Result<Option<String>, SourceError> {
        let k = (name.to_string(), prio);
        if let Some(oid) = self.queue_oids.get(&k) {
            return Ok(oid.clone());
        }
        let oid = self.hget(
            port,
            "COUNTERS_DB",
            "COUNTERS_QUEUE_NAME_MAP",
            &format!("{name}:{prio}"),
        )?;
        self.queue_oids.insert(k, oid.clone());
        Ok(oid)
    }

    /// The port's counters as COUNTERS_DB holds them now.
    fn raw(&mut self, port: &PortId) -> Result<[PfcCounters; PRIORITIES], SourceError> {
        let sp = self.find(port)?;
        let oid = self.port_oid(port, &sp.name)?;
        let key = format!("COUNTERS:{oid}");
        let stats = self.hgetall(port, &key)?;
        if stats.is_empty() {
            return Err(SourceError::Other(format!(
                "port {port}: `{}`: empty: the flex counters of {} are not polled",
                self.cli
                    .command_line(&args(&["COUNTERS_DB", "HGETALL", &key])),
                sp.name
            )));
        }
        // Rebuild the dump shape parse::counters_db reads.
        let mut root = Map::new();
        root.insert(
            "COUNTERS_PORT_NAME_MAP".into(),
            json!({ sp.name.clone(): oid }),
        );
        root.insert(key, json!(stats));
        let mut queues = Map::new();
        for prio in self.queue_priorities.clone() {
            let Some(qoid) = self.queue_oid(port, &sp.name, prio)? else {
                continue;
            };
            let qkey = format!("COUNTERS:{qoid}");
            let qstats = self.hgetall(port, &qkey)?;
            queues.insert(format!("{}:{prio}", sp.name), Value::String(qoid));
            root.insert(qkey, json!(qstats));
        }
        if !queues.is_empty() {
            root.insert("COUNTERS_QUEUE_NAME_MAP".into(), Value::Object(queues));
        }
        let text = Value::Object(root).to_string();
        let argv = args(&["COUNTERS_DB", "HGETALL", &format!("COUNTERS:{oid}")]);
        let parsed = parse::counters_db(&text).map_err(|e| {
            SourceError::Other(format!(
                "port {port}: `{}`: {e}",
                self.cli.command_line(&argv)
            ))
        })?;
        parsed
            .get(&sp.name)
            .copied()
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }
}

impl CounterSource for SonicSource {
    fn ports(&self) -> Vec<PortId> {
        self.ports.iter().map(|p| self.id(p)).collect()
    }

    /// `sonic-db-cli APPL_DB HGET PORT_TABLE:<name> oper_status`: up when `up`.
    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        let sp = self.find(port)?;
        let v = self.hget(
            port,
            "APPL_DB",
            &format!("PORT_TABLE:{}", sp.name),
            "oper_status",
        )?;
        Ok(v.as_deref() == Some("up"))
    }

    /// The switch's counters are not ours to clear: the current values become the baseline.
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        let now = self.raw(port)?;
        self.baseline.insert(port.key(), now);
        Ok(())
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let sp = self.find(port)?;
        let t0 = self.clock.now_ns();
        let now = self.raw(port)?;
        let t1 = self.clock.now_ns();
        let mut s = Sample::new(self.id(&sp), t0, t1.saturating_sub(t0));
        s.pfc = pfc_since(&now, self.baseline.get(&port.key()));
        Ok(s)
    }

    fn stamps_time(&self) -> bool {
        true
    }
}
