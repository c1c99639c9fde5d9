//! Incident assembly: report chunks grouped by polling event, per-switch reassembly, the
//! completeness rule, diagnosis.
//!
//! An incident is one polling event (HAWKEYE §3.4). A switch's report is complete when its
//! chunks 0..=last (the one flagged last) are all present. The switches the polling packet
//! reached follow from the reports themselves: every report names the port the polling
//! packet arrived by and the ports its switch sent it out of, and the topology says which
//! switch is behind each (so a report from the middle of the path also expects the switches
//! before it). The
//! incident is complete when every switch so named has a complete report; if some never
//! answer, the incident is diagnosed after a timeout with what arrived, and the diagnosis
//! says which switches are missing (finding `polled_switch_missing`) instead of guessing.
//!
//! Diagnosing can take a while on a large fabric. [`IncidentSet::accept`] and
//! [`IncidentSet::expire`] diagnose before they return; the service instead takes the
//! crate-private `accept_deferred` path, which decides under the lock that an incident is
//! complete and hands back the reports to diagnose, so the diagnosis runs without the lock
//! (the incident reads as collecting until its result is installed).

use crate::counters::{Counter, Counters};
use crate::store::{from_hex, to_hex, Record, Replay, Store, StoreError, Stored};
use hawkmesh_analyzer::{diagnose_reports, loaded, render, DiagnoseOptions};
use hawkmesh_wire::telemetry::{check_chunk, decode_reports, ChunkHeaderRepr, TelemetryReport};
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortRef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where an incident stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentState {
    /// Waiting for reports.
    Collecting,
    /// Every switch the polling packet reached has reported; diagnosed.
    Complete,
    /// Some switches never reported; diagnosed with what arrived.
    TimedOut,
}

impl IncidentState {
    /// Name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentState::Collecting => "collecting",
            IncidentState::Complete => "complete",
            IncidentState::TimedOut => "timed_out",
        }
    }
}

/// A short view of an incident for listings.
#[derive(Clone, Debug, Serialize)]
pub struct IncidentSummary {
    /// Polling event id.
    pub event_id: u64,
    /// State.
    pub state: IncidentState,
    /// Switches with complete reports.
    pub reported_switches: Vec<NodeId>,
    /// Switches named by the reports that have not (completely) reported.
    pub missing_switches: Vec<NodeId>,
    /// Chunks stored.
    pub chunks: usize,
    /// Problems with the chunks (undecodable reports), by switch.
    pub errors: Vec<String>,
    /// One-line verdict, once diagnosed.
    pub verdict: Option<String>,
}

#[derive(Debug, Default)]
struct Incident {
    chunks: BTreeMap<(NodeId, u16), Vec<u8>>,
    last_index: BTreeMap<NodeId, u16>,
    reports: BTreeMap<NodeId, TelemetryReport>,
    errors: BTreeMap<NodeId, String>,
    state: Option<IncidentState>,
    /// Concluded under the lock, diagnosis running outside it: not concluded again.
    diagnosing: bool,
    /// Switches whose complete report is being decoded outside the lock.
    decoding: BTreeSet<NodeId>,
    /// Bytes of its chunks (the per-report and collecting-memory limits).
    chunk_bytes: BTreeMap<NodeId, usize>,
    last_activity: Option<Instant>,
    diagnosis_json: Option<String>,
    diagnosis_html: Option<String>,
    diagnosis_text: Option<String>,
    verdict: Option<String>,
    /// When its first record was stored, ms since the Unix epoch (retention by age).
    stored_at_ms: u64,
    /// Bytes its records take in the log (retention by size).
    stored_bytes: u64,
}

/// How long and how much the store keeps. Incidents are dropped whole, oldest first; one
/// still collecting reports is dropped only by age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Incidents first stored longer ago than this are dropped.
    pub max_age: Duration,
    /// When the log grows beyond this many bytes, the oldest concluded incidents are
    /// dropped until it is under three quarters of it.
    pub max_bytes: u64,
}

impl Default for Retention {
    /// 30 days, 1 GiB.
    fn default() -> Self {
        Retention {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_bytes: 1 << 30,
        }
    }
}

