//! The hawkmesh switch program: HAWKEYE telemetry, causality meters and polling
//! (HAWKEYE §3.3–3.4) and, on ToR variants, PARALEON's Elastic Sketch — written once here.
//!
//! # Pipeline
//!
//! ```text
//! ingress (every packet, when it is enqueued)        egress (per copy, when it leaves)
//!  PFC frame (0x8808/0x0101): pause_end_p{q}[port]     clone to CPU: write port context
//!   = now + quanta×512 bit times (quanta 0 = XON);      (victim port, victim paused, PFC
//!   PFC bitmap of paused ports; frame consumed           branch ports)
//!  polling (UDP dport POLLING_UDP_PORT)                polling copy: keep on the victim
//!   hop limit 0 / bad version → drop                    port (flag 01) or, with the PFC
//!   dedupe[hash(event, port)] within interval → drop    bit, on a port of the bridged PFC
//!   clone to CPU (ingress port, arrival flags)          branch set; set the PFC bit when
//!   victim paused = victim port ∈ paused bitmap         the victim is paused; hop − 1
//!   PFC branch = fanout[ingress] ∩ paused bitmap      RoCEv2 (BTH): queue-depth sums per
//!   flag 1x → multicast all ports                       port and flow telemetry (epoch
//!   flag 01 → victim's forwarding choice                slots reset on first touch), flow
//!  IPv4 → forward table (L3/ECMP)                       eviction → egress clone to CPU
//!   RoCEv2 (BTH): paused = pause_end[egress, tc] > now
//!    port packets / paused packets, causality meter
//!    bytes[in→out], fanout and paused bitmaps
//!   ToR: Elastic Sketch insert once per path (DSCP mark bit)
//!                                                    ECT IPv4: RED mark CE on enq_qdepth
//!                                                     (ecn_profile per egress port)
//! ```
//!
//! HAWKEYE's artifact counts in egress only, so a packet held behind a PAUSE is invisible
//! until it leaves; during a PFC storm or a deadlock it never leaves. Counting paused
//! packets and meter bytes at enqueue (ingress knows the egress port and the time) makes the
//! paused port and its causality visible while the pause lasts; queue depths at enqueue are
//! only known in egress (`enq_qdepth`), so those sums stay there, keyed by the enqueue epoch.
//!
//! Registers are sized from [`HawkeyeParams`]; every index is
//! `epoch_index ++ port` / `epoch_index ++ ingress ++ egress` / `epoch_index ++ flow slot`.
//!
//! # Modules
//!
//! [`program`] reads as the pipeline's table of contents: one function per program module,
//! in the order the modules declare their objects (the order fixes every id, hence the
//! generated P4 and model). What one module hands to the next travels in small structs
//! (field, register-action and table ids) rather than loose locals.
//!
//! | file | module |
//! |---|---|
//! | `hawkeye/dsl.rs` | builder shorthands: register actions, per-epoch register patterns |
//! | `hawkeye/constants.rs` | constants shared with Rust, the all-ports multicast group |
//! | `hawkeye/headers.rs` | headers and the parser |
//! | `hawkeye/fields.rs` | intrinsic metadata and the metadata several modules share |
//! | `hawkeye/forwarding.rs` | the L3/ECMP forwarding table |
//! | `hawkeye/dedupe.rs` | polling duplicate suppression (ingress) |
//! | `hawkeye/elastic_sketch.rs` | Elastic Sketch (ingress, ToR) |
//! | `hawkeye/pfc_status.rs` | ingress PFC status: pause ends, port speeds, the PFC frame |
//! | `hawkeye/port_mask.rs` | one-hot port-mask tables (ingress and egress) |
//! | `hawkeye/pfc_branch.rs` | the polling PFC branch's bitmaps (ingress) |
//! | `hawkeye/enqueue.rs` | ingress enqueue telemetry and causality meter |
//! | `hawkeye/ingress.rs` | the ingress control |
//! | `hawkeye/epoch_ring.rs` | egress epoch ring: queue-depth sums and flow telemetry |
//! | `hawkeye/ecn.rs` | ECN marking on the queue depth, DCQCN's RED profile per egress port |
//! | `hawkeye/egress.rs` | egress polling, CPU copies and the egress control |

