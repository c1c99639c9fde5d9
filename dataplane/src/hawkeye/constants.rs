//! Constants shared with Rust (`wire/src/dataplane.rs`) and the all-ports multicast group.

use super::{HawkeyeParams, ETHERTYPE_IPV4, IP_PROTOCOL_UDP};
use crate::ir::*;

/// The constants later modules use by value.
pub(super) struct Consts {
    pub(super) ethertype_mac_control: u64,
    pub(super) pfc_opcode: u64,
    pub(super) rocev2_port: u64,
    pub(super) polling_port: u64,
    pub(super) polling_version: u64,
    /// `POLLING_CONTEXT_CPU_COPY`.
    pub(super) ctx_cpu: u64,
    pub(super) all_ports_group: u64,
    pub(super) no_port: u64,
    pub(super) max_pause_ns: u64,
}

/// Declares the constants (in the order the generated files list them) and the multicast
/// group of every front-panel port.
pub(super) fn constants(b: &mut ProgramBuilder, params: &HawkeyeParams) -> Consts {
    let ethertype_mac_control = b.constant(
        "ETHERTYPE_MAC_CONTROL",
        0x8808,
        16,
        "IEEE 802.3 clause 31 MAC control EtherType (PFC frames)",
    );
    let pfc_opcode = b.constant("PFC_OPCODE", 0x0101, 16, "IEEE 802.1Qbb PFC opcode");
    b.constant("ETHERTYPE_IPV4", ETHERTYPE_IPV4, 16, "IPv4 EtherType");
    b.constant("IP_PROTOCOL_UDP", IP_PROTOCOL_UDP, 8, "UDP protocol number");
    let rocev2_port = b.constant(
        "ROCEV2_UDP_PORT",
        4791,
        16,
        "RoCEv2 UDP destination port (IBTA Annex A17)",
    );
    let polling_port = b.constant("POLLING_UDP_PORT", 0x6888, 16, "UDP destination port of HAWKEYE polling packets (0x6888, the artifact's polling EtherType, reused as a UDP port)");
    let polling_version = b.constant(
        "POLLING_VERSION",
        3,
        8,
        "Version of the polling header layout",
    );
    b.constant(
        "POLLING_HEADER_BYTES",
        48,
        16,
        "Bytes of the polling header after the UDP header",
    );
    b.constant(
        "POLLING_CONTEXT_IN_FLIGHT",
        0,
        8,
        "context_kind of a polling packet travelling between switches",
    );
    let ctx_cpu = b.constant(
        "POLLING_CONTEXT_CPU_COPY",
        1,
        8,
        "context_kind of the copy a switch sends to its CPU port",
    );
    b.constant(
        "TRACE_VICTIM_PATH",
        1,
        2,
        "HAWKEYE Table 1 flag 01: trace along the victim flow path",
    );
    b.constant(
        "TRACE_PFC_CAUSALITY",
        2,
        2,
        "HAWKEYE Table 1 flag 10: trace along the PFC causality",
    );
    b.constant(
        "POLLING_CONTEXT_VICTIM_PAUSED",
        1,
        8,
        "context_flags bit of a CPU copy: the victim's egress port here is paused (the polling packet leaves it with the PFC bit)",
    );
    let all_ports_group = b.constant(
        "MCAST_GROUP_ALL_PORTS",
        1,
        16,
        "Multicast group holding every front-panel port (polling PFC branch)",
    );
    let no_port = b.constant("NO_PORT", 0xFFFF, 16, "Port value meaning 'none'");
    b.constant(
        "CPU_PORT",
        params.cpu_port as u64,
        16,
        "The switch CPU port",
    );
    b.constant(
        "CPU_MIRROR_SESSION",
        1,
        16,
        "Mirror session that sends clones to the CPU port",
    );
    b.constant(
        "PORTS",
        params.ports as u64,
        16,
        "Front-panel ports covered by the telemetry registers",
    );
    b.constant(
        "EPOCHS",
        params.epochs as u64,
        16,
        "Epochs kept in the ring (HAWKEYE §3.3)",
    );
    b.constant(
        "EPOCH_LOG2_NS",
        params.epoch_log2_ns as u64,
        8,
        "Epoch length is 2^EPOCH_LOG2_NS ns",
    );
    b.constant(
        "FLOW_SLOTS",
        params.flow_slots as u64,
        32,
        "Flow telemetry slots per epoch",
    );
    b.constant(
        "QDEPTH_UNIT_BYTES_TOFINO",
        80,
        8,
        "Tofino enq_qdepth unit (cells of 80 bytes)",
    );
    b.constant(
        "EVICTION_REPORT_BYTES",
        37,
        16,
        "Bytes of the eviction report header at the front of an eviction CPU copy",
    );
    b.constant(
        "DEDUPE_INTERVAL_UNITS",
        params.dedupe_interval_units as u64,
        32,
        "Polling duplicate suppression interval in 1024-ns units",
    );
    b.constant(
        "POLLING_WINDOW_LOG2_NS",
        u64::from(params.polling_window_log2_ns),
        8,
        "log2 of the polling rate window of host-facing ports, ns",
    );
    b.constant(
        "POLLING_PER_WINDOW",
        u64::from(params.polling_per_window),
        32,
        "Polling packets a host-facing port may send per rate window",
    );
    // IEEE 802.1Qbb: one PFC frame pauses for at most 65,535 quanta of 512 bit times; at
    // the slowest speed of the port-speed table (25 Gbit/s) that is 1.342 ms, plus the
    // 0.1 % of the pipeline's quanta scaling.
    let max_pause_ns = b.constant(
        "MAX_PAUSE_NS",
        1_344_000,
        32,
        "Longest pause one PFC frame can ask for, ns (65,535 quanta at 25 Gbit/s, rounded up): a stored pause end further ahead is stale",
    );
    b.multicast_group(all_ports_group as u16, "every front-panel port (0..PORTS)");
    Consts {
        ethertype_mac_control,
        pfc_opcode,
        rocev2_port,
        polling_port,
        polling_version,
        ctx_cpu,
        all_ports_group,
        no_port,
        max_pause_ns,
    }
}