/// What one analyzer takes in, so that no client (a broken agent, a flood) can exhaust
/// memory or starve the others: a report's size, how fast one switch opens incidents (a
/// token bucket), how many incidents may wait for reports at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntakeLimits {
    /// Bytes of all chunks of one switch's report for one event (a K=4 report is ~2 KB,
    /// a 64-port switch's with full flow tables a few MB).
    pub max_report_bytes: usize,
    /// New incidents one switch may open per second, sustained.
    pub incidents_per_switch_per_s: f64,
    /// … and in a burst.
    pub incident_burst: f64,
    /// Incidents collecting reports at once (each waits at most the incident timeout).
    pub max_collecting: usize,
}

impl Default for IntakeLimits {
    fn default() -> Self {
        IntakeLimits {
            max_report_bytes: 16 << 20,
            incidents_per_switch_per_s: 200.0,
            incident_burst: 2000.0,
            max_collecting: 10_000,
        }
    }
}

/// What the store repaired when it was opened (see [`crate::store::Replay`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// A torn last record was cut off.
    pub torn_tail: bool,
    /// Damaged records skipped (line numbers of the log as found).
    pub damaged_lines: Vec<usize>,
    /// Where the damaged original was kept.
    pub quarantined: Option<std::path::PathBuf>,
    /// Stored chunks that no longer decode, skipped.
    pub skipped_chunks: usize,
}

/// What happened to a submitted chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Stored for the first time.
    New,
    /// Already stored.
    Duplicate,
}

/// Why a chunk or the set failed.
#[derive(Debug, thiserror::Error)]
pub enum IncidentError {
    /// The chunk is not a telemetry chunk.
    #[error("rejected chunk: {0}")]
    BadChunk(String),
    /// The chunk is refused for now (a limit on open incidents or on a switch's rate):
    /// not stored, not acknowledged; the agent resends later.
    #[error("chunk refused for now: {0}")]
    Busy(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A switch's complete chunk sequence, to be decoded (without the lock) and handed back
/// with [`IncidentSet::deliver`].
#[derive(Debug)]
pub(crate) struct PendingDecode {
    event_id: u64,
    switch: NodeId,
    bytes: Vec<u8>,
}

/// The outcome of a [`PendingDecode`].
#[derive(Debug)]
pub(crate) struct DecodedReport {
    event_id: u64,
    switch: NodeId,
    report: Result<TelemetryReport, String>,
}

impl PendingDecode {
    /// Decodes (linear in the bytes; CPU work, not on an async worker).
    pub(crate) fn run(self) -> DecodedReport {
        let switch = self.switch;
        let report = match decode_reports(&self.bytes) {
            Ok(mut reports) if reports.len() == 1 => Ok(reports.remove(0)),
            Ok(reports) => Err(format!(
                "switch {switch}: {} reports in one chunk sequence",
                reports.len()
            )),
            Err(error) => Err(format!("switch {switch}: {error}")),
        };
        DecodedReport {
            event_id: self.event_id,
            switch,
            report,
        }
    }
}

/// What filing a chunk left to do outside the lock.
#[derive(Debug)]
pub(crate) struct Filed {
    /// New or duplicate.
    pub(crate) accepted: Accepted,
    /// The switch's report, complete with this chunk, to decode.
    pub(crate) decode: Option<PendingDecode>,
}

/// An incident that was concluded under the lock, to be diagnosed (possibly without the
/// lock) and then installed with [`IncidentSet::conclude`].
#[derive(Debug)]
pub(crate) struct PendingDiagnosis {
    event_id: u64,
    state: IncidentState,
    reports: Vec<TelemetryReport>,
    topology: FabricTopology,
    options: DiagnoseOptions,
    counters: Arc<Counters>,
    #[cfg(test)]
    gate: Option<crate::gate::Gate>,
}

/// The outcome of a [`PendingDiagnosis`].
#[derive(Debug)]
pub(crate) struct Concluded {
    event_id: u64,
    state: IncidentState,
    json: Option<String>,
    html: Option<String>,
    text: Option<String>,
    verdict: Option<String>,
}

impl PendingDiagnosis {
    /// Diagnoses and renders (CPU work that can take a while: not on an async worker).
    /// A rendering failure or a panic in the analysis is logged, counted and becomes the
    /// verdict; it never leaves the incident unconcluded.
    pub(crate) fn run(self) -> Concluded {
        #[cfg(test)]
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        let PendingDiagnosis {
            event_id,
            state,
            reports,
            topology,
            options,
            counters,
            ..
        } = self;
        let failed = |what: &str, error: &dyn std::fmt::Display| {
            counters.bump(Counter::DiagnosisFailures);
            tracing::error!(event_id, %error, "{what} failed");
        };
        let victim = reports.first().map(|r| r.polling.victim);
        let (json, html, text, verdict) = match victim {
            Some(victim) => {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    diagnose_reports(loaded(reports), topology, victim, &options)
                }));
                match outcome {
                    Ok(Ok(output)) => {
                        let json = render::to_json(&output.diagnosis)
                            .map_err(|e| failed("rendering the diagnosis as JSON", &e))
                            .ok();
                        let html = render::to_html(&output.diagnosis, &output.view)
                            .map_err(|e| failed("rendering the diagnosis as HTML", &e))
                            .ok();
                        let text = Some(render::to_text(&output.diagnosis));
                        (json, html, text, Some(output.diagnosis.verdict.clone()))
                    }
                    Ok(Err(error)) => (
                        None,
                        None,
                        None,
                        Some(format!("telemetry could not be diagnosed: {error}")),
                    ),
                    Err(_) => {
                        failed("diagnosis", &"the analyzer panicked");
                        (
                            None,
                            None,
                            None,
                            Some("the analyzer failed on this telemetry (it panicked)".into()),
                        )
                    }
                }
            }
            None => (
                None,
                None,
                None,
                Some("no switch delivered a complete report".to_string()),
            ),
        };
        Concluded {
            event_id,
            state,
            json,
            html,
            text,
            verdict,
        }
    }
}

