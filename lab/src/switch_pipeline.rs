//! The executable model as a netsim [`SwitchPipeline`]: every packet a netsim switch sees
//! is turned into real header bytes, run through the [`Model`] (the same interpreter the
//! packet tests and the BMv2 harness use) and the model's decision is mapped back.
//!
//! # Per packet
//!
//! ```text
//! netsim Packet ──serialise──► Ethernet | IPv4 (TOS = dscp<<2 | ecn, TTL) | UDP | BTH
//!   (fields)                   Ethernet | IEEE 802.1Qbb PFC frame (class vector, quanta)
//!                              Ethernet | IPv4 | UDP dport 0x6888 | 32-byte polling header
//!          ingress hook ──► Model::ingress ──► drop / egress override / multicast (PortSet)
//!                                         ├──► ingress clone → clone egress pass → CPU copy
//!                                         │     (polling copy with its port context)
//!                                         ├──► PFC frame → its own port's egress pass now
//!                                         └──► bridged metadata → Packet.bridge
//!          egress hook ───► Model::egress (bridged metadata from Packet.bridge) ──► drop,
//!                           egress clone → clone egress pass → CPU copy (eviction report)
//!          both hooks ────► rewritten DSCP / ECN / TTL / polling header back into the Packet
//! ```
//!
//! Only headers are built; the wire length travels as metadata (`packet_length`), so the
//! model never touches payload bytes. The IPv4 header checksum is left zero: neither the
//! program nor netsim reads it (the BMv2 harness recomputes it where bytes are compared).
//!
//! # Target units
//!
//! - Timestamps: netsim gives ns truncated to 48 bits, like Tofino's global timestamp.
//! - Queue depth: netsim gives the enqueue depth in bytes; the program (like Tofino's
//!   `eg_intr_md.enq_qdepth`) counts 80-byte cells, so the adapter passes
//!   `ceil(bytes / 80)`. Tofino rounds every packet up to whole cells, so a real switch
//!   reports a slightly larger figure for a queue of many small packets (at most one cell
//!   per queued packet).
//! - PFC frames are consumed by netsim's MAC (the pause is already applied); the program
//!   sends them to the egress pipeline of the port they arrived on (HAWKEYE §3.3, footnote
//!   2), which the adapter runs at once with zero queueing time.
//!
//! # Sharing the model with a switch agent
//!
//! The model lives in a [`SharedModel`]: in process (`Rc<RefCell<Model>>`), or inside the
//! `Device` of a model-backed BF Runtime server (`Arc<Mutex<Device>>`), whose gRPC service the
//! switch agent then talks to as it would to a Tofino. The adapter borrows it only inside a
//! hook call, so an agent holding another handle reads registers between
//! `Simulation::run_until` slices (or inside a host hook callback) with
//! `model.lock().register_read_all("port_packets")`. If a hook ever finds the model
//! borrowed, the packet passes unobserved and [`AdapterStats::busy`] counts it (never a
//! panic).

use std::cell::{Cell, RefCell, RefMut};
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hawkmesh_bfrt_model::Device;

use hawkmesh_netsim::hooks::{
    EgressActions, EgressMeta, IngressActions, IngressMeta, PortSet, SwitchPipeline,
};
use hawkmesh_netsim::packet::{Packet, PacketKind, CUSTOM_CAPACITY};
use hawkmesh_netsim::Simulation;
use hawkmesh_wire::pfc::{PfcRepr, PFC_FRAME_BYTES};
use hawkmesh_wire::topology::{NodeId, NodeKind};
use thiserror::Error;

use hawkmesh_dataplane::error::{BuildError, ModelError};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::{FieldOwner, Program};
use hawkmesh_dataplane::model::{
    read_bits, write_bits, DataPlane, EgressInput, Forward, IngressInput, Model, PassOutput,
    Routing, MAX_CARRIED,
};
use hawkmesh_dataplane::packets::field_layout;
use hawkmesh_dataplane::setup::{
    configure_model, configure_polling_ports, host_ports, is_tor, port_speeds, SetupError,
};
use hawkmesh_wire::dataplane::QDEPTH_UNIT_BYTES_TOFINO;

/// A model shared between the netsim adapter and a switch agent: in process, or served over
/// BF Runtime (the model inside a `bfrt-model` device).
#[derive(Clone, Debug)]
pub enum SharedModel {
    /// In process: the agent's `ModelBackend` holds the other handle.
    Local(Rc<RefCell<Model>>),
    /// Inside a BF Runtime device: the agent reaches it through the device's gRPC server.
    Served(Arc<Mutex<Device>>),
}

/// The model, borrowed from a [`SharedModel`].
#[derive(Debug)]
pub enum ModelGuard<'a> {
    /// In process.
    Local(RefMut<'a, Model>),
    /// Inside a device.
    Served(MutexGuard<'a, Device>),
}

impl Deref for ModelGuard<'_> {
    type Target = Model;
    fn deref(&self) -> &Model {
        match self {
            ModelGuard::Local(m) => m,
            ModelGuard::Served(d) => &d.model,
        }
    }
}

impl DerefMut for ModelGuard<'_> {
    fn deref_mut(&mut self) -> &mut Model {
        match self {
            ModelGuard::Local(m) => m,
            ModelGuard::Served(d) => &mut d.model,
        }
    }
}

