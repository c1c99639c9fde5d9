//! Errors of the analyzer: input that cannot be analysed at all. Gaps in otherwise usable
//! telemetry are not errors but [`crate::model::Finding`]s in the diagnosis.

use std::path::PathBuf;

use hawkmesh_wire::telemetry::{FiveTupleParseError, TelemetryWireError};
use hawkmesh_wire::topology::{NodeId, PortNo, TopologyError};

/// Why an incident cannot be diagnosed.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzerError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSON file does not parse.
    #[error("{path}:{line}:{column}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Line of the error (1-based).
        line: usize,
        /// Column of the error (1-based).
        column: usize,
        /// What serde_json says.
        message: String,
    },
    /// A binary report stream does not parse.
    #[error("{path}: {source}")]
    Wire {
        /// The file.
        path: PathBuf,
        /// The decoding error, with its byte offset.
        source: TelemetryWireError,
    },
    /// The topology is inconsistent.
    #[error("topology: {0}")]
    Topology(#[from] TopologyError),
    /// The victim 5-tuple does not parse.
    #[error("victim: {0}")]
    Victim(#[from] FiveTupleParseError),
    /// No report was found.
    #[error("no telemetry reports found in {path} (expected *.json files holding a report or an array of reports, or *.hkt binary chunk streams)")]
    NoReports {
        /// The path searched.
        path: PathBuf,
    },
    /// Reports of several polling events were given for one diagnosis.
    #[error("the reports belong to different polling events: {events}; an incident is the reports of one event (pass the files of one event)")]
    MixedEvents {
        /// Each event id with the first file naming it.
        events: String,
    },
    /// One switch reported twice for the event with different contents.
    #[error("switch {switch} reported event {event_id} twice with different contents ({first} and {second}); which one is true cannot be told")]
    ConflictingReports {
        /// The switch.
        switch: NodeId,
        /// The event.
        event_id: u64,
        /// The first report's source.
        first: String,
        /// The conflicting one's.
        second: String,
    },
    /// The victim is not a flow of this fabric.
    #[error("victim {victim} is not a flow of this fabric: {reason}")]
    UnknownVictim {
        /// The victim.
        victim: hawkmesh_wire::telemetry::FiveTuple,
        /// Why.
        reason: String,
    },
    /// A report has a format version this build does not read.
    #[error("{source_name}: report of switch {switch} has format version {version}; this build reads versions {} to {}", hawkmesh_wire::telemetry::TELEMETRY_MIN_FORMAT_VERSION, hawkmesh_wire::telemetry::TELEMETRY_FORMAT_VERSION)]
    UnsupportedVersion {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// The version.
        version: u8,
    },
    /// A report names a switch the topology does not have (or a host).
    #[error("{source_name}: report names switch {switch}, which is not a switch of the topology")]
    UnknownSwitch {
        /// File (and report index) the report came from.
        source_name: String,
        /// The node id.
        switch: NodeId,
    },
    /// A record names a port that has no link in the topology.
    #[error("{source_name}: {record} names port {port} of switch {switch_name} (id {switch}), which has no link in the topology")]
    UnknownPort {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// Its name.
        switch_name: String,
        /// The port.
        port: PortNo,
        /// Which record, e.g. "port record of epoch 12".
        record: String,
    },
    /// Epoch sizes disagree, or are not powers of two.
    #[error("{source_name}: epoch size {found} ns {problem}")]
    EpochSize {
        /// File (and report index) the report came from.
        source_name: String,
        /// The size found.
        found: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// An epoch does not sit on the epoch grid.
    #[error(
        "{source_name}: epoch {epoch_id} of switch {switch} starts at {start_ns} ns, {problem}"
    )]
    EpochMisaligned {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// The epoch id given.
        epoch_id: u64,
        /// The start given.
        start_ns: u64,
        /// What is wrong.
        problem: String,
    },
    /// Epochs of one report are not in strictly increasing time order.
    #[error("{source_name}: epochs of switch {switch} out of order: epoch starting at {next_ns} ns follows the one starting at {previous_ns} ns")]
    EpochOutOfOrder {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// Start of the earlier-listed epoch.
        previous_ns: u64,
        /// Start of the epoch listed after it.
        next_ns: u64,
    },
    /// Two records of one epoch describe the same thing.
    #[error("{source_name}: switch {switch} epoch starting at {start_ns} ns: duplicate {record}")]
    DuplicateRecord {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// The epoch.
        start_ns: u64,
        /// Which record.
        record: String,
    },
    /// Counts contradict each other within one record.
    #[error("{source_name}: switch {switch} epoch starting at {start_ns} ns: {problem}")]
    InconsistentRecord {
        /// File (and report index) the report came from.
        source_name: String,
        /// The switch.
        switch: NodeId,
        /// The epoch.
        start_ns: u64,
        /// What contradicts what.
        problem: String,
    },
    /// Output could not be serialised.
    #[error("serialising the diagnosis: {0}")]
    Serialize(String),
}
