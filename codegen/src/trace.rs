//! Packet traces as data (`codegen/traces/*.json`) and their replay on the executable model.
//!
//! A trace lists the routes to install and a sequence of steps (arrival time in µs, ingress
//! port, queue, packet). Packets are named builders from [`hawkmesh_dataplane::packets`] or raw hex, so a
//! trace never repeats a byte offset. Expected outputs are not part of a trace: the model
//! produces them, and the BMv2 harness (`codegen/tests/bmv2.rs`) compares BMv2 with it.
//!
//! Times are whole microseconds because BMv2's `ingress_global_timestamp` is in µs (BMv2
//! `simple_switch` docs, "Standard metadata"); the v1model program multiplies by 1000, and
//! [`run_model`] feeds the model the same ns value.

use std::net::Ipv4Addr;

use serde::Deserialize;
use thiserror::Error;

use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{
    DataPlane, IngressInput, Model, Routing, SwitchOutput, TableEntry,
};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_dataplane::ModelError;
use hawkmesh_wire::control::{ecn_profile_entries, EcnProfile, QdepthUnit};
use hawkmesh_wire::telemetry::FiveTuple;

/// Front-panel ports of the lab configuration (`0..LAB_PORTS`); multicast group
/// `MCAST_GROUP_ALL_PORTS` holds exactly these ports on the model and on BMv2.
pub const LAB_PORTS: u16 = 8;

/// Added to every trace time before it reaches the model: keeps epoch ids and pause ends
/// away from 0 (as they are on a switch that has been up for a while) and the trace away
/// from an epoch boundary at its start.
pub const BASE_US: u64 = 5_000_123;

/// A trace file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// Short name.
    pub name: String,
    /// What the trace exercises.
    pub description: String,
    /// Forwarding entries installed before the first step.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// ECN profiles installed in `ecn_profile` before the first step.
    #[serde(default)]
    pub ecn_profiles: Vec<EcnProfileSpec>,
    /// Registers the trace is meant to leave non-zero (a check that it exercises what it
    /// says, not an expected value).
    #[serde(default)]
    pub exercises: Vec<String>,
    /// Packets in arrival order.
    pub steps: Vec<Step>,
}

/// `forward` table entry: destination address → egress port.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Destination IPv4 address.
    pub dst: Ipv4Addr,
    /// Egress port.
    pub port: u16,
}

/// An egress port's ECN marking profile (DCQCN's RED), as the knobs give it. A trace's
/// queues are empty on the model and nearly so on BMv2, so only the deterministic ends of the
/// ramp can be compared (Kmax 0: every ECN-capable packet marked; a Kmin far above any queue:
/// none); the thresholds are converted as BMv2 counts queue depth ([`TRACE_QDEPTH_UNIT`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcnProfileSpec {
    /// Egress port.
    pub port: u16,
    /// Kmin, bytes.
    pub kmin_bytes: u64,
    /// Kmax, bytes.
    pub kmax_bytes: u64,
    /// Pmax.
    pub pmax: f64,
}

/// The queue-depth unit of the lab switch's `ecn_profile` thresholds: BMv2's packets, of
/// 1,500 bytes.
pub const TRACE_QDEPTH_UNIT: QdepthUnit = QdepthUnit::Bmv2Packets { packet_bytes: 1500 };

impl Trace {
    /// The `ecn_profile` entries of the trace's ECN profiles.
    pub fn ecn_entries(&self) -> Result<Vec<TableEntry>, TraceError> {
        let mut entries = Vec::new();
        for (i, spec) in self.ecn_profiles.iter().enumerate() {
            let profile = EcnProfile {
                kmin_bytes: spec.kmin_bytes,
                kmax_bytes: spec.kmax_bytes,
                pmax: spec.pmax,
            };
            entries.extend(
                ecn_profile_entries(spec.port, &profile, TRACE_QDEPTH_UNIT)
                    .map_err(|source| TraceError::EcnProfile { index: i, source })?,
            );
        }
        Ok(entries)
    }
}

/// One arriving packet.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Arrival time, µs from the start of the trace.
    pub t_us: u64,
    /// Ingress port.
    pub port: u16,
    /// Egress queue (priority) the packet is enqueued in.
    #[serde(default)]
    pub queue: u8,
    /// The packet.
    pub packet: PacketSpec,
}

/// A packet by builder name, or raw bytes.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum PacketSpec {
    /// [`packets::rocev2_data`].
    Data(DataSpec),
    /// [`packets::pfc_frame`].
    Pfc(PfcSpec),
    /// [`packets::polling_packet`].
    Polling(PollingSpec),
    /// Raw bytes as hex (whitespace ignored).
    Hex(String),
}