impl SharedModel {
    /// A model in process.
    pub fn local(model: Model) -> SharedModel {
        SharedModel::Local(Rc::new(RefCell::new(model)))
    }

    /// A model inside a BF Runtime device (serve it with `bfrt_model::BfrtServer`).
    pub fn served(model: Model) -> SharedModel {
        SharedModel::Served(Arc::new(Mutex::new(Device::new(model))))
    }

    /// The model, or `None` while someone else holds it.
    pub fn try_borrow_mut(&self) -> Option<ModelGuard<'_>> {
        match self {
            SharedModel::Local(m) => m.try_borrow_mut().ok().map(ModelGuard::Local),
            SharedModel::Served(d) => match d.try_lock() {
                Ok(g) => Some(ModelGuard::Served(g)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    Some(ModelGuard::Served(p.into_inner()))
                }
                Err(std::sync::TryLockError::WouldBlock) => None,
            },
        }
    }

    /// The model, waiting for a device's server to let it go (a `RefCell` already
    /// borrowed panics, as `RefCell::borrow_mut` does: between hook calls it never is).
    pub fn lock(&self) -> ModelGuard<'_> {
        match self {
            SharedModel::Local(m) => ModelGuard::Local(m.borrow_mut()),
            SharedModel::Served(d) => {
                ModelGuard::Served(d.lock().unwrap_or_else(PoisonError::into_inner))
            }
        }
    }

    /// The in-process handle, for a `ModelBackend`.
    pub fn as_local(&self) -> Option<&Rc<RefCell<Model>>> {
        match self {
            SharedModel::Local(m) => Some(m),
            SharedModel::Served(_) => None,
        }
    }

    /// The device, for its BF Runtime server.
    pub fn as_served(&self) -> Option<&Arc<Mutex<Device>>> {
        match self {
            SharedModel::Local(_) => None,
            SharedModel::Served(d) => Some(d),
        }
    }
}

/// Converts a netsim queue depth in bytes to Tofino cells (rounded up; the cell size is the
/// program's `QDEPTH_UNIT_BYTES_TOFINO`).
pub fn qdepth_cells(bytes: u32) -> u32 {
    bytes.div_ceil(u32::from(QDEPTH_UNIT_BYTES_TOFINO))
}

/// Errors setting up the adapter.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum AdapterError {
    /// The program does not build.
    #[error("the switch program does not build: {0}")]
    Build(#[from] BuildError),
    /// A control-plane request to the model failed.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// The program lacks a header or field the adapter serialises.
    #[error("the program has no `{header}.{field}`; the netsim adapter needs it to build packets")]
    MissingField {
        /// Header.
        header: &'static str,
        /// Field.
        field: &'static str,
    },
    /// The bridged metadata does not fit `Packet.bridge` (128 bits).
    #[error("bridged metadata needs {bits} bits; netsim's Packet.bridge carries 128")]
    BridgeTooWide {
        /// Bits needed.
        bits: u32,
    },
    /// The program's headers do not fit the adapter's header buffer.
    #[error("serialised headers need {bytes} bytes; the netsim adapter's buffer holds {max}")]
    HeadersTooLong {
        /// Bytes needed.
        bytes: usize,
        /// Buffer size.
        max: usize,
    },
    /// Configuring a switch's model from the fabric failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// netsim refused to install the pipeline.
    #[error("netsim has no switch with node id {0}")]
    NotASwitch(NodeId),
}

/// Counters of one adapter (shared so tests and agents can read them while netsim owns the
/// adapter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdapterStats {
    /// Ingress passes run.
    pub ingress: u64,
    /// Egress passes run.
    pub egress: u64,
    /// Copies handed to the CPU port.
    pub cpu_copies: u64,
    /// Packets the model dropped (ingress or egress).
    pub dropped: u64,
    /// Passes that returned a model error (the packet passed unobserved).
    pub errors: u64,
    /// Packets that passed unobserved because the model was borrowed elsewhere.
    pub busy: u64,
}

/// Absolute position of a field the adapter writes or reads (narrow: the layout is read on
/// every pass of every switch, and a simulator pass finds it out of cache). A field of one
/// to four whole bytes is stored and loaded as such (`bytes`, from byte `at`); others go
/// through the model's bit writer.
#[derive(Clone, Copy, Debug)]
struct Pos {
    bit: u32,
    width: u8,
    /// 1 to 4 when the field is that many whole bytes, else 0.
    bytes: u8,
    at: u16,
}

impl Pos {
    fn new(bit: usize, width: u8) -> Option<Pos> {
        let bytes = if bit % 8 == 0 && width % 8 == 0 && (8..=32).contains(&width) {
            width / 8
        } else {
            0
        };
        Some(Pos {
            bit: u32::try_from(bit).ok()?,
            width,
            bytes,
            at: u16::try_from(bit / 8).ok()?,
        })
    }
}

/// Bytes of the adapter's header buffer: every serialised packet (headers only) fits, and
/// the fixed fields are copied from a template of this size at once.
const HEAD_BYTES: usize = 128;