/// Checks a chunk's header, that its length matches the one its header announces, and its
/// checksum (format 5 on).
fn parse_header(bytes: &[u8]) -> Result<ChunkHeaderRepr, IncidentError> {
    check_chunk(bytes).map_err(|e| IncidentError::BadChunk(e.to_string()))
}

/// Every incident the analyzer knows, backed by the store.
#[derive(Debug)]
pub struct IncidentSet {
    topology: FabricTopology,
    options: DiagnoseOptions,
    timeout: Duration,
    store: Store,
    incidents: BTreeMap<u64, Incident>,
    counters: Arc<Counters>,
    /// What opening the store repaired.
    pub recovery: Recovery,
    retention: Retention,
    limits: IntakeLimits,
    /// Per switch: incident tokens left and when they were counted.
    buckets: BTreeMap<NodeId, (f64, Instant)>,
    /// Tests pause diagnoses here.
    #[cfg(test)]
    pub(crate) diagnosis_gate: Option<crate::gate::Gate>,
}

impl IncidentSet {
    /// Opens the store in `data_dir` and rebuilds every incident from it.
    pub fn open(
        data_dir: &std::path::Path,
        topology: FabricTopology,
        options: DiagnoseOptions,
        timeout: Duration,
    ) -> Result<IncidentSet, IncidentError> {
        let (store, replay) = Store::open(data_dir)?;
        if let Some(summary) = replay.repair_summary() {
            tracing::warn!(dir = %data_dir.display(), "store repaired on open: {summary}");
        }
        let Replay {
            records,
            torn_tail,
            damaged,
            quarantined,
        } = replay;
        let mut set = IncidentSet {
            topology,
            options,
            timeout,
            store,
            incidents: BTreeMap::new(),
            counters: Arc::new(Counters::default()),
            recovery: Recovery {
                torn_tail,
                damaged_lines: damaged.iter().map(|d| d.line).collect(),
                quarantined,
                skipped_chunks: 0,
            },
            retention: Retention::default(),
            limits: IntakeLimits::default(),
            buckets: BTreeMap::new(),
            #[cfg(test)]
            diagnosis_gate: None,
        };
        for _ in &damaged {
            set.counters.bump(Counter::ReplaySkipped);
        }
        let now = Instant::now();
        let mut timed_out = Vec::new();
        for (index, Stored { at_ms, record }) in records.into_iter().enumerate() {
            let bytes_in_log = Store::framed_len(at_ms, &record);
            match record {
                Record::Chunk { hex } => {
                    // Stored chunks were validated when received: one that does not decode
                    // now is damage (or a different version); skip it, but say so.
                    let filed = from_hex(&hex)
                        .map_err(IncidentError::BadChunk)
                        .and_then(|bytes| set.insert_chunk(bytes, now, at_ms, bytes_in_log));
                    if let Ok(Some(decode)) = filed {
                        // Concluded below, once every record is in.
                        let _ = set.deliver_quietly(decode.run());
                    } else if let Err(error) = filed {
                        set.counters.bump(Counter::ReplaySkipped);
                        set.recovery.skipped_chunks += 1;
                        tracing::warn!(record = index + 1, %error, "stored chunk skipped on replay");
                    }
                }
                Record::TimedOut { event_id } => {
                    if let Some(incident) = set.incidents.get_mut(&event_id) {
                        incident.stored_bytes += bytes_in_log;
                    }
                    timed_out.push(event_id);
                }
            }
        }
        for event_id in timed_out {
            if let Some(pending) = set.begin(event_id, IncidentState::TimedOut) {
                let concluded = pending.run();
                set.install(concluded);
            }
        }
        for event_id in set.incidents.keys().copied().collect::<Vec<_>>() {
            if let Some(pending) = set.try_complete(event_id) {
                let concluded = pending.run();
                set.install(concluded);
            }
        }
        Ok(set)
    }