mod constants;
mod dedupe;
mod dsl;
mod ecn;
mod egress;
mod elastic_sketch;
mod enqueue;
mod epoch_ring;
mod fields;
mod forwarding;
pub use forwarding::{ECMP_BUCKETS, FORWARD_DESTINATIONS};
mod headers;
mod ingress;
mod pfc_branch;
mod pfc_status;
mod polling_guard;
mod port_mask;

use crate::error::BuildError;
use crate::ir::*;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u64 = 0x0800;

/// Module of the per-epoch port telemetry registers (cells `slot·ports + port`).
pub const MODULE_PORT_TELEMETRY: &str = "port telemetry";
/// Module of the per-epoch PFC causality meter (cells `slot·ports² + ingress·ports + egress`).
pub const MODULE_CAUSALITY_METER: &str = "causality meter";
/// Module of the per-epoch flow telemetry (cells `slot·flow_slots + hash slot`).
pub const MODULE_FLOW_TELEMETRY: &str = "flow telemetry";
/// IPv4 protocol number of UDP.
pub const IP_PROTOCOL_UDP: u64 = 17;

/// Name of the register holding, per port, when the PFC pause of priority `q` ends.
pub fn pause_end_register(q: u8) -> String {
    format!("pause_end_p{q}")
}

/// Parameters of a program variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HawkeyeParams {
    /// Front-panel ports (power of two; port numbers are `0..ports`).
    pub ports: u32,
    /// Epochs kept in the ring (power of two).
    pub epochs: u32,
    /// log2 of the epoch length in ns (HAWKEYE §3.3: 2^20 ns ≈ 1 ms).
    pub epoch_log2_ns: u8,
    /// Flow slots per epoch (power of two).
    pub flow_slots: u32,
    /// Polling duplicate-suppression slots (power of two).
    pub dedupe_slots: u32,
    /// Duplicate-suppression interval in units of 1024 ns.
    pub dedupe_interval_units: u32,
    /// CPU port number (Tofino: the PCIe CPU port, e.g. 192 on a 2-pipe Wedge 100BF-32X).
    pub cpu_port: u16,
    /// Elastic Sketch (PARALEON) on ToR switches.
    pub sketch: Option<SketchParams>,
    /// log2 of the polling rate window on host-facing ports, ns (16..=30).
    pub polling_window_log2_ns: u8,
    /// Polling packets a host-facing port may send per window (more are refused).
    pub polling_per_window: u32,
}

/// Elastic Sketch sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SketchParams {
    /// Heavy-part buckets (power of two).
    pub heavy_buckets: u32,
    /// Light-part 8-bit counters (power of two).
    pub light_counters: u32,
    /// Eviction threshold λ: vote− ≥ λ × vote+ (Elastic Sketch §3.1; 8 in the paper).
    pub lambda: u32,
}

impl Default for HawkeyeParams {
    fn default() -> Self {
        HawkeyeParams {
            ports: 64,
            epochs: 4,
            epoch_log2_ns: 20,
            flow_slots: 4096,
            dedupe_slots: 1024,
            // ≈ 3 ms (the artifact's per-QP polling guard).
            dedupe_interval_units: 2930,
            cpu_port: 192,
            sketch: Some(SketchParams {
                heavy_buckets: 4096,
                light_counters: 65536,
                lambda: 8,
            }),
            // 64 per 2^20 ns ≈ 61,000 polling packets per second per host port: a host's
            // detector sends at most three per slow flow per 3 ms, so only a host polling
            // for over a thousand flows at once, or a forger, meets the limit.
            polling_window_log2_ns: 20,
            polling_per_window: 64,
        }
    }
}