#[derive(Clone, Debug)]
struct Layout {
    eth_bytes: usize,
    ip_bytes: usize,
    udp_bytes: usize,
    bth_bytes: usize,
    polling_bytes: usize,
    eth_dst: Pos,
    eth_src: Pos,
    eth_type: Pos,
    ip_version: Pos,
    ip_ihl: Pos,
    ip_dscp: Pos,
    ip_ecn: Pos,
    ip_total_len: Pos,
    ip_ttl: Pos,
    ip_protocol: Pos,
    ip_src: Pos,
    ip_dst: Pos,
    udp_sport: Pos,
    udp_dport: Pos,
    udp_len: Pos,
    bth_opcode: Pos,
    bth_pkey: Pos,
    bth_qp: Pos,
    bth_psn: Pos,
    polling_port: u16,
    ethertype_ipv4: u16,
    /// Ethernet | IPv4 | UDP with the fields that are the same for every packet (addresses
    /// of the Ethernet header, EtherType, IP version and header length), the rest zero.
    prefix: [u8; HEAD_BYTES],
    /// The byte of DSCP and ECN when they form it (`dscp << 2 | ecn`, as in IPv4).
    tos: Option<usize>,
    /// The fields sit where [`Standard`] says (Ethernet, IPv4 without options, UDP, BTH):
    /// serialised by stores at constant offsets.
    standard: bool,
}

/// Byte offsets of the fields in Ethernet | IPv4 (no options) | UDP | BTH, as the HAWKEYE
/// program declares them; [`Layout::new`] checks the program's layout against them.
struct Standard;

impl Standard {
    const TOS: usize = 15;
    const IP_TOTAL_LEN: usize = 16;
    const IP_TTL: usize = 22;
    const IP_PROTOCOL: usize = 23;
    const IP_SRC: usize = 26;
    const IP_DST: usize = 30;
    const UDP_SPORT: usize = 34;
    const UDP_DPORT: usize = 36;
    const UDP_LEN: usize = 38;
    const L4: usize = 42;
    const BTH_OPCODE: usize = 42;
    const BTH_PKEY: usize = 44;
    const BTH_QP: usize = 47;
    const BTH_PSN: usize = 51;

    /// Whether `l` is this layout.
    fn matches(l: &Layout) -> bool {
        let at = |p: Pos, at: usize, bytes: u8| p.bytes == bytes && p.at as usize == at;
        l.tos == Some(Self::TOS)
            && l.l4_offset() == Self::L4
            && at(l.ip_total_len, Self::IP_TOTAL_LEN, 2)
            && at(l.ip_ttl, Self::IP_TTL, 1)
            && at(l.ip_protocol, Self::IP_PROTOCOL, 1)
            && at(l.ip_src, Self::IP_SRC, 4)
            && at(l.ip_dst, Self::IP_DST, 4)
            && at(l.udp_sport, Self::UDP_SPORT, 2)
            && at(l.udp_dport, Self::UDP_DPORT, 2)
            && at(l.udp_len, Self::UDP_LEN, 2)
            && at(l.bth_opcode, Self::BTH_OPCODE, 1)
            && at(l.bth_pkey, Self::BTH_PKEY, 2)
            && at(l.bth_qp, Self::BTH_QP, 3)
            && at(l.bth_psn, Self::BTH_PSN, 3)
    }
}

impl Layout {
    fn new(p: &Program) -> Result<Self, AdapterError> {
        let pos = |header: &'static str, field: &'static str, base: usize| {
            field_layout(p, header, field)
                .and_then(|(bit, width)| Pos::new(base * 8 + bit, width))
                .ok_or(AdapterError::MissingField { header, field })
        };
        let len = |header: &'static str| {
            p.header_by_name(header)
                .map(|h| p.headers[h.0 as usize].bits(p) as usize / 8)
                .ok_or(AdapterError::MissingField { header, field: "*" })
        };
        let eth_bytes = len("ethernet")?;
        let ip_bytes = len("ipv4")?;
        let udp_bytes = len("udp")?;
        let ip = eth_bytes;
        let udp = ip + ip_bytes;
        let l4 = udp + udp_bytes;
        let constant = |name: &'static str| {
            p.constant(name).ok_or(AdapterError::MissingField {
                header: "constant",
                field: name,
            })
        };
        let mut layout = Layout {
            eth_bytes,
            ip_bytes,
            udp_bytes,
            bth_bytes: len("bth")?,
            polling_bytes: len("polling")?,
            eth_dst: pos("ethernet", "dst_addr", 0)?,
            eth_src: pos("ethernet", "src_addr", 0)?,
            eth_type: pos("ethernet", "ether_type", 0)?,
            ip_version: pos("ipv4", "version", ip)?,
            ip_ihl: pos("ipv4", "ihl", ip)?,
            ip_dscp: pos("ipv4", "dscp", ip)?,
            ip_ecn: pos("ipv4", "ecn", ip)?,
            ip_total_len: pos("ipv4", "total_len", ip)?,
            ip_ttl: pos("ipv4", "ttl", ip)?,
            ip_protocol: pos("ipv4", "protocol", ip)?,
            ip_src: pos("ipv4", "src_addr", ip)?,
            ip_dst: pos("ipv4", "dst_addr", ip)?,
            udp_sport: pos("udp", "src_port", udp)?,
            udp_dport: pos("udp", "dst_port", udp)?,
            udp_len: pos("udp", "length", udp)?,
            bth_opcode: pos("bth", "opcode", l4)?,
            bth_pkey: pos("bth", "partition_key", l4)?,
            bth_qp: pos("bth", "dest_qp", l4)?,
            bth_psn: pos("bth", "psn", l4)?,
            polling_port: constant("POLLING_UDP_PORT")? as u16,
            ethertype_ipv4: constant("ETHERTYPE_IPV4")? as u16,
            prefix: [0; HEAD_BYTES],
            tos: None,
            standard: false,
        };
        // Every packet's headers fit the buffer: the longest layer 4 is the polling header,
        // the BTH or a custom header; a PFC frame is a minimum-size frame.
        let longest = layout
            .l4_offset()
            .saturating_add(
                layout
                    .bth_bytes
                    .max(layout.polling_bytes)
                    .max(CUSTOM_CAPACITY),
            )
            .max(PFC_FRAME_BYTES);
        if longest > HEAD_BYTES {
            return Err(AdapterError::HeadersTooLong {
                bytes: longest,
                max: HEAD_BYTES,
            });
        }
        let mut prefix = [0u8; HEAD_BYTES];
        put(&mut prefix, layout.eth_dst, 0x02_00_00_00_00_02);
        put(&mut prefix, layout.eth_src, 0x02_00_00_00_00_01);
        put(&mut prefix, layout.eth_type, layout.ethertype_ipv4 as u64);
        put(&mut prefix, layout.ip_version, 4);
        put(&mut prefix, layout.ip_ihl, (ip_bytes / 4) as u64);
        layout.prefix = prefix;
        let (dscp, ecn) = (layout.ip_dscp, layout.ip_ecn);
        if dscp.bit % 8 == 0 && dscp.width == 6 && ecn.bit == dscp.bit + 6 && ecn.width == 2 {
            layout.tos = Some(dscp.bit as usize / 8);
        }
        layout.standard = Standard::matches(&layout);
        Ok(layout)
    }

    fn l4_offset(&self) -> usize {
        self.eth_bytes + self.ip_bytes + self.udp_bytes
    }
}