/// RoCEv2 data packet fields.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// UDP source port (the destination port is 4791).
    pub sport: u16,
    /// Wire length in bytes.
    pub len: usize,
    /// DSCP.
    #[serde(default)]
    pub dscp: u8,
    /// ECN.
    #[serde(default)]
    pub ecn: u8,
    /// TTL.
    #[serde(default = "default_ttl")]
    pub ttl: u8,
    /// BTH PSN.
    #[serde(default)]
    pub psn: u32,
}

fn default_ttl() -> u8 {
    64
}

/// PFC frame fields (IEEE 802.1Qbb).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcSpec {
    /// Class-enable vector.
    pub vector: u8,
    /// Per-priority pause quanta.
    pub quanta: [u16; 8],
}

/// Polling packet fields.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollingSpec {
    /// Event id.
    pub event_id: u64,
    /// Victim source address.
    pub src: Ipv4Addr,
    /// Victim destination address.
    pub dst: Ipv4Addr,
    /// Victim UDP source port.
    pub sport: u16,
    /// Trace flag (1 victim path, 2 PFC causality).
    pub trace_flag: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

/// Why a trace cannot be loaded or replayed.
#[derive(Debug, Error)]
pub enum TraceError {
    /// Not valid trace JSON.
    #[error("trace is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A hex packet does not decode.
    #[error("step {step}: bad hex packet: {message}")]
    Hex {
        /// Step index.
        step: usize,
        /// What is wrong.
        message: String,
    },
    /// The model rejected a step or a control-plane call.
    #[error("{context}: {source}")]
    Model {
        /// Where.
        context: String,
        /// The model's error.
        source: ModelError,
    },
    /// Step times that are not one non-decreasing time per step.
    #[error("{times} step times for {steps} steps, or not in order")]
    Times {
        /// Steps in the trace.
        steps: usize,
        /// Times given.
        times: usize,
    },
    /// An ECN profile the program cannot hold.
    #[error("ecn_profiles[{index}]: {source}")]
    EcnProfile {
        /// Index in `ecn_profiles`.
        index: usize,
        /// Why.
        source: hawkmesh_wire::control::EcnProfileError,
    },
    /// The program lacks a constant the lab switch is configured from.
    #[error("the program has no constant `{0}`")]
    MissingConstant(&'static str),
}

impl Trace {
    /// Parses a trace from JSON text.
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        Ok(serde_json::from_str(text)?)
    }

    /// The bytes of every step, in order.
    pub fn packets(&self, program: &Program) -> Result<Vec<Vec<u8>>, TraceError> {
        self.steps
            .iter()
            .enumerate()
            .map(|(i, s)| s.packet.build(program, i))
            .collect()
    }
}

impl PacketSpec {
    /// The packet bytes (`step` is only used in error messages).
    pub fn build(&self, program: &Program, step: usize) -> Result<Vec<u8>, TraceError> {
        Ok(match self {
            PacketSpec::Data(d) => {
                let tuple = FiveTuple::rocev2(d.src.octets(), d.sport, d.dst.octets());
                packets::rocev2_data(program, &tuple, d.dscp, d.ecn, d.ttl, d.psn, d.len)
            }
            PacketSpec::Pfc(p) => packets::pfc_frame(p.vector, p.quanta),
            PacketSpec::Polling(p) => {
                let victim = FiveTuple::rocev2(p.src.octets(), p.sport, p.dst.octets());
                let mut header = Polling::new(p.event_id, victim, p.hop_limit);
                header.trace_flag = p.trace_flag;
                packets::polling_packet(program, &header)
            }
            PacketSpec::Hex(text) => {
                decode_hex(text).map_err(|message| TraceError::Hex { step, message })?
            }
        })
    }
}

fn decode_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if digits.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .ok_or_else(|| format!("`{}` is not a hex byte", String::from_utf8_lossy(pair)))
        })
        .collect()
}

/// What the model emitted for a trace and its registers afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRun {
    /// Per step: what the switch emitted.
    pub outputs: Vec<SwitchOutput>,
    /// Every register of the program, in declaration order, after the last step.
    pub registers: Vec<(String, Vec<u64>)>,
}