/// The `forward` entries of one destination whose ECMP next hops are `ports`, as
/// `(key = [destination, bucket], action, params)` ([`hawkmesh_wire::control::forward_entries`]).
pub fn forward_entries(
    dst: std::net::Ipv4Addr,
    ports: &[u16],
) -> Vec<(Vec<u64>, &'static str, Vec<u64>)> {
    hawkmesh_wire::control::forward_entries(dst, ports)
        .into_iter()
        .map(|e| (e.key, "set_route", e.params))
        .collect()
}

/// The ECMP bucket of a 5-tuple, as the program's `ecmp_hash` computes it: the CRC-32 of
/// source, destination, source port and destination port, big-endian, low bits (checked
/// against the model by `ecmp_spreads_flows_over_next_hops_by_the_5_tuple_hash_...`).
pub fn ecmp_bucket(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    sport: u16,
    dport: u16,
) -> u64 {
    let mut bytes = [0u8; 12];
    bytes[0..4].copy_from_slice(&src.octets());
    bytes[4..8].copy_from_slice(&dst.octets());
    bytes[8..10].copy_from_slice(&sport.to_be_bytes());
    bytes[10..12].copy_from_slice(&dport.to_be_bytes());
    u64::from(crate::hash::crc32(&bytes) % ECMP_BUCKETS)
}

/// Table entries the control plane installs at start-up besides routes (BF Runtime
/// `table_add`): the one-hot masks of every port, in ingress (`port_mask`) and egress
/// (`egress_port_mask`). Tofino's ALUs shift by immediates only, so `1 << port` is a table.
pub fn port_mask_entries(program: &Program) -> Vec<(&'static str, u64, &'static str, Vec<u64>)> {
    let ports = program.constant("PORTS").unwrap_or(0) as u16;
    hawkmesh_wire::control::port_mask_entries(ports)
        .into_iter()
        .map(|(table, e)| {
            let action = if table.name() == "port_mask" {
                "port_mask_set"
            } else {
                "egress_port_mask_set"
            };
            (table.name(), e.key[0], action, e.params)
        })
        .collect()
}

/// Bit widths derived from [`HawkeyeParams`] (validated).
struct Dims {
    /// log2 of the ports.
    port_bits: u8,
    /// 32-bit words of a port bitmap.
    mask_words: usize,
    /// log2 of the epoch length in ns.
    eb: u8,
    /// log2 of the ring's epochs.
    epoch_bits: u8,
    /// log2 of the flow slots per epoch.
    flow_bits: u8,
    /// log2 of the dedupe slots.
    dedupe_bits: u8,
    /// Ring slots (epochs).
    slots: usize,
}

impl Dims {
    fn new(params: &HawkeyeParams) -> Result<Dims, BuildError> {
        // The polling PFC branch carries egress-port bitmaps in 32-bit words bridged to egress
        // (at most two words): 64 ports per pipe, as on a Tofino pipe.
        let port_bits = dsl::log2("ports", params.ports, 2, 64)?;
        let mask_words = params.ports.div_ceil(32) as usize;
        let eb = params.epoch_log2_ns;
        let epoch_bits = dsl::log2("epochs", params.epochs, 1, 16)?;
        let flow_bits = dsl::log2("flow_slots", params.flow_slots, 2, 1 << 20)?;
        let dedupe_bits = dsl::log2("dedupe_slots", params.dedupe_slots, 2, 1 << 16)?;
        if params.epoch_log2_ns < 10 || params.epoch_log2_ns as u32 + epoch_bits as u32 + 16 > 48 {
            return Err(BuildError::Parameter {
                name: "epoch_log2_ns",
                message: format!(
                    "{} leaves no room for a 16-bit epoch id in the 48-bit timestamp (need 10 ≤ epoch_log2_ns ≤ {})",
                    params.epoch_log2_ns,
                    32 - epoch_bits
                ),
            });
        }
        if !(16..=30).contains(&params.polling_window_log2_ns) {
            return Err(BuildError::Parameter {
                name: "polling_window_log2_ns",
                message: format!(
                    "{} must be in 16..=30 (the window id is 32 bits of the 48-bit timestamp)",
                    params.polling_window_log2_ns
                ),
            });
        }
        if params.polling_per_window == 0 {
            return Err(BuildError::Parameter {
                name: "polling_per_window",
                message: "0 would refuse every polling packet from hosts".into(),
            });
        }
        if params.epoch_log2_ns > 32 {
            return Err(BuildError::Parameter {
                name: "epoch_log2_ns",
                message: "epochs longer than 2^32 ns do not fit the 32-bit offsets".into(),
            });
        }
        Ok(Dims {
            port_bits,
            mask_words,
            eb,
            epoch_bits,
            flow_bits,
            dedupe_bits,
            slots: params.epochs as usize,
        })
    }
}