/// Writes the low `pos.width` bits of `value` (big-endian), like [`write_bits`].
#[inline(always)]
fn put(buf: &mut [u8], pos: Pos, value: u64) {
    let at = pos.at as usize;
    match pos.bytes {
        1 => buf[at] = value as u8,
        2 => buf[at..at + 2].copy_from_slice(&(value as u16).to_be_bytes()),
        3 => buf[at..at + 3].copy_from_slice(&(value as u32).to_be_bytes()[1..]),
        4 => buf[at..at + 4].copy_from_slice(&(value as u32).to_be_bytes()),
        _ => write_bits(buf, pos.bit as usize, pos.width, value),
    }
}

/// Reads a field, like [`read_bits`].
#[inline(always)]
fn get(buf: &[u8], pos: Pos) -> u64 {
    let at = pos.at as usize;
    match pos.bytes {
        1 => buf[at] as u64,
        2 => u16::from_be_bytes([buf[at], buf[at + 1]]) as u64,
        3 => u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as u64,
        4 => u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as u64,
        _ => read_bits(buf, pos.bit as usize, pos.width),
    }
}

/// RC RDMA WRITE Only (IBTA vol. 1 §9.2, Table 38): the opcode netsim's data packets carry.
/// RC Acknowledge and CNP are the program's own (`hawkmesh_wire::dataplane`, generated):
/// its sketch leaves them out.
const BTH_OPCODE_RC_WRITE_ONLY: u64 = 0x0A;
const BTH_OPCODE_RC_ACK: u64 = hawkmesh_wire::dataplane::BTH_OPCODE_RC_ACK as u64;
const BTH_OPCODE_CNP: u64 = hawkmesh_wire::dataplane::BTH_OPCODE_CNP as u64;

/// Which headers a serialised packet has (to map rewrites back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Pfc,
    Ipv4,
    Polling,
}

/// What the adapters of one program share on a thread: the header layout and the bridge
/// packing (read on every pass) and the pass buffers (written on every pass). One copy for
/// all switches stays in cache however many switches take turns, where a copy per switch
/// would be found cold on most passes.
#[derive(Debug)]
struct Shared {
    layout: Layout,
    scratch: RefCell<Scratch>,
}

/// The buffers of a pass.
#[derive(Debug)]
struct Scratch {
    /// The serialised headers: `buf[..len]`.
    buf: [u8; HEAD_BYTES],
    len: usize,
    ing: PassOutput,
    eg: PassOutput,
    cpu: PassOutput,
}

thread_local! {
    /// The [`Shared`] parts of this thread's adapters, by program.
    static SHARED: RefCell<Vec<(std::sync::Weak<Program>, Weak<Shared>)>> = const { RefCell::new(Vec::new()) };
}

impl Shared {
    fn new(p: &Program) -> Result<Shared, AdapterError> {
        let layout = Layout::new(p)?;
        let widths: Vec<u8> = p
            .bridged_fields()
            .iter()
            .map(|f| p.field(*f).width)
            .collect();
        let bits: u32 = widths.iter().map(|w| *w as u32).sum();
        if bits > 128 || widths.len() > MAX_CARRIED {
            return Err(AdapterError::BridgeTooWide { bits });
        }
        Ok(Shared {
            layout,
            scratch: RefCell::new(Scratch {
                buf: [0; HEAD_BYTES],
                len: 0,
                ing: PassOutput::default(),
                eg: PassOutput::default(),
                cpu: PassOutput::default(),
            }),
        })
    }

