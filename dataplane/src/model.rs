//! The executable model: an interpreter of a [`Program`] with the semantics of the emitted
//! P4 (same parser, same statements, same register actions, same CRC-32 hashes).
//!
//! The model is one switch. A pass takes packet **bytes** and intrinsic metadata and fills
//! a reusable output (no allocation per packet once the buffers have grown):
//! [`DataPlane::ingress`] (parser → ingress control → deparser; the decision: unicast,
//! multicast group, drop, clone to CPU, digests, bridged metadata) and
//! [`DataPlane::egress`] (egress parser → egress control → deparser). [`DataPlane::process`]
//! runs a whole switch with zero queueing (ingress, replication, egress, CPU copies), which is
//! what the packet-trace tests and the BMv2 harness compare.
//!
//! Target differences and how the model handles them:
//! - Timestamps: the model takes ns (Tofino). BMv2 counts µs; the v1model program scales
//!   them by 1000, so BMv2 behaves like the model with µs-granular clocks.
//! - Queue depth: the model takes [`EgressInput::enq_qdepth`] in the target's unit (Tofino:
//!   80-byte cells; BMv2: packets). Registers store that unit; the agent converts.
//! - Clones: an ingress clone carries the headers as parsed (the rule checker forbids header
//!   rewrites before a clone in ingress, because Tofino and BMv2 differ there); an egress
//!   clone carries the packet as deparsed by egress. Cloned metadata has its end-of-pass
//!   value on both targets.
//! - Parser: a header that does not fit the remaining bytes stops parsing (the header stays
//!   invalid) and the packet continues, as with v1model `parser_error`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::ModelError;
use crate::ir::*;

mod analysis;
mod bits;
mod code;
mod compile;
mod crc;
#[rustfmt::skip]
mod generated;
mod intern;
mod interp;
mod native;
mod switch;
#[cfg(test)]
mod tests;

// The stages, by name in this module: the emitted `generated.rs` and `native.rs` use them
// through `use super::*`.
use analysis::*;
use code::*;
use compile::*;
use crc::*;
use intern::*;
use interp::*;

use bits::*;
pub use bits::{read_bits, write_bits};
pub use switch::Model;

/// Largest packet the model accepts.
pub const MAX_PACKET_BYTES: usize = 16 * 1024;
/// Most bridged / cloned metadata fields a program may have.
pub const MAX_CARRIED: usize = 24;

/// Ingress intrinsic inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct IngressInput {
    /// Arrival port.
    pub ingress_port: u16,
    /// 48-bit arrival timestamp, ns.
    pub tstamp_ns: u64,
    /// The egress port the fabric's L3/ECMP chose (used by [`Routing::FromInput`]).
    pub routed_egress_port: Option<u16>,
}

/// Egress intrinsic inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EgressInput {
    /// Port it entered the switch by.
    pub ingress_port: u16,
    /// Port it leaves by.
    pub egress_port: u16,
    /// Queue (priority).
    pub queue: u8,
    /// 48-bit enqueue time, ns.
    pub enq_tstamp_ns: u64,
    /// Queue depth at enqueue in the target's unit.
    pub enq_qdepth: u32,
    /// Wire bytes.
    pub packet_length: u16,
}

/// Metadata carried between passes (bridged ingress → egress, or preserved in a clone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carried {
    /// Values in the order of [`Program::bridged_fields`] / [`Program::cloned_fields`].
    pub values: [u64; MAX_CARRIED],
    /// 0 = normal packet, [`CLONE_INGRESS`], [`CLONE_EGRESS`].
    pub clone_kind: u8,
}

impl Default for Carried {
    fn default() -> Self {
        Carried {
            values: [0; MAX_CARRIED],
            clone_kind: 0,
        }
    }
}

/// What ingress decided about the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Forward {
    /// No destination (dropped by the traffic manager).
    #[default]
    None,
    /// One port.
    Unicast(u16),
    /// A multicast group.
    Multicast(u16),
}