    /// The store, for tests that make it fail or pause.
    #[cfg(test)]
    pub(crate) fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The counters this set (and the service around it) keeps.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Validates, stores (durably) and files one chunk; diagnoses its incident if the chunk
    /// completes it.
    pub fn accept(&mut self, bytes: Vec<u8>, now: Instant) -> Result<Accepted, IncidentError> {
        let Filed { accepted, decode } = self.accept_deferred(bytes, now, None)?;
        if let Some(decode) = decode {
            if let Some(pending) = self.deliver(decode.run()) {
                let concluded = pending.run();
                self.conclude(concluded);
            }
        }
        Ok(accepted)
    }

    /// [`IncidentSet::accept`] without decoding or diagnosing: when the chunk completes its
    /// switch's report, the decoding to run (then [`IncidentSet::deliver`], which returns the
    /// diagnosis to run if the incident is complete, then [`IncidentSet::conclude`]) is
    /// returned. Counts and logs accepted, duplicate and rejected chunks and store failures.
    /// `from` is the node the client's certificate names (mutual TLS): a chunk is accepted
    /// only from the switch it names.
    pub(crate) fn accept_deferred(
        &mut self,
        bytes: Vec<u8>,
        now: Instant,
        from: Option<&str>,
    ) -> Result<Filed, IncidentError> {
        let outcome = self.file_chunk(bytes, now, from);
        match &outcome {
            Ok(Filed {
                accepted: Accepted::New,
                ..
            }) => self.counters.bump(Counter::ChunksAccepted),
            Ok(Filed {
                accepted: Accepted::Duplicate,
                ..
            }) => self.counters.bump(Counter::ChunksDuplicate),
            Err(IncidentError::BadChunk(reason)) => {
                self.counters.bump(Counter::ChunksRejected);
                tracing::warn!(%reason, "chunk rejected");
            }
            Err(IncidentError::Busy(reason)) => {
                self.counters.bump(Counter::ChunksThrottled);
                tracing::warn!(%reason, "chunk refused for now");
            }
            Err(IncidentError::Store(error)) => {
                self.counters.bump(Counter::StoreFailures);
                tracing::error!(%error, "storing a chunk failed; it is not acknowledged");
            }
        }
        outcome
    }