    /// This thread's shared part for `program`, made on first use.
    fn of(program: &Arc<Program>) -> Result<Rc<Shared>, AdapterError> {
        let found = SHARED.with(|all| {
            let mut all = all.borrow_mut();
            all.retain(|(p, s)| p.strong_count() > 0 && s.strong_count() > 0);
            all.iter()
                .find(|(p, _)| std::ptr::eq(p.as_ptr(), Arc::as_ptr(program)))
                .and_then(|(_, s)| s.upgrade())
        });
        if let Some(s) = found {
            return Ok(s);
        }
        let shared = Rc::new(Shared::new(program)?);
        SHARED.with(|all| {
            all.borrow_mut()
                .push((Arc::downgrade(program), Rc::downgrade(&shared)))
        });
        Ok(shared)
    }
}

/// The model as a netsim switch pipeline.
#[derive(Debug)]
pub struct NetsimAdapter {
    model: SharedModel,
    stats: Rc<Cell<AdapterStats>>,
    shared: Rc<Shared>,
}

impl NetsimAdapter {
    /// An adapter over a model shared with a switch agent. The model must use
    /// [`Routing::FromInput`] (netsim computes L3/ECMP) and have its multicast groups set
    /// (see [`configure_model`]).
    pub fn new(model: SharedModel) -> Result<Self, AdapterError> {
        let program = model.lock().program_arc().clone();
        let shared = Shared::of(&program)?;
        Ok(NetsimAdapter {
            model,
            stats: Rc::new(Cell::new(AdapterStats::default())),
            shared,
        })
    }

    /// The shared model (a clone is another handle).
    pub fn model(&self) -> SharedModel {
        self.model.clone()
    }

    /// The shared counters.
    pub fn stats(&self) -> Rc<Cell<AdapterStats>> {
        Rc::clone(&self.stats)
    }

