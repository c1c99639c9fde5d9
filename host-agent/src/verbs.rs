//! The RDMA verbs UD probing transport (cargo feature `verbs`, Linux): probes and ACKs as
//! SENDs on one Unreliable Datagram queue pair of an RNIC, timestamped by the NIC's
//! completion queue where it can (R-Pingmesh §4.1: CQE timestamps ②③④⑤).
//!
//! Bindings: `rdma-mummy-sys`, whose C shim `dlopen`s `libibverbs.so.1` when the program
//! starts (every verb then fails with `EOPNOTSUPP` if it could not), so the agent starts on
//! hosts without rdma-core and says why it cannot use verbs (docs/verbs-transport.md has
//! the comparison of the crates). All unsafe code of the agent is in this module.
//!
//! What it sets up, in [`VerbsTransport::open`]:
//!
//! - the device ([`VerbsConfig::device`], or the first libibverbs lists) and its port, which
//!   must be active and Ethernet (RoCE);
//! - the GID: [`VerbsConfig::gid_index`], which must be RoCE v2, or the first RoCE v2 GID
//!   that is an IPv4-mapped address (`::ffff:a.b.c.d`: RoCEv2 over IPv4, the usual data
//!   centre set-up; the index varies by host, 1 on Soft-RoCE, often 3 on ConnectX);
//! - a protection domain, two registered buffers (one slot per send and per receive work
//!   request), an extended completion queue on a completion channel, and a UD queue pair
//!   taken through INIT (port, P_Key index 0, Q_Key), RTR and RTS (IBTA 10.3.1, the UD
//!   state diagram: no remote attributes; the destination is in each send's address
//!   handle);
//! - the receive queue filled: each receive gets 40 bytes for the GRH and the port's MTU for
//!   the message (a UD message is at most one MTU, IBTA 9.8.2).
//!
//! Completion timestamps, the first that works ([`CompletionClock`], which every event's
//! [`Stamps`] reflects):
//!
//! 1. the device's `completion_timestamp_mask` is 0 → the host clock (rxe: it has none,
//!    rdma-core v44 providers/rxe/rxe.c accepts only the standard CQ flags);
//! 2. a CQ with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK` alone → nanoseconds of real
//!    time converted by the provider (mlx5 from its clock-info page; asking for the raw
//!    timestamp too disables that path, rdma-core providers/mlx5/cq.c);
//! 3. `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` → raw device ticks, converted here with
//!    `hca_core_clock` (kHz) after undoing the wrap at `completion_timestamp_mask`
//!    ([`TickClock`]): the NIC's own clock, which is all an interval needs since ②→⑤ and
//!    ③→④ are each taken on one NIC;
//! 4. a CQ without timestamps → host-clock readings: a send right before its post (Soft-RoCE
//!    may transmit inside the post call, so a later reading could follow the answer's
//!    arrival), a receive when polled ([`Stamps::host_only`]).
//!
//! Source ports (the 5-tuple ECMP hashes): a send to port `p` uses an address handle whose
//! GRH flow label maps to `p` ([`flow_label_for_udp_sport`]; RoCEv2 ports are 0xC000 and
//! up), which mlx5 turns into the outer UDP source port (rdma-core providers/mlx5/verbs.c).
//! Soft-RoCE does not: it sends every packet of a UD QP from one port derived from the
//! QPN, `0xC000 + hash_32(qpn, 14)` (Linux drivers/infiniband/sw/rxe/rxe_qp.c
//! `rxe_qp_init_req`), honouring flow labels only for connected QPs (`rxe_modify_qp`);
//! [`rxe_ud_source_port`] gives that port. Address handles are cached by (destination
//! GID, flow label), bounded ([`VerbsConfig::max_address_handles`]), the least recently
//! used one without a send in flight destroyed first.
//!
//! The receiver cannot see the source port: on RoCEv2 over IPv4 the GRH area of a UD
//! receive holds 20 undefined bytes and the IPv4 header (IBTA A17.4.5.2), no UDP header.
//! The probe payload carries it (`hawkmesh_wire::probe`, bytes 48..50), and
//! [`TransportEvent::Received::src_port`] is read from there (0 when a datagram carries
//! none). The sender's address is its GID (from the GRH area: the IPv4 source address,
//! mapped, or the IPv6 header's source GID) and its QPN (the completion's source QP).
//!
//! [`RcConnection`] is a lab service connection on the same device: an RC QP connected with
//! a chosen flow label, one message each way (the Soft-RoCE test checks its source port on
//! the wire, and the eBPF tracer sees it).

// The one module of the agent with unsafe code: each block says why it is sound.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::ptr;
use std::time::Duration;

use hawkmesh_wire::probe::ProbePayload;
use hawkmesh_wire::roce::flow_label_for_udp_sport;
use nix::errno::Errno;
use nix::libc;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use rdma_mummy_sys as ffi;
use thiserror::Error;

pub use crate::transport::UdAddr;
use crate::transport::{
    ProbeTransport, Stamps, TransportError, TransportEvent, MAX_DATAGRAM_BYTES,
};
use crate::udp::{host_now_ns, SourceCounts};

/// Bytes before a UD receive's message: the GRH, or on RoCEv2 over IPv4 20 undefined bytes
/// and the IPv4 header (IBTA 11.4.1.2, A17.4.5.2).
pub const GRH_BYTES: usize = 40;

/// The default Q_Key of probe queue pairs ("HMPR" without its top bit: Q_Keys with the
/// high-order bit set are controlled ones a user QP cannot send with, IBTA 10.2.5).
pub const DEFAULT_QKEY: u32 = 0x484D_5052 & 0x7FFF_FFFF;

/// Completions handled in one [`VerbsTransport::poll`] at most (the rest wait in the CQ).
const MAX_EVENTS_PER_POLL: usize = 256;

/// `wr_id` bit that marks a receive work request (the rest is the slot).
const RECV_TAG: u64 = 1 << 63;

/// `enum ibv_gid_type` (rdma-core include/infiniband/verbs.h): RoCE v2.
const GID_TYPE_ROCE_V2: u32 = 2;
/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h, not in the bindings).
const LINK_LAYER_ETHERNET: u8 = 2;

/// Settings of one RNIC's verbs transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// The device (`mlx5_0`, `rxe0`), or `None` for the first one libibverbs lists.
    pub device: Option<String>,
    /// The device's port (1 on most NICs).
    pub port: u8,
    /// The GID index, or `None` for the first RoCE v2 IPv4-mapped GID.
    pub gid_index: Option<u32>,
    /// The Q_Key every probe queue pair uses (high bit clear).
    pub qkey: u32,
    /// Sends in flight at most (the send queue's depth).
    pub send_depth: u32,
    /// Receives posted (the receive queue's depth).
    pub recv_depth: u32,
    /// Address handles kept at most (one per destination GID and source port in use).
    pub max_address_handles: usize,
    /// The GRH traffic class (IPv4 TOS: DSCP << 2) of probes and ACKs.
    pub traffic_class: u8,
    /// The GRH hop limit (IPv4 TTL).
    pub hop_limit: u8,
    /// Use the NIC's completion timestamps where it has them (`false`: host clock always,
    /// e.g. to compare both on one NIC).
    pub completion_timestamps: bool,
}

impl Default for VerbsConfig {
    /// The first device and RoCE v2 IPv4 GID, port 1, [`DEFAULT_QKEY`], 256 sends and
    /// receives, 1024 address handles, traffic class 0, hop limit 64, NIC timestamps.
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port: 1,
            gid_index: None,
            qkey: DEFAULT_QKEY,
            send_depth: 256,
            recv_depth: 256,
            max_address_handles: 1024,
            traffic_class: 0,
            hop_limit: 64,
            completion_timestamps: true,
        }
    }
}

impl VerbsConfig {
    fn validate(&self) -> Result<(), TransportError> {
        let invalid = |place: &str, reason: String| TransportError::Invalid {
            place: format!("VerbsConfig::{place}"),
            reason,
        };
        if self.port == 0 {
            return Err(invalid("port", "ports are numbered from 1".into()));
        }
        if self.qkey & 0x8000_0000 != 0 {
            return Err(invalid(
                "qkey",
                format!(
                    "{:#x} has the high bit set: a controlled Q_Key (IBTA 10.2.5)",
                    self.qkey
                ),
            ));
        }
        for (place, depth) in [
            ("send_depth", self.send_depth),
            ("recv_depth", self.recv_depth),
        ] {
            if !(1..=32_768).contains(&depth) {
                return Err(invalid(place, format!("{depth} is not within 1..=32768")));
            }
        }
        if self.max_address_handles == 0 {
            return Err(invalid("max_address_handles", "must be at least 1".into()));
        }
        if self.hop_limit == 0 {
            return Err(invalid("hop_limit", "0 would drop every packet".into()));
        }
        Ok(())
    }
}