/// A digest message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestMessage {
    /// Digest name.
    pub digest: DigestId,
    /// Field values in declaration order.
    pub values: Vec<u64>,
}

/// Result of a pass.
#[derive(Clone, Debug, Default)]
pub struct PassOutput {
    /// The deparsed packet.
    pub bytes: Vec<u8>,
    /// Dropped by the program.
    pub dropped: bool,
    /// Ingress only: where it goes.
    pub forward: Forward,
    /// Bridged metadata (ingress → egress).
    pub bridged: Carried,
    /// A clone to the CPU was requested: its bytes and metadata.
    pub clone: Option<Carried>,
    /// Bytes of the clone (valid when `clone` is set).
    pub clone_bytes: Vec<u8>,
    /// Digests.
    pub digests: Vec<DigestMessage>,
}

impl PassOutput {
    fn reset(&mut self) {
        self.bridged = Carried::default();
        self.reset_but_bridged();
    }

    /// [`PassOutput::reset`] except `bridged` (a pass that hands the bridged fields over
    /// packed leaves it as it is).
    fn reset_but_bridged(&mut self) {
        self.bytes.clear();
        self.dropped = false;
        self.forward = Forward::None;
        self.clone = None;
        self.clone_bytes.clear();
        self.digests.clear();
    }
}

/// What a whole switch emitted for one input packet ([`DataPlane::process`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchOutput {
    /// (egress port, bytes), in port order.
    pub ports: Vec<(u16, Vec<u8>)>,
    /// Copies that reached the CPU port.
    pub cpu: Vec<Vec<u8>>,
    /// Digests.
    pub digests: Vec<DigestMessage>,
}

pub use hawkmesh_wire::control::TableEntry;

/// How the forwarding table gets its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// From [`IngressInput::routed_egress_port`] (netsim computes L3/ECMP).
    FromInput,
    /// From entries added with [`DataPlane::table_add`].
    FromTable,
}

/// The small trait the simulator, tests and the switch agent use.
pub trait DataPlane {
    /// Runs the ingress pipeline on `packet`.
    fn ingress(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
    ) -> Result<(), ModelError>;
    /// Runs the egress pipeline on `packet` with the metadata carried from ingress (or
    /// preserved in a clone).
    fn egress(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: &Carried,
        out: &mut PassOutput,
    ) -> Result<(), ModelError>;
    /// A whole switch with zero queueing time.
    fn process(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        queue: u8,
    ) -> Result<SwitchOutput, ModelError>;
    /// Reads one register cell (pairs: `hi << 32 | lo`).
    fn register_read(&self, register: &str, index: u64) -> Result<u64, ModelError>;
    /// Writes one register cell.
    fn register_write(&mut self, register: &str, index: u64, value: u64) -> Result<(), ModelError>;
    /// Reads a whole register (BF Runtime bulk read after REGISTER_SYNC).
    fn register_read_all(&self, register: &str) -> Result<&[u64], ModelError>;
    /// Makes data-plane register values visible to the control plane (BF Runtime
    /// `REGISTER_SYNC`); immediate in the model.
    fn register_sync(&mut self, register: &str) -> Result<(), ModelError>;
    /// Clears a whole register.
    fn register_reset(&mut self, register: &str) -> Result<(), ModelError>;
    /// Adds a table entry.
    fn table_add(&mut self, table: &str, entry: TableEntry) -> Result<(), ModelError>;
    /// Configures a multicast group's member ports.
    fn multicast_group_set(&mut self, group: u16, ports: Vec<u16>);
}

/// The Rust source of the native back end for `variants` (name, program): the file
/// `dataplane/src/model/generated.rs` that `hawkmesh-codegen --write` writes.
pub fn emit_native(variants: &[(&str, &Program)]) -> Result<String, ModelError> {
    native::emit(variants)
}