    fn file_chunk(
        &mut self,
        bytes: Vec<u8>,
        now: Instant,
        from: Option<&str>,
    ) -> Result<Filed, IncidentError> {
        let header = parse_header(&bytes)?;
        if let Some(node) = self.topology.nodes.get(header.switch as usize) {
            if node.kind != NodeKind::Switch {
                return Err(IncidentError::BadChunk(format!(
                    "chunk claims to come from {} which is not a switch",
                    node.name
                )));
            }
            if let Some(from) = from.filter(|from| *from != node.name) {
                return Err(IncidentError::BadChunk(format!(
                    "chunk of switch {} sent by {from} (its certificate's name): an agent \
                     reports only for its own switch",
                    node.name
                )));
            }
        } else {
            return Err(IncidentError::BadChunk(format!(
                "chunk from switch {} which the topology does not have",
                header.switch
            )));
        }
        let key = (header.switch, header.chunk_index);
        if let Some(stored) = self
            .incidents
            .get(&header.event_id)
            .and_then(|i| i.chunks.get(&key))
        {
            // A resend carries the same bytes; other bytes under the same key are a
            // conflict, refused loudly (the first copy stays: which one is true cannot be
            // told from here).
            if *stored == bytes {
                return Ok(Filed {
                    accepted: Accepted::Duplicate,
                    decode: None,
                });
            }
            return Err(IncidentError::BadChunk(format!(
                "chunk {} of switch {} for event {} conflicts with the copy already stored \
                 (same switch, event and index, other contents); refused",
                header.chunk_index, header.switch, header.event_id
            )));
        }
        self.check_limits(&header, bytes.len(), now)?;
        let record = Record::Chunk {
            hex: to_hex(&bytes),
        };
        let at_ms = self.store.append(&record)?;
        let decode = self.insert_chunk(bytes, now, at_ms, Store::framed_len(at_ms, &record))?;
        Ok(Filed {
            accepted: Accepted::New,
            decode,
        })
    }

    fn insert_chunk(
        &mut self,
        bytes: Vec<u8>,
        now: Instant,
        at_ms: u64,
        bytes_in_log: u64,
    ) -> Result<Option<PendingDecode>, IncidentError> {
        let header = parse_header(&bytes)?;
        let incident = self.incidents.entry(header.event_id).or_default();
        if incident.chunks.is_empty() && incident.state.is_none() {
            incident.stored_at_ms = at_ms;
        }
        incident.stored_bytes += bytes_in_log;
        incident.last_activity = Some(now);
        if incident.state.is_none() {
            incident.state = Some(IncidentState::Collecting);
        }
        if header.last {
            incident
                .last_index
                .insert(header.switch, header.chunk_index);
        }
        *incident.chunk_bytes.entry(header.switch).or_default() += bytes.len();
        incident
            .chunks
            .insert((header.switch, header.chunk_index), bytes);
        // Once all this switch's chunks are present, its report is to be decoded (by the
        // caller: the service decodes without holding the incident set's lock).
        if let Some(last) = incident.last_index.get(&header.switch).copied() {
            let all = (0..=last).all(|i| incident.chunks.contains_key(&(header.switch, i)));
            if all
                && !incident.reports.contains_key(&header.switch)
                && incident.decoding.insert(header.switch)
            {
                let mut joined = Vec::new();
                for i in 0..=last {
                    joined.extend_from_slice(&incident.chunks[&(header.switch, i)]);
                }
                return Ok(Some(PendingDecode {
                    event_id: header.event_id,
                    switch: header.switch,
                    bytes: joined,
                }));
            }
        }
        Ok(None)
    }

    /// Installs a decoded report (or why it could not be decoded) and returns the diagnosis
    /// to run if the incident is now complete.
    pub(crate) fn deliver(&mut self, decoded: DecodedReport) -> Option<PendingDiagnosis> {
        let event_id = self.deliver_quietly(decoded)?;
        self.try_complete(event_id)
    }

    /// [`IncidentSet::deliver`] without concluding the incident (replay concludes after
    /// every record is in); returns its event id.
    fn deliver_quietly(&mut self, decoded: DecodedReport) -> Option<u64> {
        let DecodedReport {
            event_id,
            switch,
            report,
        } = decoded;
        let incident = self.incidents.get_mut(&event_id)?;
        incident.decoding.remove(&switch);
        match report {
            Ok(report) => {
                incident.reports.insert(switch, report);
                incident.errors.remove(&switch);
            }
            Err(error) => {
                incident.errors.insert(switch, error);
            }
        }
        Some(event_id)
    }