/// Why [`VerbsTransport::open`] failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VerbsError {
    /// The verbs library could not be loaded (rdma-core is not installed).
    #[error("libibverbs not found: {0}")]
    LibraryMissing(String),
    /// No usable device (no RDMA in the kernel, none listed, not the named one, port down).
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// A verb failed, or a setting is wrong.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Where the timestamps of the transport's events come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompletionClock {
    /// The NIC's completion timestamps converted to real time by the provider.
    WallClock,
    /// The NIC's raw completion timestamps in ticks of a `khz` clock, wrapping at `mask`,
    /// converted here.
    DeviceTicks {
        /// `hca_core_clock` (kHz).
        khz: u64,
        /// `completion_timestamp_mask`.
        mask: u64,
    },
    /// No NIC timestamps: host-clock readings, for the reason given.
    HostClock {
        /// Why (the device has none, the CQ refused them, or the setting).
        reason: String,
    },
}

impl fmt::Display for CompletionClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompletionClock::WallClock => write!(f, "NIC completion timestamps (wall clock)"),
            CompletionClock::DeviceTicks { khz, mask } => write!(
                f,
                "NIC completion timestamps (device clock {khz} kHz, mask {mask:#x})"
            ),
            CompletionClock::HostClock { reason } => write!(f, "host clock ({reason})"),
        }
    }
}

/// Raw completion timestamps to nanoseconds: undoes the counter's wrap at `mask` (each
/// reading is taken as the nearer of the two ways round from the previous one, so readings
/// may come slightly out of order) and divides by the clock rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickClock {
    khz: u64,
    mask: u64,
    last: Option<(u64, u64)>,
}

impl TickClock {
    /// A clock of `khz` kHz whose counter wraps at `mask` (`None` for a zero rate or mask).
    pub fn new(khz: u64, mask: u64) -> Option<Self> {
        (khz > 0 && mask > 0).then_some(TickClock {
            khz,
            mask,
            last: None,
        })
    }