/// What every module after the metadata reads: the parameters, their widths, the
/// constants, the headers, the intrinsic metadata and the shared metadata.
struct Ctx<'a> {
    params: &'a HawkeyeParams,
    dims: Dims,
    k: constants::Consts,
    h: headers::Headers,
    intr: fields::Intrinsics,
    meta: fields::Meta,
}

const DOC: &str = "hawkmesh switch data plane: HAWKEYE PFC-aware telemetry, causality meters and polling (HAWKEYE SIGCOMM'25 §3.3-3.4), Elastic Sketch on ToR switches (PARALEON ICNP'24 §III-B, Elastic Sketch SIGCOMM'18 §3)";

/// Builds the program for `params`.
pub fn program(params: &HawkeyeParams) -> Result<Program, BuildError> {
    let dims = Dims::new(params)?;
    let mut b = ProgramBuilder::new("hawkmesh", DOC);
    b.cpu_mirror_session(1);

    // Declarations every module uses.
    let k = constants::constants(&mut b, params);
    let h = headers::headers(&mut b);
    headers::parser(&mut b, &k, &h);
    let intr = fields::intrinsics(&mut b);
    let meta = fields::metadata(&mut b, &dims);
    let cx = Ctx {
        params,
        dims,
        k,
        h,
        intr,
        meta,
    };

    // Ingress.
    let forward = forwarding::forward_table(&mut b, &cx);
    let dedupe = dedupe::polling_dedupe(&mut b, &cx);
    let guard = polling_guard::polling_guard(&mut b, &cx);
    let sketch = elastic_sketch::insert_once(&mut b, &cx)?;
    let pause = pfc_status::pause_ends(&mut b, &cx);
    let port_speed = pfc_status::port_speed_table(&mut b, &cx, &pause);
    let mask = port_mask::ingress_port_mask(&mut b, &cx);
    let branch = pfc_branch::bitmaps(&mut b, &cx, &mask, &pause);
    let prologue = pfc_status::ingress_prologue(&cx, &pause, &branch.epoch);
    let xon = pfc_status::xon_count(&mut b, &cx, &branch.epoch);
    let pfc_frame = pfc_status::pfc_frame(&cx, &pause, port_speed, &mask, &branch, &xon, &prologue);
    let data = enqueue::enqueue_telemetry(&mut b, &cx, &pause, &mask, &branch, &prologue);
    let ingress = ingress::ingress_control(
        &mut b,
        &cx,
        ingress::Parts {
            forward,
            dedupe,
            guard,
            sketch,
            mask,
            branch,
            prologue,
            pfc_frame,
            data,
        },
    );
    b.ingress(ingress);

    // Egress.
    let ring = epoch_ring::ring_fields(&mut b, &cx);
    let port_sums = epoch_ring::port_qdepth_sums(&mut b, &cx, &ring);
    let flows = epoch_ring::flow_telemetry(&mut b, &cx, &ring);
    let data = epoch_ring::data_egress(&ring, port_sums, flows.stmts);
    let ecn = ecn::ecn_marking(&mut b, &cx);
    let egress = egress::egress_control(&mut b, &cx, &ring, &flows.evicted, ecn, data);
    b.egress(egress);
    b.build()
}