    /// Refuses a chunk beyond the intake limits ([`IntakeLimits`]) before it is stored.
    fn check_limits(
        &mut self,
        header: &ChunkHeaderRepr,
        len: usize,
        now: Instant,
    ) -> Result<(), IncidentError> {
        let limits = self.limits;
        match self.incidents.get(&header.event_id) {
            Some(incident) => {
                let sent = incident
                    .chunk_bytes
                    .get(&header.switch)
                    .copied()
                    .unwrap_or(0);
                if sent + len > limits.max_report_bytes {
                    return Err(IncidentError::BadChunk(format!(
                        "the report of switch {} for event {} passes {} bytes (limit {}); refused",
                        header.switch,
                        header.event_id,
                        sent + len,
                        limits.max_report_bytes
                    )));
                }
            }
            None => {
                // A new incident: the switch's rate, then the number collecting.
                let bucket = self
                    .buckets
                    .entry(header.switch)
                    .or_insert((limits.incident_burst, now));
                let refill = now.saturating_duration_since(bucket.1).as_secs_f64()
                    * limits.incidents_per_switch_per_s;
                bucket.0 = (bucket.0 + refill).min(limits.incident_burst);
                bucket.1 = now;
                if bucket.0 < 1.0 {
                    return Err(IncidentError::Busy(format!(
                        "switch {} opens incidents faster than {} per second (burst {}); resend later",
                        header.switch, limits.incidents_per_switch_per_s, limits.incident_burst
                    )));
                }
                let collecting = self
                    .incidents
                    .values()
                    .filter(|i| i.state == Some(IncidentState::Collecting))
                    .count();
                if collecting >= limits.max_collecting {
                    return Err(IncidentError::Busy(format!(
                        "{collecting} incidents are collecting reports (limit {}); resend later",
                        limits.max_collecting
                    )));
                }
                if len > limits.max_report_bytes {
                    return Err(IncidentError::BadChunk(format!(
                        "a chunk of {len} bytes passes the {}-byte report limit; refused",
                        limits.max_report_bytes
                    )));
                }
                if let Some(bucket) = self.buckets.get_mut(&header.switch) {
                    bucket.0 -= 1.0;
                }
            }
        }
        Ok(())
    }