    /// Nanoseconds of the (unwrapped) counter reading `raw`.
    pub fn to_ns(&mut self, raw: u64) -> u64 {
        let raw = raw & self.mask;
        let extended = match self.last {
            None => raw,
            Some((last_raw, last_ext)) => {
                let ahead = raw.wrapping_sub(last_raw) & self.mask;
                if ahead <= self.mask / 2 {
                    last_ext.saturating_add(ahead)
                } else {
                    last_ext.saturating_sub(last_raw.wrapping_sub(raw) & self.mask)
                }
            }
        };
        self.last = Some((raw, extended));
        let ns = u128::from(extended) * 1_000_000 / u128::from(self.khz);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The UDP source port Soft-RoCE gives every packet of the queue pair `qpn` before any
/// address vector is set (its UD QPs keep it): `0xC000 + hash_32(qpn, 14)`, Linux
/// drivers/infiniband/sw/rxe/rxe_qp.c `rxe_qp_init_req`, `hash_32` of include/linux/hash.h
/// (multiply by `GOLDEN_RATIO_32`, keep the top bits).
pub fn rxe_ud_source_port(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61C8_8647;
    let hash = qpn.wrapping_mul(GOLDEN_RATIO_32) >> (32 - 14);
    0xC000 + (hash & 0x3FFF) as u16
}

/// The sender's GID from the 40-byte GRH area of a UD receive: on RoCEv2 over IPv4 the
/// IPv4 header in bytes 20..40 (IBTA A17.4.5.2; its source address at 12..16), mapped to
/// `::ffff:a.b.c.d`; otherwise a GRH / IPv6 header (version 6), whose source GID is bytes
/// 8..24 (IBTA 8.3.1). `None` when it is neither.
pub fn grh_source_gid(area: &[u8]) -> Option<[u8; 16]> {
    if area.len() < GRH_BYTES {
        return None;
    }
    let ipv4 = &area[20..40];
    // Version 4 with a 20-byte header (IHL 5): nothing else fits in 20 bytes.
    if ipv4[0] == 0x45 {
        let src = Ipv4Addr::new(ipv4[12], ipv4[13], ipv4[14], ipv4[15]);
        return Some(src.to_ipv6_mapped().octets());
    }
    if area[0] >> 4 == 6 {
        let mut gid = [0; 16];
        gid.copy_from_slice(&area[8..24]);
        return Some(gid);
    }
    None
}

/// The bytes of an IBV MTU enum value (`IBV_MTU_256` = 1 … `IBV_MTU_4096` = 5).
fn mtu_bytes(mtu: u32) -> Option<usize> {
    (1..=5).contains(&mtu).then(|| 128usize << mtu)
}

/// Counters of a [`VerbsTransport`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Receives completed successfully, by timestamp kind.
    pub rx: SourceCounts,
    /// Sends completed (successfully or not), by timestamp kind.
    pub tx: SourceCounts,
    /// Received messages longer than [`MAX_DATAGRAM_BYTES`] (cut).
    pub oversized: u64,
    /// Receives without a usable GRH area (no GRH flag, or neither IPv4 nor IPv6 in it).
    pub no_grh: u64,
    /// Received datagrams that carried no source port (not a version-2 probe payload).
    pub no_src_port: u64,
    /// Receive completions with an error status.
    pub recv_errors: u64,
    /// Send completions with an error status (reported as sent, on the host clock).
    pub send_errors: u64,
    /// The last error status, with its place.
    pub last_error: Option<String>,
    /// Address handles created.
    pub address_handles_created: u64,
    /// Address handles destroyed to make room.
    pub address_handles_evicted: u64,
    /// Completion events taken from the channel.
    pub cq_events: u64,
}

fn count(counts: &mut SourceCounts, stamps: &Stamps) {
    match (stamps.hardware, stamps.software) {
        (Some(_), _) => counts.hardware += 1,
        (None, Some(_)) => counts.software += 1,
        (None, None) => counts.host_clock += 1,
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn os_error(op: &'static str, place: impl fmt::Display, errno: i32) -> TransportError {
    TransportError::Os {
        op,
        place: place.to_string(),
        errno,
    }
}

/// Loads libibverbs the way the bindings' shim does, for its error message (`dlerror`).
fn check_library() -> Result<(), VerbsError> {
    let name = c"libibverbs.so.1";
    // SAFETY: `name` is a NUL-terminated string; dlopen/dlerror/dlclose have no other
    // preconditions. The handle is only closed again (the shim holds its own reference).
    unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if handle.is_null() {
            let reason = libc::dlerror();
            let reason = if reason.is_null() {
                "dlopen failed".to_string()
            } else {
                CStr::from_ptr(reason).to_string_lossy().into_owned()
            };
            return Err(VerbsError::LibraryMissing(format!(
                "{reason} (rdma-core's libibverbs; Debian: libibverbs1 and ibverbs-providers)"
            )));
        }
        libc::dlclose(handle);
    }
    Ok(())
}

/// Device names the kernel lists in /sys/class/infiniband (for error messages).
fn kernel_devices() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A sent work request waiting for its completion.
#[derive(Clone, Copy, Debug)]
struct SendSlot {
    token: u64,
    /// The host clock right before the post (see [`VerbsTransport::send`]'s body).
    posted_ns: u64,
    ah_key: ([u8; 16], u32),
}

#[derive(Debug)]
struct AddressHandle {
    ah: *mut ffi::ibv_ah,
    last_used: u64,
    in_flight: u32,
}

/// The verbs objects, destroyed in reverse order of creation.
struct Resources {
    context: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    channel: *mut ffi::ibv_comp_channel,
    cq: *mut ffi::ibv_cq_ex,
    qp: *mut ffi::ibv_qp,
    send_mr: *mut ffi::ibv_mr,
    recv_mr: *mut ffi::ibv_mr,
    ahs: HashMap<([u8; 16], u32), AddressHandle>,
}

impl Drop for Resources {
    fn drop(&mut self) {
        // SAFETY: each pointer is either null or an object this transport created and
        // nothing else holds; they are destroyed once, dependants first (address handles
        // and the QP before the CQ, MRs and PD; the channel after its CQ; the context
        // last), as libibverbs requires (ibv_destroy_cq: "fails if any queue pair is still
        // associated with it"). Every completion event taken was acknowledged at once, so
        // ibv_destroy_cq does not wait for any.
        unsafe {
            for (_, handle) in self.ahs.drain() {
                ffi::ibv_destroy_ah(handle.ah);
            }
            if !self.qp.is_null() {
                ffi::ibv_destroy_qp(self.qp);
            }
            if !self.cq.is_null() {
                ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(self.cq));
            }
            if !self.channel.is_null() {
                ffi::ibv_destroy_comp_channel(self.channel);
            }
            for mr in [self.send_mr, self.recv_mr] {
                if !mr.is_null() {
                    ffi::ibv_dereg_mr(mr);
                }
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            if !self.context.is_null() {
                ffi::ibv_close_device(self.context);
            }
        }
    }
}

/// The verbs UD transport of one RNIC port.
pub struct VerbsTransport {
    config: VerbsConfig,
    device: String,
    gid_index: u32,
    local: UdAddr,
    mtu: usize,
    max_inline: u32,
    clock: CompletionClock,
    ticks: Option<TickClock>,
    res: Resources,
    /// One slot per send work request (`mtu` bytes each), registered as `send_mr`.
    send_buf: Box<[u8]>,
    /// One slot per receive (`GRH_BYTES + mtu` each), registered as `recv_mr`.
    recv_buf: Box<[u8]>,
    slots: Vec<Option<SendSlot>>,
    free_slots: Vec<usize>,
    use_tick: u64,
    stats: VerbsStats,
}

// SAFETY: libibverbs objects may be used from any thread (rdma-core's libibverbs is
// thread safe: its verbs take the provider's locks); the transport owns them alone and
// its methods take `&mut self`, so moving it to another thread moves all use with it.
unsafe impl Send for VerbsTransport {}

impl fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("device", &self.device)
            .field("port", &self.config.port)
            .field("gid_index", &self.gid_index)
            .field("local", &self.local)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// What [`open_device`] found.
struct Opened {
    name: String,
    context: *mut ffi::ibv_context,
}

/// Opens the named or the first device.
fn open_device(wanted: Option<&str>) -> Result<Opened, VerbsError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer; the list is freed below on every path after
    // the names were copied and the chosen device opened (ibv_open_device does not need
    // the list afterwards, rdma-core libibverbs/device.c).
    let list = unsafe { ffi::ibv_get_device_list(&mut count) };
    if list.is_null() {
        let e = errno();
        let why = match e {
            libc::ENOSYS => "the kernel has no RDMA support (ibv_get_device_list: \
                             /sys/class/infiniband_verbs is missing)"
                .to_string(),
            libc::EOPNOTSUPP => {
                return Err(VerbsError::LibraryMissing(
                    "the bindings could not load libibverbs.so.1".into(),
                ))
            }
            _ => format!(
                "ibv_get_device_list: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        };
        return Err(VerbsError::NoDevice(why));
    }
    let mut names = Vec::new();
    let mut chosen = None;
    for i in 0..usize::try_from(count).unwrap_or(0) {
        // SAFETY: the list holds `count` device pointers (libibverbs' contract); each name
        // is a NUL-terminated string owned by the device, copied here.
        let (device, name) = unsafe {
            let device = *list.add(i);
            let name = ffi::ibv_get_device_name(device);
            let name = if name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            (device, name)
        };
        if chosen.is_none() && wanted.is_none_or(|w| w == name) {
            chosen = Some((device, name.clone()));
        }
        names.push(name);
    }
    let result = match chosen {
        None if names.is_empty() => {
            let kernel = kernel_devices();
            Err(VerbsError::NoDevice(if kernel.is_empty() {
                "libibverbs lists none and /sys/class/infiniband is empty".into()
            } else {
                format!(
                    "the kernel has {} but libibverbs lists none: its provider library is \
                     missing (Debian: ibverbs-providers)",
                    kernel.join(", ")
                )
            }))
        }
        None => Err(VerbsError::NoDevice(format!(
            "{} is not among the devices libibverbs lists ({})",
            wanted.unwrap_or_default(),
            names.join(", ")
        ))),
        Some((device, name)) => {
            // SAFETY: `device` comes from the live list.
            let context = unsafe { ffi::ibv_open_device(device) };
            if context.is_null() {
                Err(VerbsError::Transport(os_error(
                    "ibv_open_device",
                    &name,
                    errno(),
                )))
            } else {
                Ok(Opened { name, context })
            }
        }
    };
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    result
}

/// An opened device port: the context (in `res`), its RoCE v2 GID and MTU.
struct Port {
    res: Resources,
    name: String,
    gid_index: u32,
    gid: [u8; 16],
    mtu: usize,
    mtu_code: u32,
    dev_attr: ffi::ibv_device_attr_ex,
}

/// Opens the configured device, checks its port (active, Ethernet), finds the GID and
/// reads the device's attributes.
fn open_port(config: &VerbsConfig) -> Result<Port, VerbsError> {
    check_library()?;
    let opened = open_device(config.device.as_deref())?;
    let res = Resources {
        context: opened.context,
        pd: ptr::null_mut(),
        channel: ptr::null_mut(),
        cq: ptr::null_mut(),
        qp: ptr::null_mut(),
        send_mr: ptr::null_mut(),
        recv_mr: ptr::null_mut(),
        ahs: HashMap::new(),
    };
    let name = opened.name;
    let port = config.port;
    let place = format!("{name} port {port}");

    // The port: active, Ethernet, its MTU.
    // SAFETY: a zeroed ibv_port_attr is a valid out-parameter (plain integers).
    let mut port_attr: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the context is open; `port_attr` is a valid out-pointer.
    let rc = unsafe { ffi::ibv_query_port(res.context, port, &mut port_attr) };
    if rc != 0 {
        return Err(os_error("ibv_query_port", &place, rc).into());
    }
    if port_attr.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
        return Err(VerbsError::NoDevice(format!(
            "{place} is not active (port state {})",
            port_attr.state
        )));
    }
    if port_attr.link_layer != LINK_LAYER_ETHERNET {
        return Err(VerbsError::NoDevice(format!(
            "{place} is not RoCE (link layer {}, Ethernet is {LINK_LAYER_ETHERNET})",
            port_attr.link_layer
        )));
    }
    let mtu = mtu_bytes(port_attr.active_mtu).ok_or_else(|| TransportError::Invalid {
        place: place.clone(),
        reason: format!("active MTU code {} is not 1..=5", port_attr.active_mtu),
    })?;

    // The GID.
    let (gid_index, gid) = find_gid(
        res.context,
        port,
        port_attr.gid_tbl_len,
        config.gid_index,
        &place,
    )?;

    // The device's attributes (timestamp capabilities).
    // SAFETY: zeroed ibv_device_attr_ex is a valid out-parameter (integers and arrays).
    let mut dev_attr: ffi::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    // SAFETY: the context is open; a null input is allowed (verbs.h ibv_query_device_ex).
    let rc = unsafe { ffi::ibv_query_device_ex(res.context, ptr::null(), &mut dev_attr) };
    if rc != 0 {
        return Err(os_error("ibv_query_device_ex", &name, rc).into());
    }
    Ok(Port {
        res,
        name,
        gid_index,
        gid,
        mtu,
        mtu_code: port_attr.active_mtu,
        dev_attr,
    })
}

impl VerbsTransport {
    /// Opens the device and port, finds the GID, and sets up the UD queue pair, its
    /// completion queue (with the best completion timestamps the device has) and buffers.
    ///
    /// Errors: [`VerbsError::LibraryMissing`] without rdma-core, [`VerbsError::NoDevice`]
    /// without a usable device, otherwise the failing verb and its place.
    pub fn open(config: VerbsConfig) -> Result<Self, VerbsError> {
        config.validate()?;
        let Port {
            mut res,
            name,
            gid_index,
            gid,
            mtu,
            mtu_code: _,
            dev_attr,
        } = open_port(&config)?;

        // SAFETY: the context is open.
        res.pd = unsafe { ffi::ibv_alloc_pd(res.context) };
        if res.pd.is_null() {
            return Err(os_error("ibv_alloc_pd", &name, errno()).into());
        }
        // SAFETY: the context is open.
        res.channel = unsafe { ffi::ibv_create_comp_channel(res.context) };
        if res.channel.is_null() {
            return Err(os_error("ibv_create_comp_channel", &name, errno()).into());
        }
        // SAFETY: the channel is live; its fd is a plain descriptor it owns; making it
        // non-blocking is what verbs.h documents for polling it (ibv_get_cq_event).
        let channel_fd = unsafe { (*res.channel).fd };
        // SAFETY: fcntl on a descriptor the channel owns, flags only.
        let nonblock = unsafe {
            let flags = libc::fcntl(channel_fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(channel_fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !nonblock {
            return Err(os_error(
                "fcntl O_NONBLOCK",
                format!("{name} completion channel"),
                errno(),
            )
            .into());
        }

        let cqe = config.send_depth + config.recv_depth;
        let (cq, clock) = create_cq(&res, cqe, &dev_attr, config.completion_timestamps, &name)?;
        res.cq = cq;
        let ticks = match clock {
            CompletionClock::DeviceTicks { khz, mask } => TickClock::new(khz, mask),
            _ => None,
        };

        // Buffers.
        let send_buf = vec![0u8; mtu * config.send_depth as usize].into_boxed_slice();
        let recv_slot = GRH_BYTES + mtu;
        let recv_buf = vec![0u8; recv_slot * config.recv_depth as usize].into_boxed_slice();
        let mut transport = VerbsTransport {
            device: name.clone(),
            gid_index,
            local: UdAddr { gid, qpn: 0 },
            mtu,
            max_inline: 0,
            clock,
            ticks,
            res,
            send_buf,
            recv_buf,
            slots: vec![None; config.send_depth as usize],
            free_slots: (0..config.send_depth as usize).rev().collect(),
            use_tick: 0,
            stats: VerbsStats::default(),
            config,
        };
        transport.register_buffers()?;
        transport.create_qp()?;
        for slot in 0..transport.config.recv_depth as usize {
            transport.post_recv(slot)?;
        }
        Ok(transport)
    }

    fn register_buffers(&mut self) -> Result<(), TransportError> {
        let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as c_int;
        // SAFETY: the PD is live; each buffer is a boxed slice owned by `self` whose heap
        // block never moves and outlives its MR: `res` is declared before `send_buf` and
        // `recv_buf` in `VerbsTransport`, so its drop (which deregisters the MRs) runs
        // before the buffers are freed.
        unsafe {
            self.res.send_mr = ffi::ibv_reg_mr(
                self.res.pd,
                self.send_buf.as_mut_ptr().cast::<c_void>(),
                self.send_buf.len(),
                access,
            );
        }
        if self.res.send_mr.is_null() {
            return Err(os_error(
                "ibv_reg_mr",
                format!("{} send buffer", self.device),
                errno(),
            ));
        }
        // SAFETY: as above, for the receive buffer.
        unsafe {
            self.res.recv_mr = ffi::ibv_reg_mr(
                self.res.pd,
                self.recv_buf.as_mut_ptr().cast::<c_void>(),
                self.recv_buf.len(),
                access,
            );
        }
        if self.res.recv_mr.is_null() {
            return Err(os_error(
                "ibv_reg_mr",
                format!("{} receive buffer", self.device),
                errno(),
            ));
        }
        Ok(())
    }

    fn create_qp(&mut self) -> Result<(), TransportError> {
        let place = format!("{} port {}", self.device, self.config.port);
        // SAFETY: the CQ is live.
        let cq = unsafe { ffi::ibv_cq_ex_to_cq(self.res.cq) };
        // Inline sends copy the payload into the work request: no DMA from our buffer. Ask
        // for room for a probe and some; a device that refuses gets the plain request.
        let mut qp = ptr::null_mut();
        let mut last = 0;
        for inline in [128u32, 0] {
            // SAFETY: a zeroed ibv_qp_init_attr is valid (null pointers, zero numbers).
            let mut attr: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            attr.send_cq = cq;
            attr.recv_cq = cq;
            attr.cap.max_send_wr = self.config.send_depth;
            attr.cap.max_recv_wr = self.config.recv_depth;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = inline;
            attr.qp_type = ffi::ibv_qp_type::IBV_QPT_UD;
            attr.sq_sig_all = 0;
            // SAFETY: the PD and CQ are live; `attr` is initialised; on success the
            // provider writes the granted caps back into it.
            qp = unsafe { ffi::ibv_create_qp(self.res.pd, &mut attr) };
            if !qp.is_null() {
                self.max_inline = attr.cap.max_inline_data.min(inline);
                break;
            }
            last = errno();
        }
        if qp.is_null() {
            return Err(os_error("ibv_create_qp (UD)", &place, last));
        }
        self.res.qp = qp;
        // SAFETY: the QP is live.
        self.local.qpn = unsafe { (*qp).qp_num };

        // INIT → RTR → RTS (IBTA 10.3.1; a UD QP needs only these attributes, verbs.h
        // ibv_modify_qp "UD: INIT: STATE, PKEY_INDEX, PORT, QKEY; RTR: STATE; RTS:
        // STATE, SQ_PSN").
        use ffi::ibv_qp_attr_mask as m;
        let steps = [
            (
                ffi::ibv_qp_state::IBV_QPS_INIT,
                (m::IBV_QP_STATE.0 | m::IBV_QP_PKEY_INDEX.0 | m::IBV_QP_PORT.0 | m::IBV_QP_QKEY.0),
                "INIT",
            ),
            (ffi::ibv_qp_state::IBV_QPS_RTR, m::IBV_QP_STATE.0, "RTR"),
            (
                ffi::ibv_qp_state::IBV_QPS_RTS,
                m::IBV_QP_STATE.0 | m::IBV_QP_SQ_PSN.0,
                "RTS",
            ),
        ];
        for (state, mask, name) in steps {
            // SAFETY: a zeroed ibv_qp_attr is valid; only the masked fields are read.
            let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
            attr.qp_state = state;
            attr.pkey_index = 0;
            attr.port_num = self.config.port;
            attr.qkey = self.config.qkey;
            attr.sq_psn = self.local.qpn & 0x00FF_FFFF;
            // SAFETY: the QP is live, `attr` initialised, the mask names what is set.
            let rc = unsafe { ffi::ibv_modify_qp(qp, &mut attr, mask as c_int) };
            if rc != 0 {
                return Err(TransportError::Os {
                    op: "ibv_modify_qp",
                    place: format!("{place} QP {:#x} to {name}", self.local.qpn),
                    errno: rc,
                });
            }
        }
        Ok(())
    }

    /// Where it runs, for logs: device, port, GID index, address and clock.
    pub fn describe(&self) -> String {
        format!(
            "{} port {} GID index {} {} ({})",
            self.device, self.config.port, self.gid_index, self.local, self.clock
        )
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The GID index in use.
    pub fn gid_index(&self) -> u32 {
        self.gid_index
    }

    /// This transport's address: the port GID and the UD QPN (the engine's id).
    pub fn local_addr(&self) -> UdAddr {
        self.local
    }

    /// The port's active MTU (bytes): the largest payload a send takes.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The largest payload sent inline (copied into the work request by the post: 0 when
    /// the device granted no inline data).
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// Where the events' timestamps come from.
    pub fn completion_clock(&self) -> &CompletionClock {
        &self.clock
    }

    /// Counters.
    pub fn stats(&self) -> &VerbsStats {
        &self.stats
    }

    /// Address handles cached now.
    pub fn address_handles(&self) -> usize {
        self.res.ahs.len()
    }

    /// Sends waiting for their completion now.
    pub fn pending_sends(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), TransportError> {
        let size = GRH_BYTES + self.mtu;
        let offset = slot * size;
        let mut sge = ffi::ibv_sge {
            addr: self.recv_buf[offset..].as_mut_ptr() as u64,
            length: size as u32,
            // SAFETY: the MR is live (registered in `open`).
            lkey: unsafe { (*self.res.recv_mr).lkey },
        };
        // SAFETY: a zeroed ibv_recv_wr is valid (null next).
        let mut wr: ffi::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = RECV_TAG | slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `sge` live across the call (the provider copies
        // them into its queue); the slot's bytes are inside the registered receive buffer
        // and no other posted receive uses them.
        let rc = unsafe { ffi::ibv_post_recv(self.res.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_error(
                "ibv_post_recv",
                format!("{} QP {:#x} slot {slot}", self.device, self.local.qpn),
                rc,
            ));
        }
        Ok(())
    }

    /// The address handle to `gid` with `flow_label`, created or taken from the cache.
    fn address_handle(
        &mut self,
        gid: [u8; 16],
        flow_label: u32,
    ) -> Result<*mut ffi::ibv_ah, TransportError> {
        self.use_tick += 1;
        let tick = self.use_tick;
        if let Some(handle) = self.res.ahs.get_mut(&(gid, flow_label)) {
            handle.last_used = tick;
            return Ok(handle.ah);
        }
        if self.res.ahs.len() >= self.config.max_address_handles {
            let victim = self
                .res
                .ahs
                .iter()
                .filter(|(_, h)| h.in_flight == 0)
                .min_by_key(|(_, h)| h.last_used)
                .map(|(k, _)| *k);
            let Some(victim) = victim else {
                return Err(TransportError::Invalid {
                    place: format!("address handles of {}", self.device),
                    reason: format!(
                        "all {} have sends in flight (VerbsConfig::max_address_handles)",
                        self.res.ahs.len()
                    ),
                });
            };
            if let Some(handle) = self.res.ahs.remove(&victim) {
                // SAFETY: the handle was created here, is in no posted send (in_flight 0)
                // and is destroyed once.
                unsafe { ffi::ibv_destroy_ah(handle.ah) };
                self.stats.address_handles_evicted += 1;
            }
        }
        // SAFETY: a zeroed ibv_ah_attr is valid.
        let mut attr: ffi::ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.is_global = 1;
        attr.port_num = self.config.port;
        attr.grh.dgid = ffi::ibv_gid { raw: gid };
        attr.grh.sgid_index = self.gid_index as u8;
        attr.grh.flow_label = flow_label;
        attr.grh.hop_limit = self.config.hop_limit;
        attr.grh.traffic_class = self.config.traffic_class;
        // SAFETY: the PD is live and `attr` initialised; for RoCE the kernel resolves the
        // destination MAC from the GID (it may wait for ARP).
        let ah = unsafe { ffi::ibv_create_ah(self.res.pd, &mut attr) };
        if ah.is_null() {
            return Err(os_error(
                "ibv_create_ah",
                format!(
                    "{} GID index {} -> {} flow label {flow_label:#x}",
                    self.device,
                    self.gid_index,
                    Ipv6Addr::from(gid)
                ),
                errno(),
            ));
        }
        self.stats.address_handles_created += 1;
        self.res.ahs.insert(
            (gid, flow_label),
            AddressHandle {
                ah,
                last_used: tick,
                in_flight: 0,
            },
        );
        Ok(ah)
    }

    /// The timestamp of the completion `cq` points at.
    fn completion_stamp(&mut self) -> Option<u64> {
        match self.clock {
            // SAFETY: called between a successful start/next_poll and end_poll on a CQ
            // created with the wall-clock flag.
            CompletionClock::WallClock => {
                Some(unsafe { ffi::ibv_wc_read_completion_wallclock_ns(self.res.cq) })
            }
            CompletionClock::DeviceTicks { .. } => {
                // SAFETY: as above, on a CQ created with the raw timestamp flag.
                let raw = unsafe { ffi::ibv_wc_read_completion_ts(self.res.cq) };
                self.ticks.as_mut().map(|t| t.to_ns(raw))
            }
            CompletionClock::HostClock { .. } => None,
        }
    }

    /// Handles the completion the CQ points at (between start/next_poll and end_poll).
    fn handle_completion(&mut self, events: &mut Vec<TransportEvent<UdAddr>>) {
        // SAFETY: the CQ is live and positioned on a completion (the caller's contract);
        // wr_id and status are plain fields of ibv_cq_ex valid until the next poll call.
        let (wr_id, status) = unsafe { ((*self.res.cq).wr_id, (*self.res.cq).status) };
        let ok = status == ffi::ibv_wc_status::IBV_WC_SUCCESS;
        let stamp = if ok { self.completion_stamp() } else { None };
        if wr_id & RECV_TAG != 0 {
            let slot = (wr_id & !RECV_TAG) as usize;
            if slot >= self.config.recv_depth as usize {
                self.stats.recv_errors += 1;
                self.stats.last_error = Some(format!(
                    "{}: receive completion for unknown slot {slot}",
                    self.device
                ));
                return;
            }
            if ok {
                self.on_receive(slot, stamp, events);
            } else {
                self.stats.recv_errors += 1;
                self.stats.last_error = Some(format!(
                    "{} QP {:#x} receive: {}",
                    self.device,
                    self.local.qpn,
                    status_text(status)
                ));
            }
            // A flushed receive (the QP left RTS) cannot be posted again; the next post
            // says why through the error counters.
            if let Err(e) = self.post_recv(slot) {
                self.stats.recv_errors += 1;
                self.stats.last_error = Some(e.to_string());
            }
        } else {
            let slot = wr_id as usize;
            let Some(sent) = self.slots.get_mut(slot).and_then(Option::take) else {
                self.stats.send_errors += 1;
                self.stats.last_error = Some(format!(
                    "{}: send completion for unknown slot {slot}",
                    self.device
                ));
                return;
            };
            self.free_slots.push(slot);
            if let Some(handle) = self.res.ahs.get_mut(&sent.ah_key) {
                handle.in_flight = handle.in_flight.saturating_sub(1);
            }
            if !ok {
                self.stats.send_errors += 1;
                self.stats.last_error = Some(format!(
                    "{} QP {:#x} send to {}: {}",
                    self.device,
                    self.local.qpn,
                    Ipv6Addr::from(sent.ah_key.0),
                    status_text(status)
                ));
            }
            let stamps = Stamps {
                hardware: stamp,
                software: None,
                host_ns: sent.posted_ns,
            };
            count(&mut self.stats.tx, &stamps);
            events.push(TransportEvent::Sent {
                token: sent.token,
                stamps,
            });
        }
    }

    fn on_receive(
        &mut self,
        slot: usize,
        stamp: Option<u64>,
        events: &mut Vec<TransportEvent<UdAddr>>,
    ) {
        let host_ns = host_now_ns();
        // SAFETY: the CQ is positioned on this successful receive completion; these
        // readers are among the flags every CQ here was created with (BYTE_LEN, SRC_QP;
        // wc_flags is always available).
        let (byte_len, src_qp, wc_flags) = unsafe {
            (
                ffi::ibv_wc_read_byte_len(self.res.cq),
                ffi::ibv_wc_read_src_qp(self.res.cq),
                ffi::ibv_wc_read_wc_flags(self.res.cq),
            )
        };
        let size = GRH_BYTES + self.mtu;
        let area = &self.recv_buf[slot * size..(slot + 1) * size];
        let has_grh = wc_flags & ffi::ibv_wc_flags::IBV_WC_GRH.0 != 0;
        let Some(gid) = has_grh
            .then(|| grh_source_gid(&area[..GRH_BYTES]))
            .flatten()
        else {
            self.stats.no_grh += 1;
            return;
        };
        let len = (byte_len as usize).saturating_sub(GRH_BYTES).min(self.mtu);
        if len > MAX_DATAGRAM_BYTES {
            self.stats.oversized += 1;
        }
        let payload = area[GRH_BYTES..GRH_BYTES + len.min(MAX_DATAGRAM_BYTES)].to_vec();
        let src_port = ProbePayload::new_checked(&payload[..])
            .map(|p| p.src_port())
            .unwrap_or(0);
        if src_port == 0 {
            self.stats.no_src_port += 1;
        }
        let stamps = Stamps {
            hardware: stamp,
            software: None,
            host_ns,
        };
        count(&mut self.stats.rx, &stamps);
        events.push(TransportEvent::Received {
            from: UdAddr {
                gid,
                qpn: src_qp & 0x00FF_FFFF,
            },
            src_port,
            stamps,
            payload,
        });
    }

    /// Takes up to `budget` completions from the CQ, one per `ibv_start_poll` /
    /// `ibv_end_poll` pair. Not the man page's loop over `ibv_next_poll`: on Soft-RoCE
    /// (rdma-core v44 providers/rxe/rxe.c) a `cq_next_poll` that finds the queue empty
    /// already stores the consumer index and releases the CQ lock, and the `cq_end_poll`
    /// that must follow advances the index once more and unlocks again — the consumer then
    /// runs past the producer and reads stale completions again and again (seen in the VM
    /// test). Start and end around each completion is correct on every provider: mlx5's
    /// end consumes the current entry and unlocks, rxe's advances past it and unlocks.
    fn drain(
        &mut self,
        budget: usize,
        events: &mut Vec<TransportEvent<UdAddr>>,
    ) -> Result<usize, TransportError> {
        let mut handled = 0;
        while handled < budget {
            let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
            // SAFETY: the CQ is live; start_poll positions it on the oldest completion, or
            // returns ENOENT having released what it took (no end_poll then, verbs.h).
            let rc = unsafe { ffi::ibv_start_poll(self.res.cq, &mut attr) };
            if rc == libc::ENOENT {
                break;
            }
            if rc != 0 {
                return Err(os_error("ibv_start_poll", &self.device, rc));
            }
            self.handle_completion(events);
            // SAFETY: ends the poll started above, consuming the completion just read.
            unsafe { ffi::ibv_end_poll(self.res.cq) };
            handled += 1;
        }
        Ok(handled)
    }

    /// Arms the CQ, and waits on the completion channel at most `wait`.
    fn wait_for_completions(&mut self, wait: Duration) -> Result<(), TransportError> {
        // SAFETY: the CQ is live.
        let cq = unsafe { ffi::ibv_cq_ex_to_cq(self.res.cq) };
        // SAFETY: the CQ was created on the completion channel.
        let rc = unsafe { ffi::ibv_req_notify_cq(cq, 0) };
        if rc != 0 {
            return Err(os_error("ibv_req_notify_cq", &self.device, rc));
        }
        // SAFETY: the channel is live; its fd stays open while `self` lives.
        let fd = unsafe { BorrowedFd::borrow_raw((*self.res.channel).fd) };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                return Err(os_error(
                    "ppoll",
                    format!("{} completion channel", self.device),
                    e as i32,
                ))
            }
        }
        // Take (and acknowledge at once) the events that came; the fd is non-blocking.
        for _ in 0..64 {
            let mut ev_cq = ptr::null_mut();
            let mut ev_ctx = ptr::null_mut();
            // SAFETY: the channel is live, the out-pointers valid.
            let rc = unsafe { ffi::ibv_get_cq_event(self.res.channel, &mut ev_cq, &mut ev_ctx) };
            if rc != 0 {
                break;
            }
            // SAFETY: `ev_cq` is the CQ the event is for (ours); one event acknowledged.
            unsafe { ffi::ibv_ack_cq_events(ev_cq, 1) };
            self.stats.cq_events += 1;
        }
        Ok(())
    }
}

/// `ibv_wc_status_str` of a status, with its number.
fn status_text(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a static string (or null without libibverbs).
    let text = unsafe { ffi::ibv_wc_status_str(status) };
    if text.is_null() {
        return format!("completion status {status}");
    }
    // SAFETY: non-null: a NUL-terminated static string.
    let text = unsafe { CStr::from_ptr(text) };
    format!("{} (status {status})", text.to_string_lossy())
}

/// Finds the GID to use: `wanted` (which must be RoCE v2), or the first RoCE v2 GID that
/// is IPv4-mapped.
fn find_gid(
    context: *mut ffi::ibv_context,
    port: u8,
    table_len: c_int,
    wanted: Option<u32>,
    place: &str,
) -> Result<(u32, [u8; 16]), VerbsError> {
    let query = |index: u32| -> Result<([u8; 16], u32), i32> {
        // SAFETY: a zeroed ibv_gid_entry is valid (a union of byte arrays and integers).
        let mut entry: ffi::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `entry` is a valid out-pointer of the size passed.
        let rc = unsafe { ffi::ibv_query_gid_ex(context, u32::from(port), index, &mut entry, 0) };
        if rc != 0 {
            return Err(rc);
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        let raw = unsafe { entry.gid.raw };
        Ok((raw, entry.gid_type))
    };
    if let Some(index) = wanted {
        let (gid, kind) = query(index)
            .map_err(|rc| os_error("ibv_query_gid_ex", format!("{place} GID index {index}"), rc))?;
        if kind != GID_TYPE_ROCE_V2 {
            return Err(VerbsError::Transport(TransportError::Invalid {
                place: format!("VerbsConfig::gid_index {index} on {place}"),
                reason: format!(
                    "GID {} is of type {kind}, not RoCE v2 ({GID_TYPE_ROCE_V2})",
                    Ipv6Addr::from(gid)
                ),
            }));
        }
        return Ok((index, gid));
    }
    let len = u32::try_from(table_len).unwrap_or(0);
    let mut seen = Vec::new();
    for index in 0..len {
        // Empty entries answer ENODATA (rdma-core libibverbs/cmd_device.c).
        let Ok((gid, kind)) = query(index) else {
            continue;
        };
        let ip = Ipv6Addr::from(gid);
        if kind == GID_TYPE_ROCE_V2 && ip.to_ipv4_mapped().is_some() {
            return Ok((index, gid));
        }
        seen.push(format!("{index}: {ip} type {kind}"));
    }
    Err(VerbsError::NoDevice(format!(
        "{place} has no RoCE v2 IPv4 GID (is an IPv4 address on its netdev?); GIDs: [{}]",
        seen.join(", ")
    )))
}

/// Creates the extended CQ with the best completion timestamps the device gives.
fn create_cq(
    res: &Resources,
    cqe: u32,
    dev_attr: &ffi::ibv_device_attr_ex,
    want_timestamps: bool,
    device: &str,
) -> Result<(*mut ffi::ibv_cq_ex, CompletionClock), TransportError> {
    use ffi::ibv_create_cq_wc_flags as w;
    let base = u64::from(w::IBV_WC_EX_WITH_BYTE_LEN.0 | w::IBV_WC_EX_WITH_SRC_QP.0);
    let mask = dev_attr.completion_timestamp_mask;
    let khz = dev_attr.hca_core_clock;
    let mut tries: Vec<(u64, CompletionClock)> = Vec::new();
    let mut refusals = Vec::new();
    if !want_timestamps {
        refusals
            .push("NIC timestamps switched off (VerbsConfig::completion_timestamps)".to_string());
    } else if mask == 0 {
        refusals.push(format!(
            "{device} has no completion timestamps (completion_timestamp_mask 0)"
        ));
    } else {
        tries.push((
            u64::from(w::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK.0),
            CompletionClock::WallClock,
        ));
        if khz > 0 {
            tries.push((
                u64::from(w::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0),
                CompletionClock::DeviceTicks { khz, mask },
            ));
        } else {
            refusals.push("raw timestamps unusable: hca_core_clock is 0".to_string());
        }
    }
    tries.push((
        0,
        CompletionClock::HostClock {
            reason: String::new(),
        },
    ));
    let mut last = 0;
    for (flags, clock) in tries {
        // SAFETY: a zeroed ibv_cq_init_attr_ex is valid (null pointers, zero masks).
        let mut attr: ffi::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = cqe;
        attr.channel = res.channel;
        attr.comp_vector = 0;
        attr.wc_flags = base | flags;
        // SAFETY: the context and channel are live; `attr` is initialised.
        let cq = unsafe { ffi::ibv_create_cq_ex(res.context, &mut attr) };
        if !cq.is_null() {
            let clock = match clock {
                CompletionClock::HostClock { .. } => CompletionClock::HostClock {
                    reason: refusals.join("; "),
                },
                other => other,
            };
            return Ok((cq, clock));
        }
        last = errno();
        refusals.push(format!(
            "{device} refused a CQ with {}: {}",
            match clock {
                CompletionClock::WallClock => "wall-clock timestamps",
                CompletionClock::DeviceTicks { .. } => "raw timestamps",
                CompletionClock::HostClock { .. } => "no timestamps",
            },
            std::io::Error::from_raw_os_error(last)
        ));
    }
    Err(os_error("ibv_create_cq_ex", device, last))
}

impl ProbeTransport for VerbsTransport {
    type Addr = UdAddr;

    fn now_ns(&self) -> u64 {
        host_now_ns()
    }

    fn send(
        &mut self,
        to: &UdAddr,
        src_port: u16,
        payload: &[u8],
        token: u64,
    ) -> Result<u64, TransportError> {
        let Some(flow_label) = flow_label_for_udp_sport(src_port) else {
            return Err(TransportError::Invalid {
                place: format!("source port of a send to {to}"),
                reason: format!(
                    "{src_port} is not a RoCEv2 source port (flow labels give 49152..=65535)"
                ),
            });
        };
        if payload.len() > self.mtu {
            return Err(TransportError::Invalid {
                place: format!("payload of a send to {to}"),
                reason: format!(
                    "{} bytes exceed the port's MTU of {} (a UD message is one packet)",
                    payload.len(),
                    self.mtu
                ),
            });
        }
        if to.qpn > 0x00FF_FFFF {
            return Err(TransportError::Invalid {
                place: format!("destination {to}"),
                reason: "a QPN has 24 bits".into(),
            });
        }
        let Some(&slot) = self.free_slots.last() else {
            return Err(TransportError::Invalid {
                place: format!("send queue of {} QP {:#x}", self.device, self.local.qpn),
                reason: format!(
                    "{} sends in flight, the queue holds {} (VerbsConfig::send_depth)",
                    self.slots.len(),
                    self.slots.len()
                ),
            });
        };
        let ah = self.address_handle(to.gid, flow_label)?;
        let offset = slot * self.mtu;
        self.send_buf[offset..offset + payload.len()].copy_from_slice(payload);
        let mut sge = ffi::ibv_sge {
            addr: self.send_buf[offset..].as_mut_ptr() as u64,
            length: payload.len() as u32,
            // SAFETY: the MR is live (registered in `open`).
            lkey: unsafe { (*self.res.send_mr).lkey },
        };
        let mut flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        if payload.len() <= self.max_inline as usize {
            flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        // SAFETY: a zeroed ibv_send_wr is valid (null next, zero union).
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = flags;
        wr.wr.ud = ffi::ud_t {
            ah,
            remote_qpn: to.qpn,
            remote_qkey: self.config.qkey,
        };
        let mut bad = ptr::null_mut();
        // The host-clock reading of the send is taken *before* the post: Soft-RoCE may put
        // the packet on the wire inside the call (its requester task can run in the
        // caller's context, Linux drivers/infiniband/sw/rxe/rxe_verbs.c `rxe_post_send`),
        // and a vCPU or thread descheduled before the call returns would read a time after
        // the answer had already been received — ⑤−② shorter than ④−③, a result the
        // prober must call inconsistent (seen in the VM test). A reading before the post
        // never follows the departure, so on host clocks ⑤−② ≥ ④−③ (clock rates aside).
        let posted_ns = host_now_ns();
        // SAFETY: the QP and AH are live; `wr` and `sge` live across the call; the slot's
        // bytes are in the registered send buffer and stay untouched until its completion
        // (the slot is not free until then).
        let rc = unsafe { ffi::ibv_post_send(self.res.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_error(
                "ibv_post_send",
                format!(
                    "{} QP {:#x} -> {to} source port {src_port}",
                    self.device, self.local.qpn
                ),
                rc,
            ));
        }
        self.free_slots.pop();
        self.slots[slot] = Some(SendSlot {
            token,
            posted_ns,
            ah_key: (to.gid, flow_label),
        });
        if let Some(handle) = self.res.ahs.get_mut(&(to.gid, flow_label)) {
            handle.in_flight += 1;
        }
        Ok(posted_ns)
    }

    fn poll(
        &mut self,
        wait: Duration,
        events: &mut Vec<TransportEvent<UdAddr>>,
    ) -> Result<(), TransportError> {
        if self.drain(MAX_EVENTS_PER_POLL, events)? > 0 || wait.is_zero() {
            return Ok(());
        }
        // Nothing yet: arm, look again (a completion between the drain and the arming
        // raises no event), then sleep on the channel.
        self.wait_for_completions(Duration::ZERO)?;
        if self.drain(MAX_EVENTS_PER_POLL, events)? > 0 {
            return Ok(());
        }
        self.wait_for_completions(wait)?;
        self.drain(MAX_EVENTS_PER_POLL, events)?;
        Ok(())
    }
}

/// One end of a reliable connection: what the peer needs to connect to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcEndpoint {
    /// The port GID.
    pub gid: [u8; 16],
    /// The RC queue pair number.
    pub qpn: u32,
    /// Its first packet sequence number (24 bits).
    pub psn: u32,
}

/// An RC queue pair connected to one peer with a chosen GRH flow label: a service
/// connection for labs (the Soft-RoCE test's flow label → UDP source port check on the
/// wire, and something for the eBPF tracer to see), not used by probing. Created in INIT
/// with one receive posted; [`Self::connect`] takes it to RTR and RTS (IBTA 10.3.1; the
/// attributes `ibv_rc_pingpong` uses); [`Self::exchange`] sends or answers one message.
pub struct RcConnection {
    device: String,
    port: u8,
    gid_index: u32,
    mtu_code: u32,
    local: RcEndpoint,
    res: Resources,
    /// Slot 0 sends, slot 1 receives (64 bytes each), registered as `send_mr`.
    buf: Box<[u8]>,
    /// Bytes of the last message received.
    received_len: usize,
}

// SAFETY: as for `VerbsTransport`: libibverbs objects may be used from any thread, and
// the connection owns them alone behind `&mut self`.
unsafe impl Send for RcConnection {}

impl fmt::Debug for RcConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RcConnection")
            .field("device", &self.device)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

const RC_SLOT: usize = 64;

impl RcConnection {
    /// Opens the device and port of `config` (device, port, GID index) and creates the RC
    /// queue pair in INIT with one receive posted.
    pub fn create(config: &VerbsConfig) -> Result<Self, VerbsError> {
        config.validate()?;
        let Port {
            mut res,
            name,
            gid_index,
            gid,
            mtu: _,
            mtu_code,
            dev_attr,
        } = open_port(config)?;
        let place = format!("{name} port {}", config.port);
        // SAFETY: the context is open.
        res.pd = unsafe { ffi::ibv_alloc_pd(res.context) };
        if res.pd.is_null() {
            return Err(os_error("ibv_alloc_pd", &name, errno()).into());
        }
        let (cq, _) = create_cq(&res, 8, &dev_attr, false, &name)?;
        res.cq = cq;
        let mut buf = vec![0u8; 2 * RC_SLOT].into_boxed_slice();
        // SAFETY: the PD is live; `buf` is owned by the connection, its heap block never
        // moves and outlives the MR (`res` is declared before `buf`, so its drop, which
        // deregisters the MR, runs first).
        res.send_mr = unsafe {
            ffi::ibv_reg_mr(
                res.pd,
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
                ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as c_int,
            )
        };
        if res.send_mr.is_null() {
            return Err(os_error("ibv_reg_mr", format!("{name} RC buffer"), errno()).into());
        }
        // SAFETY: the CQ is live.
        let cq = unsafe { ffi::ibv_cq_ex_to_cq(res.cq) };
        // SAFETY: a zeroed ibv_qp_init_attr is valid (null pointers, zero numbers).
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap.max_send_wr = 2;
        init.cap.max_recv_wr = 2;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        // SAFETY: the PD and CQ are live; `init` is initialised.
        res.qp = unsafe { ffi::ibv_create_qp(res.pd, &mut init) };
        if res.qp.is_null() {
            return Err(os_error("ibv_create_qp (RC)", &place, errno()).into());
        }
        // SAFETY: the QP is live.
        let qpn = unsafe { (*res.qp).qp_num };
        let psn = (host_now_ns() as u32) & 0x00FF_FFFF;
        let mut connection = RcConnection {
            device: name,
            port: config.port,
            gid_index,
            mtu_code,
            local: RcEndpoint { gid, qpn, psn },
            res,
            buf,
            received_len: 0,
        };
        use ffi::ibv_qp_attr_mask as m;
        // SAFETY: a zeroed ibv_qp_attr is valid; only the masked fields are read.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = connection.port;
        attr.qp_access_flags = 0;
        connection.modify(
            &mut attr,
            m::IBV_QP_STATE.0
                | m::IBV_QP_PKEY_INDEX.0
                | m::IBV_QP_PORT.0
                | m::IBV_QP_ACCESS_FLAGS.0,
            "INIT",
        )?;
        connection.post_recv()?;
        Ok(connection)
    }

    /// What the peer needs to connect to this end.
    pub fn local(&self) -> RcEndpoint {
        self.local
    }

    fn modify(
        &mut self,
        attr: &mut ffi::ibv_qp_attr,
        mask: u32,
        state: &str,
    ) -> Result<(), TransportError> {
        // SAFETY: the QP is live, `attr` initialised, the mask names what is set.
        let rc = unsafe { ffi::ibv_modify_qp(self.res.qp, attr, mask as c_int) };
        if rc != 0 {
            return Err(TransportError::Os {
                op: "ibv_modify_qp",
                place: format!("{} RC QP {:#x} to {state}", self.device, self.local.qpn),
                errno: rc,
            });
        }
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), TransportError> {
        let mut sge = ffi::ibv_sge {
            addr: self.buf[RC_SLOT..].as_mut_ptr() as u64,
            length: RC_SLOT as u32,
            // SAFETY: the MR is live.
            lkey: unsafe { (*self.res.send_mr).lkey },
        };
        // SAFETY: a zeroed ibv_recv_wr is valid.
        let mut wr: ffi::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = 1;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `sge` live across the call; slot 1 is in the
        // registered buffer and no other receive uses it.
        let rc = unsafe { ffi::ibv_post_recv(self.res.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_error(
                "ibv_post_recv",
                format!("{} RC QP {:#x}", self.device, self.local.qpn),
                rc,
            ));
        }
        Ok(())
    }

    /// Connects to `peer` with the GRH `flow_label` (0: the stack derives one from both
    /// QPNs): RTR (path MTU of the port, the peer's QPN and PSN, the address vector with
    /// the label) then RTS.
    pub fn connect(&mut self, peer: RcEndpoint, flow_label: u32) -> Result<(), TransportError> {
        if flow_label > hawkmesh_wire::roce::FLOW_LABEL_MASK {
            return Err(TransportError::Invalid {
                place: format!("flow label of RC QP {:#x}", self.local.qpn),
                reason: format!("{flow_label:#x} is more than 20 bits"),
            });
        }
        use ffi::ibv_qp_attr_mask as m;
        // SAFETY: a zeroed ibv_qp_attr is valid; only the masked fields are read.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = self.mtu_code;
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = peer.psn & 0x00FF_FFFF;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 12;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = self.port;
        attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: peer.gid };
        attr.ah_attr.grh.sgid_index = self.gid_index as u8;
        attr.ah_attr.grh.flow_label = flow_label;
        attr.ah_attr.grh.hop_limit = 64;
        self.modify(
            &mut attr,
            m::IBV_QP_STATE.0
                | m::IBV_QP_AV.0
                | m::IBV_QP_PATH_MTU.0
                | m::IBV_QP_DEST_QPN.0
                | m::IBV_QP_RQ_PSN.0
                | m::IBV_QP_MAX_DEST_RD_ATOMIC.0
                | m::IBV_QP_MIN_RNR_TIMER.0,
            "RTR",
        )?;
        // SAFETY: as above.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = 14;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.sq_psn = self.local.psn;
        attr.max_rd_atomic = 1;
        self.modify(
            &mut attr,
            m::IBV_QP_STATE.0
                | m::IBV_QP_TIMEOUT.0
                | m::IBV_QP_RETRY_CNT.0
                | m::IBV_QP_RNR_RETRY.0
                | m::IBV_QP_SQ_PSN.0
                | m::IBV_QP_MAX_QP_RD_ATOMIC.0,
            "RTS",
        )
    }

    fn post_send(&mut self, message: &[u8]) -> Result<(), TransportError> {
        let len = message.len().min(RC_SLOT);
        self.buf[..len].copy_from_slice(&message[..len]);
        let mut sge = ffi::ibv_sge {
            addr: self.buf.as_mut_ptr() as u64,
            length: len as u32,
            // SAFETY: the MR is live.
            lkey: unsafe { (*self.res.send_mr).lkey },
        };
        // SAFETY: a zeroed ibv_send_wr is valid.
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = 0;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `sge` live across the call; slot 0 stays
        // untouched until the send completes (`exchange` waits for it).
        let rc = unsafe { ffi::ibv_post_send(self.res.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_error(
                "ibv_post_send",
                format!("{} RC QP {:#x}", self.device, self.local.qpn),
                rc,
            ));
        }
        Ok(())
    }

    /// Waits (polling every millisecond) until the completion `wr_id` comes, at most
    /// until `deadline`.
    fn wait_for(&mut self, wr_id: u64, deadline: std::time::Instant) -> Result<(), TransportError> {
        let place = || format!("{} RC QP {:#x}", self.device, self.local.qpn);
        loop {
            let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
            // SAFETY: the CQ is live; one completion per start/end pair (see `drain`).
            let rc = unsafe { ffi::ibv_start_poll(self.res.cq, &mut attr) };
            if rc == 0 {
                // SAFETY: positioned on a completion until end_poll; the CQ has BYTE_LEN.
                let (id, status, len) = unsafe {
                    (
                        (*self.res.cq).wr_id,
                        (*self.res.cq).status,
                        ffi::ibv_wc_read_byte_len(self.res.cq),
                    )
                };
                if id == 1 {
                    self.received_len = (len as usize).min(RC_SLOT);
                }
                // SAFETY: ends the poll started above.
                unsafe { ffi::ibv_end_poll(self.res.cq) };
                if status != ffi::ibv_wc_status::IBV_WC_SUCCESS {
                    return Err(TransportError::Invalid {
                        place: place(),
                        reason: format!(
                            "{} completion: {}",
                            if id == 0 { "send" } else { "receive" },
                            status_text(status)
                        ),
                    });
                }
                if id == wr_id {
                    return Ok(());
                }
                continue;
            }
            if rc != libc::ENOENT {
                return Err(os_error("ibv_start_poll", place(), rc));
            }
            if std::time::Instant::now() >= deadline {
                return Err(TransportError::Invalid {
                    place: place(),
                    reason: format!(
                        "no {} completion in time",
                        if wr_id == 0 { "send" } else { "receive" }
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One round trip on the connection, within `timeout`: the client sends `message` and
    /// waits for the answer; the server waits for a message and sends `message` back.
    /// Returns the message received. Messages are at most 64 bytes (longer ones are cut).
    pub fn exchange(
        &mut self,
        client: bool,
        message: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let deadline = std::time::Instant::now() + timeout;
        if client {
            self.post_send(message)?;
            self.wait_for(0, deadline)?;
            self.wait_for(1, deadline)?;
        } else {
            self.wait_for(1, deadline)?;
            self.post_send(message)?;
            self.wait_for(0, deadline)?;
        }
        Ok(self.buf[RC_SLOT..RC_SLOT + self.received_len].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grh_area_gives_the_sender_over_ipv4_and_ipv6() {
        let mut area = [0u8; 40];
        // 20 undefined bytes, then an IPv4 header from 10.0.0.1 to 10.0.0.2.
        area[..20].fill(0xAA);
        area[20] = 0x45;
        area[32..36].copy_from_slice(&[10, 0, 0, 1]);
        area[36..40].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(
            grh_source_gid(&area).map(Ipv6Addr::from),
            Some("::ffff:10.0.0.1".parse().unwrap())
        );
        // A GRH (IPv6 header): version 6, source GID at 8..24.
        let mut grh = [0u8; 40];
        grh[0] = 0x60;
        let sgid: Ipv6Addr = "fe80::1:2".parse().unwrap();
        grh[8..24].copy_from_slice(&sgid.octets());
        assert_eq!(grh_source_gid(&grh).map(Ipv6Addr::from), Some(sgid));
        // Neither, or too short.
        assert_eq!(grh_source_gid(&[0u8; 40]), None);
        assert_eq!(grh_source_gid(&area[..39]), None);
    }

    #[test]
    fn raw_device_ticks_unwrap_and_convert_to_nanoseconds() {
        // A 1 GHz clock (1,000,000 kHz): one tick per ns, a 16-bit counter.
        let mut clock = TickClock::new(1_000_000, 0xFFFF).unwrap();
        assert_eq!(clock.to_ns(0xFFF0), 0xFFF0);
        // The counter wraps: 0x0010 is 0x20 ticks later.
        assert_eq!(clock.to_ns(0x0010), 0xFFF0 + 0x20);
        // Slightly out of order (a receive polled after a later send): earlier, not a wrap.
        assert_eq!(clock.to_ns(0x0008), 0xFFF0 + 0x18);
        // Bits above the mask are ignored.
        assert_eq!(clock.to_ns(0x1_0018), 0xFFF0 + 0x28);
        // A 156.25 MHz clock (ConnectX-4 Lx: 156,250 kHz): 6.4 ns per tick.
        let mut clock = TickClock::new(156_250, u64::MAX >> 1).unwrap();
        assert_eq!(clock.to_ns(1_000), 6_400);
        assert_eq!(clock.to_ns(1_000 + 156_250_000), 1_000_006_400);
        assert!(TickClock::new(0, 0xFFFF).is_none());
        assert!(TickClock::new(1, 0).is_none());
    }

    #[test]
    fn soft_roce_ud_source_ports_follow_the_kernel_hash() {
        // hash_32(v, 14) = (v * 0x61C88647) >> 18, by hand:
        // 0x11 * 0x61C88647 = 0x6_7E50_EAB7 → low 32 bits 0x7E50EAB7 >> 18 = 0x1F94.
        assert_eq!(rxe_ud_source_port(0x11), 0xC000 + 0x1F94);
        // 1 * 0x61C88647 >> 18 = 0x1872.
        assert_eq!(rxe_ud_source_port(1), 0xC000 + 0x1872);
        for qpn in [0u32, 0x12, 0xFF_FFFF] {
            assert!(rxe_ud_source_port(qpn) >= 0xC000);
        }
    }

    #[test]
    fn address_and_settings_errors_name_the_place() {
        let addr = UdAddr::ipv4(Ipv4Addr::new(10, 0, 0, 2), 0x11);
        assert_eq!(addr.to_string(), "10.0.0.2/qp0x11");
        assert_eq!(addr.gid[10..12], [0xFF, 0xFF]);
        let v6 = UdAddr {
            gid: "fe80::1".parse::<Ipv6Addr>().unwrap().octets(),
            qpn: 2,
        };
        assert_eq!(v6.to_string(), "[fe80::1]/qp0x2");
        let bad = VerbsTransport::open(VerbsConfig {
            qkey: 0x8000_0001,
            ..VerbsConfig::default()
        })
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "VerbsConfig::qkey: 0x80000001 has the high bit set: a controlled Q_Key (IBTA 10.2.5)"
        );
        let bad = VerbsTransport::open(VerbsConfig {
            send_depth: 0,
            ..VerbsConfig::default()
        })
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "VerbsConfig::send_depth: 0 is not within 1..=32768"
        );
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(6), None);
    }

    /// On a machine without RDMA (this project's CI and development hosts) opening says why,
    /// in the words an operator needs: the library is missing, or there is no device.
    #[test]
    fn without_rdma_opening_says_why() {
        // What this machine has decides which of the two it must be.
        let library = c"libibverbs.so.1";
        // SAFETY: a NUL-terminated name; the handle is closed at once.
        let loadable = unsafe {
            let h = libc::dlopen(library.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if !h.is_null() {
                libc::dlclose(h);
            }
            !h.is_null()
        };
        let err = match VerbsTransport::open(VerbsConfig::default()) {
            Ok(transport) => {
                // A host with RDMA: only possible with the library and a kernel device.
                assert!(loadable && !kernel_devices().is_empty(), "{transport:?}");
                return;
            }
            Err(err) => err,
        };
        let text = err.to_string();
        if !loadable {
            assert!(matches!(err, VerbsError::LibraryMissing(_)), "{text}");
            assert!(text.starts_with("libibverbs not found: "), "{text}");
            assert!(text.contains("libibverbs.so.1"), "{text}");
            return;
        }
        if kernel_devices().is_empty() {
            assert!(matches!(err, VerbsError::NoDevice(_)), "{text}");
            assert!(text.starts_with("no RDMA device: "), "{text}");
        }
        // A named device that is not there is refused by name.
        let err = VerbsTransport::open(VerbsConfig {
            device: Some("mlx5_9".into()),
            ..VerbsConfig::default()
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("no RDMA device: "), "{text}");
        if !kernel_devices().is_empty() {
            assert!(text.contains("mlx5_9 is not among"), "{text}");
        }
    }
}
