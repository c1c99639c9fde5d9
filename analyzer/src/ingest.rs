//! Loading, validating and aligning telemetry reports.
//!
//! Reports come from the switches a polling event reached. Each is checked against the
//! topology (every port named must have a link), its epochs must sit on the epoch grid
//! (`start_ns = epoch_id × epoch_ns`) in strictly increasing order, and its counts must be
//! consistent. Epochs of different switches are aligned by their absolute start time; the
//! analysed window is the union of all reported epochs. Eviction digests are added to the
//! flow's other records of the same port and epoch (HAWKEYE §3.3: evicted entries are
//! "stored at the controller"). Whatever is structurally wrong is an [`AnalyzerError`];
//! whatever is merely missing becomes a [`Finding`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use hawkmesh_wire::telemetry::{
    decode_reports, telemetry_version_supported, FiveTuple, PollingContext, PortRecord, ReportFile,
    TelemetryReport,
};
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo, PortRef};

use crate::error::AnalyzerError;
use crate::model::{Finding, PortId, Severity};

fn incident_nodes(topology: &FabricTopology) -> usize {
    topology.nodes.len()
}

/// A report and where it came from (file name and index within the file).
#[derive(Clone, Debug)]
pub struct LoadedReport {
    /// `file.json` or `file.json[3]`.
    pub source_name: String,
    /// The report.
    pub report: TelemetryReport,
}