    /// Switches named by the reports (the next hops of the polling packet) that are not
    /// complete, and the complete ones.
    fn coverage(&self, incident: &Incident) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let reported: BTreeSet<NodeId> = incident.reports.keys().copied().collect();
        let mut expected = reported.clone();
        for (switch, report) in &incident.reports {
            // The switch the polling packet came from (upstream) and every switch it was
            // sent on to.
            let ports = std::iter::once(&report.polling)
                .chain(&report.more_polling)
                .flat_map(|p| {
                    std::iter::once(p.ingress_port).chain(p.egress.iter().map(|e| e.port))
                });
            for port in ports {
                let peer = self.topology.peer(PortRef {
                    node: *switch,
                    port,
                });
                if let Some(peer) = peer {
                    let is_switch = self
                        .topology
                        .nodes
                        .get(peer.node as usize)
                        .is_some_and(|n| n.kind == NodeKind::Switch);
                    if is_switch {
                        expected.insert(peer.node);
                    }
                }
            }
        }
        // Switches that sent chunks but whose report is incomplete are missing too.
        expected.extend(incident.chunks.keys().map(|(switch, _)| *switch));
        let missing = expected.difference(&reported).copied().collect();
        (reported, missing)
    }

    /// The diagnosis of the incident if every switch named by its reports has reported.
    fn try_complete(&mut self, event_id: u64) -> Option<PendingDiagnosis> {
        let incident = self.incidents.get(&event_id)?;
        if incident.state != Some(IncidentState::Collecting)
            || incident.diagnosing
            || incident.reports.is_empty()
        {
            return None;
        }
        let (_, missing) = self.coverage(incident);
        if missing.is_empty() {
            self.begin(event_id, IncidentState::Complete)
        } else {
            None
        }
    }

    /// Concludes a collecting incident as `state`: marks its diagnosis as running and
    /// returns what it needs (the reports present now).
    fn begin(&mut self, event_id: u64, state: IncidentState) -> Option<PendingDiagnosis> {
        let incident = self.incidents.get_mut(&event_id)?;
        if incident.state != Some(IncidentState::Collecting) || incident.diagnosing {
            return None;
        }
        incident.diagnosing = true;
        Some(PendingDiagnosis {
            event_id,
            state,
            reports: incident.reports.values().cloned().collect(),
            topology: self.topology.clone(),
            options: self.options.clone(),
            counters: self.counters.clone(),
            #[cfg(test)]
            gate: self.diagnosis_gate.clone(),
        })
    }

    /// Installs a diagnosis: the incident takes its final state.
    fn install(&mut self, concluded: Concluded) {
        if let Some(incident) = self.incidents.get_mut(&concluded.event_id) {
            incident.diagnosing = false;
            incident.state = Some(concluded.state);
            incident.diagnosis_json = concluded.json;
            incident.diagnosis_html = concluded.html;
            incident.diagnosis_text = concluded.text;
            incident.verdict = concluded.verdict;
        }
    }

    /// Installs the outcome of a diagnosis begun while the service ran (`accept_deferred`,
    /// `accept`, `expire`), counts and logs it. (Replay on open installs without logging.)
    pub(crate) fn conclude(&mut self, concluded: Concluded) {
        self.counters.bump(Counter::IncidentsConcluded);
        tracing::info!(
            event_id = concluded.event_id,
            state = concluded.state.as_str(),
            verdict = concluded.verdict.as_deref().unwrap_or(""),
            "incident concluded"
        );
        self.install(concluded);
    }

    /// Diagnoses incidents that have waited longer than the timeout for missing switches
    /// (their timeout is stored first). An incident whose diagnosis is already running on
    /// another thread (after `accept_deferred`) is left to it. On a store failure the
    /// incidents before it are concluded, the rest stay due.
    pub fn expire(&mut self, now: Instant) -> Result<Vec<u64>, IncidentError> {
        let due: Vec<u64> = self
            .incidents
            .iter()
            .filter(|(_, i)| {
                i.state == Some(IncidentState::Collecting)
                    && !i.diagnosing
                    && i.last_activity
                        .is_some_and(|t| now.duration_since(t) >= self.timeout)
            })
            .map(|(id, _)| *id)
            .collect();
        for event_id in &due {
            let record = Record::TimedOut {
                event_id: *event_id,
            };
            let stored = self.store.append(&record);
            if let Ok(at_ms) = stored {
                if let Some(incident) = self.incidents.get_mut(event_id) {
                    incident.stored_bytes += Store::framed_len(at_ms, &record);
                }
            }
            if let Err(error) = stored {
                self.counters.bump(Counter::StoreFailures);
                tracing::error!(
                    event_id = *event_id,
                    %error,
                    "storing an incident's timeout failed; it stays collecting"
                );
                return Err(error.into());
            }
            if let Some(pending) = self.begin(*event_id, IncidentState::TimedOut) {
                let concluded = pending.run();
                self.conclude(concluded);
            }
        }
        Ok(due)
    }

    /// Sets the intake limits.
    pub fn set_limits(&mut self, limits: IntakeLimits) {
        self.limits = limits;
    }

    /// Sets how long and how much the store keeps (applied by [`IncidentSet::retain`]).
    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    /// Bytes in the store's log.
    pub fn store_len(&self) -> u64 {
        self.store.len()
    }

    /// Applies the retention policy at wall-clock `now_ms` (ms since the Unix epoch): drops
    /// incidents first stored before `now_ms − max_age`, then, while the log is larger than
    /// `max_bytes`, the oldest concluded incidents until it is under three quarters of it,
    /// and rewrites the log without them (atomically: on failure nothing is dropped).
    /// Returns the event ids dropped. An incident whose diagnosis is running is kept.
    pub fn retain(&mut self, now_ms: u64) -> Result<Vec<u64>, IncidentError> {
        let Retention { max_age, max_bytes } = self.retention;
        let cutoff = now_ms.saturating_sub(max_age.as_millis() as u64);
        let mut drop: BTreeSet<u64> = self
            .incidents
            .iter()
            .filter(|(_, i)| !i.diagnosing && i.stored_at_ms < cutoff)
            .map(|(id, _)| *id)
            .collect();
        let mut live: u64 = self
            .incidents
            .iter()
            .filter(|(id, _)| !drop.contains(id))
            .map(|(_, i)| i.stored_bytes)
            .sum();
        if self.store.len() > max_bytes || live > max_bytes {
            let target = max_bytes / 4 * 3;
            let mut oldest: Vec<(u64, u64)> = self
                .incidents
                .iter()
                .filter(|(id, i)| {
                    !drop.contains(id)
                        && !i.diagnosing
                        && i.state.is_some_and(|s| s != IncidentState::Collecting)
                })
                .map(|(id, i)| (i.stored_at_ms, *id))
                .collect();
            oldest.sort_unstable();
            for (_, id) in oldest {
                if live <= target {
                    break;
                }
                live -= self.incidents[&id].stored_bytes;
                drop.insert(id);
            }
        }
        // Nothing to drop and little garbage: leave the log alone.
        if drop.is_empty() && self.store.len() <= max_bytes {
            return Ok(Vec::new());
        }
        let mut records: Vec<(u64, Record)> = Vec::new();
        for (id, incident) in &self.incidents {
            if drop.contains(id) {
                continue;
            }
            for bytes in incident.chunks.values() {
                records.push((incident.stored_at_ms, Record::Chunk { hex: to_hex(bytes) }));
            }
            if incident.state == Some(IncidentState::TimedOut) {
                records.push((incident.stored_at_ms, Record::TimedOut { event_id: *id }));
            }
        }
        if let Err(error) = self.store.rewrite(records.iter().map(|(at, r)| (*at, r))) {
            self.counters.bump(Counter::StoreFailures);
            tracing::error!(%error, "compacting the store failed; nothing was dropped");
            return Err(error.into());
        }
        for id in &drop {
            self.incidents.remove(id);
            self.counters.bump(Counter::IncidentsDropped);
        }
        if !drop.is_empty() {
            tracing::info!(
                dropped = drop.len(),
                kept = self.incidents.len(),
                log_bytes = self.store.len(),
                "retention: old incidents dropped, store compacted"
            );
        }
        Ok(drop.into_iter().collect())
    }

    /// Summary of one incident.
    pub fn summary(&self, event_id: u64) -> Option<IncidentSummary> {
        let incident = self.incidents.get(&event_id)?;
        let (reported, missing) = self.coverage(incident);
        Some(IncidentSummary {
            event_id,
            state: incident.state.unwrap_or(IncidentState::Collecting),
            reported_switches: reported.into_iter().collect(),
            missing_switches: missing.into_iter().collect(),
            chunks: incident.chunks.len(),
            errors: incident.errors.values().cloned().collect(),
            verdict: incident.verdict.clone(),
        })
    }

    /// Up to `limit` incidents with event ids above `after` (all when `None`), ascending;
    /// and the number of incidents.
    pub fn page(&self, after: Option<u64>, limit: usize) -> (Vec<IncidentSummary>, usize) {
        let start = match after {
            Some(after) => std::ops::Bound::Excluded(after),
            None => std::ops::Bound::Unbounded,
        };
        let page = self
            .incidents
            .range((start, std::ops::Bound::Unbounded))
            .take(limit)
            .filter_map(|(id, _)| self.summary(*id))
            .collect();
        (page, self.incidents.len())
    }

    /// Every incident, newest event id last.
    pub fn list(&self) -> Vec<IncidentSummary> {
        self.incidents
            .keys()
            .filter_map(|id| self.summary(*id))
            .collect()
    }

    /// The diagnosis JSON of an incident, once diagnosed.
    pub fn diagnosis_json(&self, event_id: u64) -> Option<&str> {
        self.incidents.get(&event_id)?.diagnosis_json.as_deref()
    }

    /// The plain-text explanation of an incident, once diagnosed.
    pub fn diagnosis_text(&self, event_id: u64) -> Option<&str> {
        self.incidents.get(&event_id)?.diagnosis_text.as_deref()
    }

    /// The HTML report of an incident, once diagnosed.
    pub fn diagnosis_html(&self, event_id: u64) -> Option<&str> {
        self.incidents.get(&event_id)?.diagnosis_html.as_deref()
    }

    /// Every complete switch report of an incident, by switch id (including reports that
    /// arrived after it was diagnosed), e.g. to diagnose the same telemetry again.
    pub fn reports(&self, event_id: u64) -> Option<Vec<TelemetryReport>> {
        Some(
            self.incidents
                .get(&event_id)?
                .reports
                .values()
                .cloned()
                .collect(),
        )
    }
}