/// A model configured like the lab switch: routes from the trace in the `forward` table,
/// its ECN profiles in `ecn_profile`,
/// the port masks of [`hawkmesh_dataplane::hawkeye::port_mask_entries`], multicast group `MCAST_GROUP_ALL_PORTS` = ports `0..LAB_PORTS`, clones to the program's
/// `CPU_PORT`.
pub fn lab_model(program: std::sync::Arc<Program>, trace: &Trace) -> Result<Model, TraceError> {
    let cpu_port = program
        .constant("CPU_PORT")
        .ok_or(TraceError::MissingConstant("CPU_PORT"))? as u16;
    let group = program
        .constant("MCAST_GROUP_ALL_PORTS")
        .ok_or(TraceError::MissingConstant("MCAST_GROUP_ALL_PORTS"))? as u16;
    let mut model =
        Model::new(program, Routing::FromTable, cpu_port).map_err(|source| TraceError::Model {
            context: "model".into(),
            source,
        })?;
    model.multicast_group_set(group, (0..LAB_PORTS).collect());
    let masks = hawkmesh_dataplane::hawkeye::port_mask_entries(model.program());
    for (table, port, action, params) in masks {
        let entry = TableEntry {
            key: vec![port],
            mask: vec![],
            priority: 0,
            action: action.into(),
            params,
        };
        model
            .table_add(table, entry)
            .map_err(|source| TraceError::Model {
                context: format!("{table} {port}"),
                source,
            })?;
    }
    // Polling is accepted on every lab port, unlimited (the rate limit is clock-valued:
    // BMv2's clock lags the trace).
    for port in 0..LAB_PORTS {
        let entry = hawkmesh_wire::control::polling_port_entry(
            port,
            hawkmesh_wire::control::PollingFrom::Fabric,
        );
        model
            .table_add("polling_port", entry)
            .map_err(|source| TraceError::Model {
                context: format!("polling_port {port}"),
                source,
            })?;
    }
    for r in &trace.routes {
        for (key, action, params) in hawkmesh_dataplane::hawkeye::forward_entries(r.dst, &[r.port])
        {
            let entry = TableEntry {
                key,
                mask: vec![],
                priority: 0,
                action: action.into(),
                params,
            };
            model
                .table_add("forward", entry)
                .map_err(|source| TraceError::Model {
                    context: format!("route {} → {}", r.dst, r.port),
                    source,
                })?;
        }
    }
    for entry in trace.ecn_entries()? {
        let port = entry.key[0];
        model
            .table_add("ecn_profile", entry)
            .map_err(|source| TraceError::Model {
                context: format!("ecn_profile port {port}"),
                source,
            })?;
    }
    Ok(model)
}

/// Replays `trace` on a fresh [`lab_model`]; step times are `(BASE_US + t_us) × 1000` ns.
pub fn run_model(program: std::sync::Arc<Program>, trace: &Trace) -> Result<TraceRun, TraceError> {
    let times: Vec<u64> = trace
        .steps
        .iter()
        .map(|s| (BASE_US + s.t_us) * 1000)
        .collect();
    run_model_times(program, trace, &times)
}

/// [`run_model`] with step `i` reaching the switch at `times_ns[i]` (non-decreasing): the
/// trace as a target that lags behind it saw it.
pub fn run_model_times(
    program: std::sync::Arc<Program>,
    trace: &Trace,
    times_ns: &[u64],
) -> Result<TraceRun, TraceError> {
    if times_ns.len() != trace.steps.len() || times_ns.windows(2).any(|w| w[1] < w[0]) {
        return Err(TraceError::Times {
            steps: trace.steps.len(),
            times: times_ns.len(),
        });
    }
    let packets = trace.packets(&program)?;
    let mut model = lab_model(program.clone(), trace)?;
    let mut outputs = Vec::with_capacity(packets.len());
    for (i, ((step, bytes), t_ns)) in trace.steps.iter().zip(&packets).zip(times_ns).enumerate() {
        let input = IngressInput {
            ingress_port: step.port,
            tstamp_ns: *t_ns,
            routed_egress_port: None,
        };
        let out = model
            .process(bytes, &input, step.queue)
            .map_err(|source| TraceError::Model {
                context: format!("step {i}"),
                source,
            })?;
        outputs.push(out);
    }
    let mut registers = Vec::with_capacity(program.registers.len());
    for r in &program.registers {
        let cells = model
            .register_read_all(&r.name)
            .map_err(|source| TraceError::Model {
                context: format!("register {}", r.name),
                source,
            })?;
        registers.push((r.name.clone(), cells.to_vec()));
    }
    Ok(TraceRun { outputs, registers })
}
