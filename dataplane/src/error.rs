//! Errors of the codegen crate: rule violations found while building a program
//! ([`BuildError`]) and control-plane / packet errors of the executable model
//! ([`ModelError`]).

use thiserror::Error;

/// A program breaks a rule of the target (Tofino) or is malformed. Every variant names the
/// object and says what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BuildError {
    /// Tofino: a register lives in one stage and a packet passes it once, so one pass may
    /// execute at most one register action per register.
    #[error("{gress}: register `{register}` may be accessed twice on one path (`{first}` then `{second}`); a Tofino stateful ALU allows one read-modify-write per register per pass — merge them into one RegisterAction or put them on exclusive if/else branches")]
    RegisterTouchedTwice {
        /// Pipeline.
        gress: String,
        /// Register name.
        register: String,
        /// First register action.
        first: String,
        /// Second register action.
        second: String,
    },
    /// Tofino: a register belongs to ingress or egress, not both.
    #[error("register `{register}` is used in both ingress and egress; Tofino registers belong to one pipeline")]
    RegisterInBothGresses {
        /// Register name.
        register: String,
    },
    /// A table or hash unit used twice on one path or in both pipelines.
    #[error("{gress}: {kind} `{name}` is used twice on one path or in both pipelines; Tofino places it in one stage of one pipeline")]
    UsedTwice {
        /// Pipeline.
        gress: String,
        /// "table" or "hash unit".
        kind: &'static str,
        /// Name.
        name: String,
    },
    /// Stateful ALU restriction.
    #[error("RegisterAction `{action}`: {message} (TNA RegisterAction / Tofino stateful ALU)")]
    StatefulAlu {
        /// Register action.
        action: String,
        /// What is wrong.
        message: String,
    },
    /// A table key is wider than a match unit allows.
    #[error("table `{table}`: {kind} key is {bits} bits, more than the {limit}-bit limit of one Tofino match unit")]
    TableKeyTooWide {
        /// Table.
        table: String,
        /// "exact" or "ternary".
        kind: &'static str,
        /// Key bits.
        bits: u32,
        /// Limit.
        limit: u32,
    },
    /// Type or width error in an expression or statement.
    #[error("{place}: {message}")]
    Type {
        /// Where.
        place: String,
        /// What.
        message: String,
    },
    /// A statement or intrinsic used in the wrong pipeline.
    #[error("{place}: {what} is only available in {allowed}")]
    WrongGress {
        /// Where.
        place: String,
        /// What.
        what: String,
        /// Where it is allowed.
        allowed: String,
    },
    /// One path both unicasts and multicasts (TNA would send both, v1model only one).
    #[error("{place}: a path sets both a unicast egress port and a multicast group; TNA sends both copies while v1model sends only the multicast ones — choose one per path")]
    UnicastAndMulticast {
        /// Where.
        place: String,
    },
    /// A header was rewritten in ingress before a clone on the same path.
    #[error("{place}: header field `{field}` is written before the packet is cloned to the CPU; whether a clone sees ingress rewrites differs between Tofino and BMv2 — clone first or rewrite in egress")]
    HeaderWriteBeforeClone {
        /// Where.
        place: String,
        /// Field.
        field: String,
    },
    /// Digest larger than the Tofino learning quantum.
    #[error("digest `{digest}` is {bytes} bytes; Tofino digests carry at most {limit} bytes")]
    DigestTooLarge {
        /// Digest.
        digest: String,
        /// Size.
        bytes: u32,
        /// Limit.
        limit: u32,
    },
    /// Parser problem.
    #[error("parser state `{state}`: {message}")]
    Parser {
        /// State.
        state: String,
        /// What.
        message: String,
    },
    /// Duplicate name.
    #[error("duplicate {kind} name `{name}`")]
    Duplicate {
        /// Kind of object.
        kind: &'static str,
        /// Name.
        name: String,
    },
    /// Invalid program parameter.
    #[error("parameter `{name}`: {message}")]
    Parameter {
        /// Name.
        name: &'static str,
        /// What.
        message: String,
    },
}

/// Errors of the executable model (packets and control-plane requests never panic).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ModelError {
    /// No register of that name.
    #[error("no register named `{0}`")]
    UnknownRegister(String),
    /// Index outside the register.
    #[error("register `{register}`: index {index} out of range (size {size})")]
    RegisterIndex {
        /// Register.
        register: String,
        /// Index requested.
        index: u64,
        /// Size.
        size: u32,
    },
    /// Value does not fit the cell.
    #[error("register `{register}`: value {value:#x} does not fit a {width}-bit cell")]
    RegisterValue {
        /// Register.
        register: String,
        /// Value.
        value: u64,
        /// Width.
        width: u8,
    },
    /// No table of that name.
    #[error("no table named `{0}`")]
    UnknownTable(String),
    /// No such action in the table.
    #[error("table `{table}`: no action named `{action}`")]
    UnknownAction {
        /// Table.
        table: String,
        /// Action.
        action: String,
    },
    /// Wrong key or parameter shape.
    #[error("table `{table}`: {message}")]
    TableEntry {
        /// Table.
        table: String,
        /// What.
        message: String,
    },
    /// Table full.
    #[error("table `{table}` is full ({size} entries)")]
    TableFull {
        /// Table.
        table: String,
        /// Capacity.
        size: u32,
    },
    /// Input packet too large for the model's buffers.
    #[error("packet of {len} bytes exceeds the model's {max}-byte limit")]
    PacketTooLarge {
        /// Bytes.
        len: usize,
        /// Limit.
        max: usize,
    },
}