fn json_error(path: &Path, error: serde_json::Error) -> AnalyzerError {
    AnalyzerError::Json {
        path: path.to_path_buf(),
        line: error.line(),
        column: error.column(),
        message: error.to_string(),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, AnalyzerError> {
    fs::read(path).map_err(|source| AnalyzerError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the topology JSON file written by netsim (`topology.json`) and validates it.
pub fn load_topology(path: &Path) -> Result<FabricTopology, AnalyzerError> {
    let bytes = read(path)?;
    let topology: FabricTopology =
        serde_json::from_slice(&bytes).map_err(|error| json_error(path, error))?;
    topology.validate()?;
    Ok(topology)
}

fn load_file(path: &Path) -> Result<Vec<LoadedReport>, AnalyzerError> {
    let bytes = read(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let reports = if path.extension().is_some_and(|e| e == "hkt") {
        decode_reports(&bytes).map_err(|source| AnalyzerError::Wire {
            path: path.to_path_buf(),
            source,
        })?
    } else {
        let file: ReportFile =
            serde_json::from_slice(&bytes).map_err(|error| json_error(path, error))?;
        file.into_reports()
    };
    let many = reports.len() > 1;
    Ok(reports
        .into_iter()
        .enumerate()
        .map(|(index, report)| LoadedReport {
            source_name: if many {
                format!("{name}[{index}]")
            } else {
                name.clone()
            },
            report,
        })
        .collect())
}

/// Reads reports from a file or from every `*.json` / `*.hkt` file of a directory (in file
/// name order). `*.json` files hold one report or an array; `*.hkt` files hold binary chunk
/// streams.
pub fn load_reports(path: &Path) -> Result<Vec<LoadedReport>, AnalyzerError> {
    let metadata = fs::metadata(path).map_err(|source| AnalyzerError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    if metadata.is_dir() {
        let entries = fs::read_dir(path).map_err(|source| AnalyzerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut files: Vec<PathBuf> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| AnalyzerError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let file = entry.path();
            let wanted = file.extension().is_some_and(|e| e == "json" || e == "hkt");
            if wanted && file.is_file() {
                files.push(file);
            }
        }
        files.sort();
        for file in files {
            out.extend(load_file(&file)?);
        }
    } else {
        out = load_file(path)?;
    }
    if out.is_empty() {
        return Err(AnalyzerError::NoReports {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// The reports of one polling event (HAWKEYE §3.4: an incident is what one polling
/// packet collected). Reports of several events are refused, naming them; a switch that
/// reported twice is kept once when both copies are identical (a resend) and refused when
/// they differ (which one is true cannot be told).
fn one_event(
    reports: Vec<LoadedReport>,
    findings: &mut Vec<Finding>,
) -> Result<Vec<LoadedReport>, AnalyzerError> {
    let mut events: BTreeMap<u64, &str> = BTreeMap::new();
    for loaded in &reports {
        events
            .entry(loaded.report.event_id)
            .or_insert(&loaded.source_name);
    }
    if events.len() > 1 {
        return Err(AnalyzerError::MixedEvents {
            events: events
                .iter()
                .map(|(event, source)| format!("{event} ({source})"))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut kept: Vec<LoadedReport> = Vec::with_capacity(reports.len());
    let mut by_switch: BTreeMap<NodeId, usize> = BTreeMap::new();
    for loaded in reports {
        match by_switch.get(&loaded.report.switch) {
            None => {
                by_switch.insert(loaded.report.switch, kept.len());
                kept.push(loaded);
            }
            Some(&first) if kept[first].report == loaded.report => {
                findings.push(Finding {
                    severity: Severity::Info,
                    code: "duplicate_report".into(),
                    message: format!(
                        "{}: the same report of switch {} as {}; read once",
                        loaded.source_name, loaded.report.switch, kept[first].source_name
                    ),
                });
            }
            Some(&first) => {
                return Err(AnalyzerError::ConflictingReports {
                    switch: loaded.report.switch,
                    event_id: loaded.report.event_id,
                    first: kept[first].source_name.clone(),
                    second: loaded.source_name,
                })
            }
        }
    }
    Ok(kept)
}

/// The deepest queue a record may report per packet: 1 GiB, beyond any switch's buffer
/// (Tofino 2: 64 MB). A queue-depth sum above packets × this is damage.
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;

/// A flow's records at one port in one epoch, eviction digests included.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowAgg {
    /// The flow.
    pub flow: FiveTuple,
    /// The egress port.
    pub egress_port: PortNo,
    /// Packets.
    pub packets: u64,
    /// Paused packets.
    pub paused: u64,
    /// Queue-depth sum over non-paused packets, bytes.
    pub queue_depth_sum: u64,
    /// Enqueue window within the epoch (ns offsets), when known.
    pub window: Option<(u32, u32)>,
    /// How many eviction digests were merged in.
    pub evicted_records: u32,
}

impl FlowAgg {
    /// Non-paused packets.
    pub fn unpaused(&self) -> u64 {
        self.packets.saturating_sub(self.paused)
    }
}

/// One switch's telemetry of one epoch.
#[derive(Clone, Debug, Default)]
pub struct EpochData {
    /// Eviction digests lost by the agent.
    pub lost_evictions: u32,
    /// Port records by port (ports that enqueued packets in the epoch).
    pub ports: BTreeMap<PortNo, PortRecord>,
    /// PFC XON frames each port received in the epoch (ports with at least one), whether
    /// or not it enqueued packets.
    pub xons: BTreeMap<PortNo, u16>,
    /// Meter rows: ingress port → (egress port, bytes), egress ascending.
    pub meters: BTreeMap<PortNo, Vec<(PortNo, u64)>>,
    /// Bytes enqueued at each egress port (sum of its meter column).
    pub egress_bytes: BTreeMap<PortNo, u64>,
    /// Flow records sorted by (egress port, flow).
    pub flows: Vec<FlowAgg>,
}

impl EpochData {
    /// The flow records of one egress port.
    pub fn flows_at(&self, port: PortNo) -> &[FlowAgg] {
        let start = self.flows.partition_point(|f| f.egress_port < port);
        let end = self.flows.partition_point(|f| f.egress_port <= port);
        &self.flows[start..end]
    }
}

/// Everything one switch reported.
#[derive(Clone, Debug, Default)]
pub struct SwitchData {
    /// Polling contexts, one per report.
    pub polling: Vec<PollingContext>,
    /// Port status (union over its reports): per port, whether a pause was in force at
    /// collection and the latest pause end, ns.
    pub pause_status: BTreeMap<PortNo, (bool, u64)>,
    /// Epochs by start time.
    pub epochs: BTreeMap<u64, EpochData>,
}

/// Validated, aligned telemetry of one incident.
#[derive(Clone, Debug)]
pub struct Incident {
    /// The fabric.
    pub topology: FabricTopology,
    /// Epoch size, ns.
    pub epoch_ns: u64,
    /// Starts of the analysed epochs, ascending (union over switches).
    pub epoch_starts: Vec<u64>,
    /// Telemetry by switch.
    pub switches: BTreeMap<NodeId, SwitchData>,
    /// Polling event ids seen.
    pub event_ids: Vec<u64>,
    /// The victim flow.
    pub victim: FiveTuple,
    /// Facts about the telemetry found while loading.
    pub findings: Vec<Finding>,
    peers: BTreeMap<PortRef, (PortRef, f64)>,
    /// `linked[node][port]`: whether the port has a link (O(1) record checks).
    linked: Vec<Vec<bool>>,
}

impl Incident {
    /// The other end of the link at `port`, and the link speed in Gbit/s.
    pub fn peer(&self, port: PortRef) -> Option<(PortRef, f64)> {
        self.peers.get(&port).copied()
    }

    /// Name of a node (or `node<id>` if unknown).
    pub fn node_name(&self, node: NodeId) -> String {
        self.topology
            .nodes
            .get(node as usize)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| format!("node{node}"))
    }

    /// Whether a node is a host.
    pub fn is_host(&self, node: NodeId) -> bool {
        self.topology
            .nodes
            .get(node as usize)
            .is_some_and(|n| n.kind == NodeKind::Host)
    }

    /// A port with its names.
    pub fn port_id(&self, port: PortRef) -> PortId {
        PortId {
            switch: port.node,
            port: port.port,
            label: format!("{}.p{}", self.node_name(port.node), port.port),
            peer: self
                .peer(port)
                .map(|(peer, _)| self.node_name(peer.node))
                .unwrap_or_else(|| "-".into()),
        }
    }

    /// Ports of one switch that have links, ascending.
    pub fn switch_ports(&self, switch: NodeId) -> Vec<PortNo> {
        let start = PortRef {
            node: switch,
            port: 0,
        };
        self.peers
            .range(start..)
            .take_while(|(p, _)| p.node == switch)
            .map(|(p, _)| p.port)
            .collect()
    }

    /// Validates and aligns reports.
    pub fn build(
        reports: Vec<LoadedReport>,
        topology: FabricTopology,
        victim: FiveTuple,
        epoch_ns: Option<u64>,
    ) -> Result<Incident, AnalyzerError> {
        topology.validate()?;
        let mut peers = BTreeMap::new();
        for link in &topology.links {
            peers.insert(link.a, (link.b, link.gbps));
            peers.insert(link.b, (link.a, link.gbps));
        }
        let mut linked: Vec<Vec<bool>> = vec![Vec::new(); incident_nodes(&topology)];
        for port in peers.keys() {
            if let Some(ports) = linked.get_mut(port.node as usize) {
                let index = usize::from(port.port);
                if ports.len() <= index {
                    ports.resize(index + 1, false);
                }
                ports[index] = true;
            }
        }
        let mut incident = Incident {
            topology,
            epoch_ns: epoch_ns.unwrap_or(0),
            epoch_starts: Vec::new(),
            switches: BTreeMap::new(),
            event_ids: Vec::new(),
            victim,
            findings: Vec::new(),
            peers,
            linked,
        };
        if let Some(size) = epoch_ns {
            if !size.is_power_of_two() {
                return Err(AnalyzerError::EpochSize {
                    source_name: "--epoch".into(),
                    found: size,
                    problem: "is not a power of two".into(),
                });
            }
        }
        let reports = one_event(reports, &mut incident.findings)?;
        incident.check_victim(&reports)?;
        let mut events = BTreeSet::new();
        for loaded in reports {
            incident.add_report(loaded, &mut events)?;
        }
        incident.event_ids = events.into_iter().collect();
        let all: BTreeSet<u64> = incident
            .switches
            .values()
            .flat_map(|s| s.epochs.keys().copied())
            .collect();
        incident.epoch_starts = all.into_iter().collect();
        incident.coverage_findings();
        incident.findings.sort();
        incident.findings.dedup();
        Ok(incident)
    }

    /// The victim must be a flow of this fabric: its addresses those of hosts of the
    /// topology, or (a topology without addresses) a flow some report names. A 5-tuple
    /// found nowhere is a typo, and "not affected" would be a wrong answer to it.
    fn check_victim(&self, reports: &[LoadedReport]) -> Result<(), AnalyzerError> {
        let victim = self.victim;
        let addressed = self
            .topology
            .nodes
            .iter()
            .any(|n| n.kind == NodeKind::Host && n.ipv4.is_some());
        if addressed {
            let missing: Vec<String> = [("source", victim.src_ip), ("destination", victim.dst_ip)]
                .into_iter()
                .filter(|(_, ip)| self.topology.host_by_nic_ipv4(*ip).is_none())
                .map(|(end, ip)| format!("{end} {}", std::net::Ipv4Addr::from(ip)))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            return Err(AnalyzerError::UnknownVictim {
                victim,
                reason: format!(
                    "no host of the topology has the {} address",
                    missing.join(" or the ")
                ),
            });
        }
        let named = reports.iter().any(|loaded| {
            let report = &loaded.report;
            std::iter::once(&report.polling)
                .chain(&report.more_polling)
                .any(|p| p.victim == victim)
                || report
                    .epochs
                    .iter()
                    .any(|e| e.flows.iter().any(|f| f.flow == victim))
        });
        if named {
            Ok(())
        } else {
            Err(AnalyzerError::UnknownVictim {
                victim,
                reason: "the topology has no host addresses and no report names this flow".into(),
            })
        }
    }

    /// The most packets one record of `switch` can count in an epoch: every link of the
    /// switch delivering minimum-size frames (64 B + 20 B of preamble and gap, IEEE 802.3)
    /// into one egress for the whole epoch, twice over for timestamp jitter at the epoch
    /// edges. A count above it is damage, not traffic.
    fn packet_limit(&self, switch: NodeId) -> u64 {
        let gbps: f64 = self
            .switch_ports(switch)
            .into_iter()
            .filter_map(|port| self.peer(PortRef { node: switch, port }))
            .map(|(_, gbps)| gbps)
            .sum();
        let bits = gbps * self.epoch_ns as f64;
        (bits / (8.0 * 84.0)).ceil() as u64 * 2 + 64
    }

    /// The most bytes one ingress port's link can bring in an epoch (twice over, plus a few
    /// jumbo frames straddling the edges).
    fn byte_limit(&self, switch: NodeId, port: PortNo) -> u64 {
        let gbps = self
            .peer(PortRef { node: switch, port })
            .map_or(0.0, |(_, gbps)| gbps);
        (gbps * self.epoch_ns as f64 / 8.0).ceil() as u64 * 2 + 4 * 9216
    }

    fn unknown_port(
        &self,
        source_name: &str,
        switch: NodeId,
        port: PortNo,
        record: String,
    ) -> AnalyzerError {
        AnalyzerError::UnknownPort {
            source_name: source_name.to_string(),
            switch,
            switch_name: self.node_name(switch),
            port,
            record,
        }
    }

    fn check_port(
        &self,
        source_name: &str,
        switch: NodeId,
        port: PortNo,
        record: impl FnOnce() -> String,
    ) -> Result<(), AnalyzerError> {
        let linked = self
            .linked
            .get(switch as usize)
            .and_then(|ports| ports.get(usize::from(port)))
            .copied()
            .unwrap_or(false);
        if linked {
            Ok(())
        } else {
            Err(self.unknown_port(source_name, switch, port, record()))
        }
    }

    fn add_report(
        &mut self,
        loaded: LoadedReport,
        events: &mut BTreeSet<u64>,
    ) -> Result<(), AnalyzerError> {
        let LoadedReport {
            source_name,
            report,
        } = loaded;
        let switch = report.switch;
        if !telemetry_version_supported(report.version) {
            return Err(AnalyzerError::UnsupportedVersion {
                source_name,
                switch,
                version: report.version,
            });
        }
        let is_switch = self
            .topology
            .nodes
            .get(switch as usize)
            .is_some_and(|n| n.kind == NodeKind::Switch);
        if !is_switch {
            return Err(AnalyzerError::UnknownSwitch {
                source_name,
                switch,
            });
        }
        if !report.epoch_ns.is_power_of_two() {
            return Err(AnalyzerError::EpochSize {
                source_name,
                found: report.epoch_ns,
                problem: "is not a power of two".into(),
            });
        }
        if self.epoch_ns == 0 {
            self.epoch_ns = report.epoch_ns;
        } else if self.epoch_ns != report.epoch_ns {
            return Err(AnalyzerError::EpochSize {
                source_name,
                found: report.epoch_ns,
                problem: format!(
                    "differs from the epoch size {} ns of the other reports (or --epoch)",
                    self.epoch_ns
                ),
            });
        }
        let epoch_ns = self.epoch_ns;
        let polling = &report.polling;
        for context in std::iter::once(polling).chain(&report.more_polling) {
            if !context.flags.is_valid() {
                return Err(AnalyzerError::InconsistentRecord {
                    source_name,
                    switch,
                    start_ns: 0,
                    problem: format!(
                        "polling flags {:#04x} (arrival by port {}) use undefined bits",
                        context.flags.0, context.ingress_port
                    ),
                });
            }
            self.check_port(&source_name, switch, context.ingress_port, || {
                "polling ingress port".into()
            })?;
            for egress in &context.egress {
                self.check_port(&source_name, switch, egress.port, || {
                    "polling egress port".into()
                })?;
            }
        }
        for paused in &report.paused_ports {
            self.check_port(&source_name, switch, paused.port, || {
                "paused port (port status)".into()
            })?;
        }
        if polling.victim != self.victim {
            self.findings.push(Finding {
                severity: Severity::Info,
                code: "other_victim".into(),
                message: format!(
                    "{source_name}: switch {} reported for polling event {} of victim {}, not the diagnosed victim {}; its telemetry is used as context",
                    self.node_name(switch),
                    report.event_id,
                    polling.victim,
                    self.victim
                ),
            });
        }
        events.insert(report.event_id);

        let mut previous: Option<u64> = None;
        let mut parsed: Vec<(u64, EpochData)> = Vec::with_capacity(report.epochs.len());
        for epoch in &report.epochs {
            let start_ns = epoch.start_ns;
            if start_ns % epoch_ns != 0 || epoch.epoch_id != start_ns / epoch_ns {
                return Err(AnalyzerError::EpochMisaligned {
                    source_name,
                    switch,
                    epoch_id: epoch.epoch_id,
                    start_ns,
                    problem: format!(
                        "but epochs of {epoch_ns} ns must start at epoch_id × {epoch_ns} ns (expected epoch id {} starting at {} ns)",
                        start_ns / epoch_ns,
                        (start_ns / epoch_ns) * epoch_ns
                    ),
                });
            }
            if let Some(previous_ns) = previous {
                if start_ns <= previous_ns {
                    return Err(AnalyzerError::EpochOutOfOrder {
                        source_name,
                        switch,
                        previous_ns,
                        next_ns: start_ns,
                    });
                }
            }
            previous = Some(start_ns);
            let data = self.parse_epoch(&source_name, switch, epoch)?;
            parsed.push((start_ns, data));
        }
        let name = self.node_name(switch);
        let entry = self.switches.entry(switch).or_default();
        entry.polling.push(report.polling.clone());
        // Later arrivals by other ports: each carries the PFC branch the data plane took
        // from its own ingress (around a loop, the branch that closes it).
        entry.polling.extend(report.more_polling.iter().cloned());
        for paused in &report.paused_ports {
            let status = entry.pause_status.entry(paused.port).or_default();
            status.0 |= paused.in_force;
            status.1 = status.1.max(paused.until_ns);
        }
        for (start_ns, data) in parsed {
            if data.lost_evictions > 0 {
                self.findings.push(Finding {
                    severity: Severity::Warning,
                    code: "lost_evictions".into(),
                    message: format!(
                        "{name}: {} flow eviction digests of the epoch starting at {start_ns} ns were lost by the agent; flow telemetry of that epoch is incomplete",
                        data.lost_evictions
                    ),
                });
            }
            // One report per switch (`one_event`), epochs strictly increasing within it:
            // each (switch, epoch) arrives once.
            entry.epochs.insert(start_ns, data);
        }
        Ok(())
    }

    fn parse_epoch(
        &self,
        source_name: &str,
        switch: NodeId,
        epoch: &hawkmesh_wire::telemetry::EpochTelemetry,
    ) -> Result<EpochData, AnalyzerError> {
        let start_ns = epoch.start_ns;
        let epoch_id = epoch.epoch_id;
        let inconsistent = |problem: String| AnalyzerError::InconsistentRecord {
            source_name: source_name.to_string(),
            switch,
            start_ns,
            problem,
        };
        let duplicate = |record: String| AnalyzerError::DuplicateRecord {
            source_name: source_name.to_string(),
            switch,
            start_ns,
            record,
        };
        let mut data = EpochData {
            lost_evictions: epoch.lost_evictions,
            ..EpochData::default()
        };
        let packet_limit = self.packet_limit(switch);
        let implausible = |what: String, count: u64, limit: u64| {
            inconsistent(format!(
                "{what} counts {count} packets, more than the switch's links can carry in an epoch of {} ns (at most {limit} minimum-size frames); the record is damaged",
                self.epoch_ns
            ))
        };
        for port in &epoch.ports {
            self.check_port(source_name, switch, port.port, || {
                format!("port record of epoch {epoch_id}")
            })?;
            if u64::from(port.packet_count) > packet_limit {
                return Err(implausible(
                    format!("port {}", port.port),
                    port.packet_count.into(),
                    packet_limit,
                ));
            }
            if port.queue_depth_sum_bytes > u64::from(port.packet_count) * MAX_QUEUE_BYTES
                || port.unpaused_queue_depth_sum_bytes > port.queue_depth_sum_bytes
            {
                return Err(inconsistent(format!(
                    "port {} has queue-depth sums {} B (all) and {} B (non-paused) over {} packets: beyond {} B per packet, or the part above the whole",
                    port.port,
                    port.queue_depth_sum_bytes,
                    port.unpaused_queue_depth_sum_bytes,
                    port.packet_count,
                    MAX_QUEUE_BYTES
                )));
            }
            if port.paused_packet_count > port.packet_count {
                return Err(inconsistent(format!(
                    "port {} has {} paused packets but only {} packets",
                    port.port, port.paused_packet_count, port.packet_count
                )));
            }
            if data.ports.contains_key(&port.port) || data.xons.contains_key(&port.port) {
                return Err(duplicate(format!("port record for port {}", port.port)));
            }
            if port.xon_count > 0 {
                data.xons.insert(port.port, port.xon_count);
            }
            // A record without packets carries only the port's XONs.
            if port.packet_count > 0 || port.xon_count == 0 {
                data.ports.insert(port.port, *port);
            }
        }
        let mut meters: Vec<(PortNo, PortNo, u64)> = Vec::with_capacity(epoch.meters.len());
        for meter in &epoch.meters {
            self.check_port(source_name, switch, meter.ingress_port, || {
                format!("meter row (ingress) of epoch {epoch_id}")
            })?;
            self.check_port(source_name, switch, meter.egress_port, || {
                format!("meter row (egress) of epoch {epoch_id}")
            })?;
            let limit = self.byte_limit(switch, meter.ingress_port);
            if meter.bytes > limit {
                return Err(inconsistent(format!(
                    "meter row {}→{} counts {} bytes, more than port {}'s link can carry in an epoch of {} ns (at most {limit}); the record is damaged",
                    meter.ingress_port, meter.egress_port, meter.bytes, meter.ingress_port, self.epoch_ns
                )));
            }
            meters.push((meter.ingress_port, meter.egress_port, meter.bytes));
        }
        meters.sort_unstable();
        for pair in meters.windows(2) {
            if pair[0].0 == pair[1].0 && pair[0].1 == pair[1].1 {
                return Err(duplicate(format!("meter row {}→{}", pair[0].0, pair[0].1)));
            }
        }
        for (ingress, egress, bytes) in meters {
            if bytes == 0 {
                continue;
            }
            data.meters
                .entry(ingress)
                .or_default()
                .push((egress, bytes));
            *data.egress_bytes.entry(egress).or_default() += bytes;
        }
        let mut flows: Vec<(PortNo, FiveTuple, bool, usize)> =
            Vec::with_capacity(epoch.flows.len());
        for (index, record) in epoch.flows.iter().enumerate() {
            self.check_port(source_name, switch, record.egress_port, || {
                format!("flow record of {} in epoch {epoch_id}", record.flow)
            })?;
            if u64::from(record.packet_count) > packet_limit {
                return Err(implausible(
                    format!("flow {} at port {}", record.flow, record.egress_port),
                    record.packet_count.into(),
                    packet_limit,
                ));
            }
            if record.queue_depth_sum_bytes > u64::from(record.packet_count) * MAX_QUEUE_BYTES {
                return Err(inconsistent(format!(
                    "flow {} at port {} has a queue-depth sum of {} B over {} packets, beyond {} B per packet",
                    record.flow,
                    record.egress_port,
                    record.queue_depth_sum_bytes,
                    record.packet_count,
                    MAX_QUEUE_BYTES
                )));
            }
            if record.paused_packet_count > record.packet_count {
                return Err(inconsistent(format!(
                    "flow {} at port {} has {} paused packets but only {} packets",
                    record.flow,
                    record.egress_port,
                    record.paused_packet_count,
                    record.packet_count
                )));
            }
            if record.first_enqueue_offset_ns > record.last_enqueue_offset_ns
                || u64::from(record.last_enqueue_offset_ns) >= self.epoch_ns
            {
                return Err(inconsistent(format!(
                    "flow {} at port {} has enqueue window {}..{} ns, outside an epoch of {} ns",
                    record.flow,
                    record.egress_port,
                    record.first_enqueue_offset_ns,
                    record.last_enqueue_offset_ns,
                    self.epoch_ns
                )));
            }
            flows.push((record.egress_port, record.flow, record.evicted, index));
        }
        flows.sort_unstable();
        let mut merged: Vec<FlowAgg> = Vec::with_capacity(flows.len());
        let mut last_live: Option<(PortNo, FiveTuple)> = None;
        for (egress, flow, evicted, index) in flows {
            let record = &epoch.flows[index];
            if !evicted {
                if last_live == Some((egress, flow)) {
                    return Err(duplicate(format!(
                        "flow record for {flow} at port {egress} (only eviction digests may repeat)"
                    )));
                }
                last_live = Some((egress, flow));
            }
            let timed = record.has_timing() || record.packet_count <= 1;
            let window = timed.then_some((
                record.first_enqueue_offset_ns,
                record.last_enqueue_offset_ns,
            ));
            match merged.last_mut() {
                Some(agg) if agg.egress_port == egress && agg.flow == flow => {
                    agg.packets += u64::from(record.packet_count);
                    agg.paused += u64::from(record.paused_packet_count);
                    agg.queue_depth_sum += record.queue_depth_sum_bytes;
                    agg.window = match (agg.window, window) {
                        (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                        _ => None,
                    };
                    agg.evicted_records += u32::from(evicted);
                }
                _ => merged.push(FlowAgg {
                    flow,
                    egress_port: egress,
                    packets: u64::from(record.packet_count),
                    paused: u64::from(record.paused_packet_count),
                    queue_depth_sum: record.queue_depth_sum_bytes,
                    window,
                    evicted_records: u32::from(evicted),
                }),
            }
        }
        data.flows = merged;
        Ok(data)
    }

    fn coverage_findings(&mut self) {
        let mut findings = Vec::new();
        // Epoch coverage: every reporting switch should cover the whole window.
        for (switch, data) in &self.switches {
            let missing: Vec<u64> = self
                .epoch_starts
                .iter()
                .filter(|s| !data.epochs.contains_key(s))
                .copied()
                .collect();
            if !missing.is_empty() {
                findings.push(Finding {
                    severity: Severity::Info,
                    code: "epoch_not_covered".into(),
                    message: format!(
                        "{} reported no telemetry for {} of the {} analysed epochs (starting at {} ns); its ring buffer did not cover them",
                        self.node_name(*switch),
                        missing.len(),
                        self.epoch_starts.len(),
                        missing
                            .iter()
                            .map(|m| m.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            // Flow records should account for the port's packets.
            for (start, epoch) in &data.epochs {
                for (port, record) in &epoch.ports {
                    let flow_packets: u64 = epoch.flows_at(*port).iter().map(|f| f.packets).sum();
                    let port_packets = u64::from(record.packet_count);
                    let shortfall = port_packets.saturating_sub(flow_packets);
                    if port_packets > 0 && shortfall * 100 > port_packets {
                        findings.push(Finding {
                            severity: Severity::Warning,
                            code: "flow_records_incomplete".into(),
                            message: format!(
                                "{}.p{port}, epoch starting at {start} ns: flow records account for {flow_packets} of {port_packets} packets; contention attribution there may miss flows",
                                self.node_name(*switch)
                            ),
                        });
                    } else if flow_packets > port_packets {
                        findings.push(Finding {
                            severity: Severity::Warning,
                            code: "flow_records_exceed_port".into(),
                            message: format!(
                                "{}.p{port}, epoch starting at {start} ns: flow records count {flow_packets} packets but the port record only {port_packets}",
                                self.node_name(*switch)
                            ),
                        });
                    }
                }
            }
            // The polling packet was sent to switches that should have reported.
            for polling in &data.polling {
                for egress in &polling.egress {
                    let here = PortRef {
                        node: *switch,
                        port: egress.port,
                    };
                    if let Some((peer, _)) = self.peer(here) {
                        if !self.is_host(peer.node) && !self.switches.contains_key(&peer.node) {
                            findings.push(Finding {
                                severity: Severity::Warning,
                                code: "polled_switch_missing".into(),
                                message: format!(
                                    "{} forwarded the polling packet out of port {} to {}, but {} sent no report",
                                    self.node_name(*switch),
                                    egress.port,
                                    self.node_name(peer.node),
                                    self.node_name(peer.node)
                                ),
                            });
                        }
                    }
                }
            }
        }
        self.findings.extend(findings);
    }
}