    fn bump(&self, f: impl FnOnce(&mut AdapterStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }
}

impl Scratch {
    /// The serialised headers.
    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Serialises the headers of `packet` into `self.buf[..self.len]` (`len` 0 when a PFC
    /// frame cannot be built).
    fn serialise(&mut self, l: &Layout, packet: &Packet) -> Shape {
        let buf = &mut self.buf;
        if packet.kind == PacketKind::Pfc {
            // IEEE 802.1Qbb clause 36.1.3.2: MAC control frame with the PFC opcode, the
            // class-enable vector and eight pause times (quanta).
            let repr = PfcRepr {
                source: [0x02, 0, 0, 0, 0, 0x01],
                class_enable_vector: packet.pfc_vector,
                quanta: packet.pfc_quanta,
            };
            let frame = &mut buf[..PFC_FRAME_BYTES];
            frame.fill(0);
            self.len = if repr.emit(frame).is_ok() {
                PFC_FRAME_BYTES
            } else {
                0
            };
            return Shape::Pfc;
        }
        let polling =
            packet.kind == PacketKind::Custom && packet.custom_len as usize == l.polling_bytes;
        let l4 = match packet.kind {
            PacketKind::Data | PacketKind::Ack | PacketKind::Nack | PacketKind::Cnp => l.bth_bytes,
            PacketKind::Custom if polling => l.polling_bytes,
            _ => packet.custom_len as usize,
        };
        // The fixed fields and zeros everywhere else (the whole buffer at once: a constant
        // size copy), then the packet's own fields.
        *buf = l.prefix;
        let t = &packet.tuple;
        // Lengths describe the wire packet (netsim's size covers Ethernet and FCS).
        let ip_len = packet.size.saturating_sub((l.eth_bytes + 4) as u32) as u64;
        if l.standard {
            // The same stores as below at constant offsets.
            let u16_at = |buf: &mut [u8; HEAD_BYTES], at: usize, v: u64| {
                buf[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
            };
            let u24_at = |buf: &mut [u8; HEAD_BYTES], at: usize, v: u64| {
                buf[at..at + 3].copy_from_slice(&(v as u32).to_be_bytes()[1..]);
            };
            buf[Standard::TOS] = (packet.dscp & 0x3F) << 2 | (packet.ecn & 3);
            u16_at(buf, Standard::IP_TOTAL_LEN, ip_len.min(0xFFFF));
            buf[Standard::IP_TTL] = packet.ttl;
            buf[Standard::IP_PROTOCOL] = t.protocol;
            buf[Standard::IP_SRC..Standard::IP_SRC + 4].copy_from_slice(&t.src_ip);
            buf[Standard::IP_DST..Standard::IP_DST + 4].copy_from_slice(&t.dst_ip);
            u16_at(buf, Standard::UDP_SPORT, t.src_port as u64);
            let dport = if polling { l.polling_port } else { t.dst_port };
            u16_at(buf, Standard::UDP_DPORT, dport as u64);
            let udp_len = ip_len.saturating_sub(l.ip_bytes as u64).min(0xFFFF);
            u16_at(buf, Standard::UDP_LEN, udp_len);
            match packet.kind {
                PacketKind::Data | PacketKind::Ack | PacketKind::Nack | PacketKind::Cnp => {
                    buf[Standard::BTH_OPCODE] = match packet.kind {
                        PacketKind::Data => BTH_OPCODE_RC_WRITE_ONLY,
                        PacketKind::Cnp => BTH_OPCODE_CNP,
                        _ => BTH_OPCODE_RC_ACK,
                    } as u8;
                    u16_at(buf, Standard::BTH_PKEY, 0xFFFF);
                    u24_at(buf, Standard::BTH_QP, packet.flow as u64);
                    u24_at(buf, Standard::BTH_PSN, packet.seq);
                }
                _ => {
                    let n = l4.min(packet.custom_len as usize);
                    buf[Standard::L4..Standard::L4 + n].copy_from_slice(&packet.custom[..n]);
                }
            }
            self.len = Standard::L4 + l4;
            return if polling { Shape::Polling } else { Shape::Ipv4 };
        }
        let ip4 = |a: [u8; 4]| u32::from_be_bytes(a) as u64;
        match l.tos {
            Some(at) => buf[at] = (packet.dscp & 0x3F) << 2 | (packet.ecn & 3),
            None => {
                put(buf, l.ip_dscp, packet.dscp as u64);
                put(buf, l.ip_ecn, packet.ecn as u64);
            }
        }
        put(buf, l.ip_total_len, ip_len.min(0xFFFF));
        put(buf, l.ip_ttl, packet.ttl as u64);
        put(buf, l.ip_protocol, t.protocol as u64);
        put(buf, l.ip_src, ip4(t.src_ip));
        put(buf, l.ip_dst, ip4(t.dst_ip));
        put(buf, l.udp_sport, t.src_port as u64);
        let dport = if polling { l.polling_port } else { t.dst_port };
        put(buf, l.udp_dport, dport as u64);
        put(
            buf,
            l.udp_len,
            ip_len.saturating_sub(l.ip_bytes as u64).min(0xFFFF),
        );
        let l4_start = l.l4_offset();
        match packet.kind {
            PacketKind::Data | PacketKind::Ack | PacketKind::Nack | PacketKind::Cnp => {
                let opcode = match packet.kind {
                    PacketKind::Data => BTH_OPCODE_RC_WRITE_ONLY,
                    PacketKind::Cnp => BTH_OPCODE_CNP,
                    _ => BTH_OPCODE_RC_ACK,
                };
                put(buf, l.bth_opcode, opcode);
                put(buf, l.bth_pkey, 0xFFFF);
                put(buf, l.bth_qp, (packet.flow as u64) & 0xFF_FFFF);
                put(buf, l.bth_psn, packet.seq & 0xFF_FFFF);
            }
            _ => {
                let n = l4.min(packet.custom_len as usize);
                buf[l4_start..l4_start + n].copy_from_slice(&packet.custom[..n]);
            }
        }
        self.len = l4_start + l4;
        if polling {
            Shape::Polling
        } else {
            Shape::Ipv4
        }
    }

    /// Copies header rewrites of a pass back into the packet.
    fn write_back(
        layout: &Layout,
        shape: Shape,
        input_len: usize,
        out: &[u8],
        packet: &mut Packet,
    ) {
        if shape == Shape::Pfc || out.len() != input_len {
            return;
        }
        match layout.tos {
            Some(at) => {
                packet.dscp = out[at] >> 2;
                packet.ecn = out[at] & 3;
            }
            None => {
                packet.dscp = get(out, layout.ip_dscp) as u8;
                packet.ecn = get(out, layout.ip_ecn) as u8;
            }
        }
        packet.ttl = get(out, layout.ip_ttl) as u8;
        if shape == Shape::Polling {
            let start = layout.l4_offset();
            let n = layout.polling_bytes;
            packet.custom[..n].copy_from_slice(&out[start..start + n]);
        }
    }
}

impl SwitchPipeline for NetsimAdapter {
    fn ingress(&mut self, meta: &IngressMeta, packet: &mut Packet, actions: &mut IngressActions) {
        let shared = &*self.shared;
        let Ok(mut scratch) = shared.scratch.try_borrow_mut() else {
            self.bump(|s| s.busy += 1);
            return;
        };
        let sc = &mut *scratch;
        let shape = sc.serialise(&shared.layout, packet);
        if sc.len == 0 {
            self.bump(|s| s.errors += 1);
            return;
        }
        let Some(mut model) = self.model.try_borrow_mut() else {
            self.bump(|s| s.busy += 1);
            return;
        };
        let input = IngressInput {
            ingress_port: meta.ingress_port,
            tstamp_ns: meta.ingress_tstamp_ns,
            routed_egress_port: meta.routed_egress_port,
        };
        // The pass packs the bridged fields straight into the packet (a copy through the
        // stack would be stored as two words and loaded as one, which the CPU cannot
        // forward).
        let Ok(same) =
            model.ingress_packed(&sc.buf[..sc.len], &input, &mut sc.ing, &mut packet.bridge)
        else {
            drop(model);
            self.bump(|s| s.errors += 1);
            return;
        };
        let mut stats = self.stats.get();
        stats.ingress += 1;
        let wire_len = packet.size.min(u16::MAX as u32) as u16;
        // Ingress clone (polling copy for the CPU): run the clone's egress pass now.
        if let Some(carried) = sc.ing.clone {
            let cpu_port = model.cpu_port();
            let e = EgressInput {
                ingress_port: meta.ingress_port,
                egress_port: cpu_port,
                queue: packet.priority,
                enq_tstamp_ns: meta.ingress_tstamp_ns,
                enq_qdepth: 0,
                packet_length: wire_len,
            };
            match model.egress(&sc.ing.clone_bytes, &e, &carried, &mut sc.cpu) {
                Ok(()) if !sc.cpu.dropped => {
                    actions.to_cpu = true;
                    actions.cpu_payload = Some(sc.cpu.bytes.clone());
                    stats.cpu_copies += 1;
                }
                Ok(()) => {}
                Err(_) => stats.errors += 1,
            }
        }
        if shape == Shape::Pfc {
            // The PFC frame updated the port status in ingress and was consumed there.
            drop(model);
            self.stats.set(stats);
            return;
        }
        if sc.ing.dropped {
            actions.drop = true;
            stats.dropped += 1;
        } else {
            match sc.ing.forward {
                Forward::None => {
                    actions.drop = true;
                    stats.dropped += 1;
                }
                Forward::Unicast(port) => {
                    if Some(port) != meta.routed_egress_port {
                        actions.egress_override = Some(port);
                    }
                }
                Forward::Multicast(group) => {
                    let mut set = PortSet::default();
                    for p in model.multicast_group(group).unwrap_or(&[]) {
                        set.insert(*p);
                    }
                    if set.is_empty() {
                        actions.drop = true;
                    } else {
                        actions.multicast = set;
                    }
                }
            }
        }
        drop(model);
        // Unchanged headers: the output packet is the input, and so is the packet.
        if !same {
            Scratch::write_back(&shared.layout, shape, sc.len, &sc.ing.bytes, packet);
        }
        self.stats.set(stats);
    }

    fn egress(&mut self, meta: &EgressMeta, packet: &mut Packet, actions: &mut EgressActions) {
        let shared = &*self.shared;
        let Ok(mut scratch) = shared.scratch.try_borrow_mut() else {
            self.bump(|s| s.busy += 1);
            return;
        };
        let sc = &mut *scratch;
        let shape = sc.serialise(&shared.layout, packet);
        if sc.len == 0 || shape == Shape::Pfc {
            return;
        }
        let Some(mut model) = self.model.try_borrow_mut() else {
            self.bump(|s| s.busy += 1);
            return;
        };
        let input = EgressInput {
            ingress_port: meta.ingress_port,
            egress_port: meta.egress_port,
            queue: meta.priority,
            enq_tstamp_ns: meta.enq_tstamp_ns,
            enq_qdepth: qdepth_cells(meta.enq_qdepth_bytes),
            packet_length: packet.size.min(u16::MAX as u32) as u16,
        };
        let Ok(same) = model.egress_packed(&sc.buf[..sc.len], &input, packet.bridge, &mut sc.eg)
        else {
            drop(model);
            self.bump(|s| s.errors += 1);
            return;
        };
        let mut stats = self.stats.get();
        stats.egress += 1;
        if let Some(c) = sc.eg.clone {
            // Egress clone (flow eviction report): the copy's own egress pass at the CPU
            // port prepends the report header.
            let e = EgressInput {
                egress_port: model.cpu_port(),
                enq_qdepth: 0,
                ..input
            };
            match model.egress(&sc.eg.clone_bytes, &e, &c, &mut sc.cpu) {
                Ok(()) if !sc.cpu.dropped => {
                    actions.to_cpu = true;
                    actions.cpu_payload = Some(sc.cpu.bytes.clone());
                    stats.cpu_copies += 1;
                }
                Ok(()) => {}
                Err(_) => stats.errors += 1,
            }
        }
        drop(model);
        if sc.eg.dropped {
            actions.drop = true;
            stats.dropped += 1;
        }
        if !same {
            Scratch::write_back(&shared.layout, shape, sc.len, &sc.eg.bytes, packet);
        }
        self.stats.set(stats);
    }
}

/// One installed switch: its shared model and the adapter's counters.
#[derive(Clone, Debug)]
pub struct InstalledSwitch {
    /// The model (read registers with `model.lock()` between `run_until` slices).
    pub model: SharedModel,
    /// The adapter's counters.
    pub stats: Rc<Cell<AdapterStats>>,
    /// Whether it is a ToR (has a host link): the switch whose sketch counts its hosts'
    /// packets.
    pub tor: bool,
}

/// Where the switches' models live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hosting {
    /// In process (the agents' `ModelBackend`).
    #[default]
    InProcess,
    /// Each inside a BF Runtime device (the agents talk BF Runtime to a server over it).
    BfRuntime,
}

/// Installs the model on every switch of `sim`, all running the variant of `params` (one
/// image for the whole fabric, as operators deploy one). With the Elastic Sketch
/// (`params.sketch`), PARALEON's insert-once marking makes the first switch on a packet's
/// path, its ToR, the only one that inserts it: the sketches of aggregation and core
/// switches stay empty. Returns the shared handles by switch node id.
pub fn install_on_all_switches(
    sim: &mut Simulation,
    params: &HawkeyeParams,
) -> Result<BTreeMap<NodeId, InstalledSwitch>, AdapterError> {
    install_hosted(sim, params, Hosting::InProcess)
}

/// [`install_on_all_switches`] with the models hosted as `hosting` says.
///
/// The program's ECN marking table (`ecn_profile`) is left empty: in the lab, netsim's own
/// RED marks (at dequeue, on the queue's bytes, with the knobs `Simulation::set_knobs`
/// changes), and the program, finding no profile, marks nothing — one marking process,
/// not two (ARCHITECTURE.md, "ECN marking in the lab").
pub fn install_hosted(
    sim: &mut Simulation,
    params: &HawkeyeParams,
    hosting: Hosting,
) -> Result<BTreeMap<NodeId, InstalledSwitch>, AdapterError> {
    let image = Arc::new(program(params)?);
    type Described = (NodeId, String, bool, Vec<f64>, Vec<u16>);
    let switches: Vec<Described> = sim
        .topology()
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Switch)
        .map(|n| {
            (
                n.id,
                n.name.clone(),
                is_tor(sim.topology(), n.id),
                port_speeds(sim.topology(), n.id),
                host_ports(sim.topology(), n.id),
            )
        })
        .collect();
    let mut out = BTreeMap::new();
    for (id, name, tor, speeds, hosts) in switches {
        let mut model = Model::new(Arc::clone(&image), Routing::FromInput, params.cpu_port)?;
        configure_model(&mut model, &name, &speeds)?;
        // Polling from hosts passes the data plane's per-port rate limit, as deployed.
        configure_polling_ports(&mut model, &hosts).map_err(SetupError::from)?;
        let shared = match hosting {
            Hosting::InProcess => SharedModel::local(model),
            Hosting::BfRuntime => SharedModel::served(model),
        };
        let adapter = NetsimAdapter::new(shared.clone())?;
        let stats = adapter.stats();
        if !sim.set_pipeline(id, Box::new(adapter)) {
            return Err(AdapterError::NotASwitch(id));
        }
        out.insert(
            id,
            InstalledSwitch {
                model: shared,
                stats,
                tor,
            },
        );
    }
    Ok(out)
}

/// Bits of bridged metadata the program carries from ingress to egress (must fit the 128
/// bits of netsim's `Packet.bridge`).
pub fn bridged_bits(program: &Program) -> u32 {
    program
        .fields
        .iter()
        .filter(|f| matches!(f.owner, FieldOwner::Metadata { bridged: true, .. }))
        .map(|f| f.width as u32)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter() -> NetsimAdapter {
        let params = HawkeyeParams::default();
        let p = Arc::new(program(&params).expect("program"));
        let mut model = Model::new(p, Routing::FromInput, params.cpu_port).expect("model");
        configure_model(&mut model, "s", &[100.0, 400.0]).expect("configure");
        NetsimAdapter::new(SharedModel::local(model)).expect("adapter")
    }

    #[test]
    fn queue_depth_bytes_become_80_byte_cells_rounded_up() {
        assert_eq!(qdepth_cells(0), 0);
        assert_eq!(qdepth_cells(1), 1);
        assert_eq!(qdepth_cells(80), 1);
        assert_eq!(qdepth_cells(81), 2);
        assert_eq!(qdepth_cells(1062), 14);
    }

    #[test]
    fn bridged_metadata_fits_packet_bridge() {
        let a = adapter();
        assert!(bridged_bits(a.model.lock().program()) <= 128);
    }

    #[test]
    fn serialised_headers_carry_tos_ttl_ports_and_polling_port() {
        let a = adapter();
        let l = a.shared.layout.clone();
        let mut scratch = a.shared.scratch.borrow_mut();
        let sc = &mut *scratch;
        let mut packet = Packet::new(PacketKind::Data);
        packet.dscp = 26;
        packet.ecn = 2;
        packet.ttl = 61;
        packet.size = 1062;
        packet.tuple = "11.0.0.1:49152->11.0.1.1".parse().expect("tuple");
        assert_eq!(sc.serialise(&l, &packet), Shape::Ipv4);
        assert_eq!(sc.bytes().len(), l.l4_offset() + l.bth_bytes);
        assert_eq!(
            sc.buf[l.eth_bytes + 1],
            26 << 2 | 2,
            "TOS = dscp << 2 | ecn"
        );
        assert_eq!(get(&sc.buf, l.ip_ttl), 61);
        assert_eq!(get(&sc.buf, l.udp_sport), 49152);
        assert_eq!(get(&sc.buf, l.ip_total_len), 1062 - 18);
        packet.kind = PacketKind::Custom;
        packet.custom_len = l.polling_bytes as u8;
        assert_eq!(sc.serialise(&l, &packet), Shape::Polling);
        assert_eq!(get(&sc.buf, l.udp_dport), l.polling_port as u64);
        packet.kind = PacketKind::Pfc;
        packet.pfc_vector = 0b1000;
        packet.pfc_quanta[3] = 0xFFFF;
        assert_eq!(sc.serialise(&l, &packet), Shape::Pfc);
        assert_eq!(sc.bytes().len(), PFC_FRAME_BYTES);
        assert!(
            configure_model(&mut a.model.lock(), "s", &[10.0]).is_err(),
            "10G has no quanta conversion"
        );
    }
}
