//! Intrinsic metadata and the metadata several modules share (carried from ingress to
//! egress or the CPU copy, the forwarding lookup, the polling dedupe key).

use super::Dims;
use crate::ir::*;

/// The intrinsic metadata the program reads.
pub(super) struct Intrinsics {
    pub(super) ig_port: FieldId,
    pub(super) ig_tstamp: FieldId,
    pub(super) eg_port: FieldId,
    pub(super) enq_tstamp: FieldId,
    pub(super) enq_qdepth: FieldId,
    pub(super) clone_kind: FieldId,
}

pub(super) fn intrinsics(b: &mut ProgramBuilder) -> Intrinsics {
    Intrinsics {
        ig_port: b.intrinsic(Intrinsic::IngressPort),
        ig_tstamp: b.intrinsic(Intrinsic::IngressTstamp),
        eg_port: b.intrinsic(Intrinsic::EgressPort),
        enq_tstamp: b.intrinsic(Intrinsic::EnqTstamp),
        enq_qdepth: b.intrinsic(Intrinsic::EnqQdepth),
        clone_kind: b.intrinsic(Intrinsic::CloneKind),
    }
}

/// Metadata decided in ingress and carried to egress (bridged) or to the CPU copy
/// (cloned).
pub(super) struct Carried {
    pub(super) victim_port: FieldId,
    /// `paused_at_enqueue`: enqueue-side PFC state, decided in ingress where every packet
    /// is seen when it is enqueued (a packet stuck behind a PAUSE never reaches egress while
    /// the pause lasts).
    pub(super) paused_bridged: FieldId,
    pub(super) victim_paused: FieldId,
    /// The polling PFC branch, one field per 32-port word.
    pub(super) pfc_ports: Vec<FieldId>,
    pub(super) arrival_flags: FieldId,
    pub(super) arrival_port: FieldId,
    /// The polling packet's ingress timestamp (the CPU copy tells the agent the switch's
    /// time of the event).
    pub(super) arrival_tstamp: FieldId,
}

/// The forwarding lookup's key (the packet's or the polling victim's 5-tuple) and result.
pub(super) struct Route {
    pub(super) lookup_src: FieldId,
    pub(super) lookup_dst: FieldId,
    pub(super) lookup_sport: FieldId,
    pub(super) lookup_dport: FieldId,
    pub(super) routed_port: FieldId,
    pub(super) route_found: FieldId,
}

/// The polling dedupe key: the event and the port it arrived by (see `polling_dedupe`).
pub(super) struct DedupeKey {
    pub(super) dedupe_key: FieldId,
    pub(super) dedupe_port: FieldId,
    pub(super) now_coarse: FieldId,
    pub(super) dedupe_index: FieldId,
    pub(super) duplicate: FieldId,
}

/// The shared metadata.
pub(super) struct Meta {
    pub(super) carried: Carried,
    pub(super) route: Route,
    pub(super) dedupe: DedupeKey,
}

/// Declares the shared metadata (in this order: it fixes the field ids).
pub(super) fn metadata(b: &mut ProgramBuilder, dims: &Dims) -> Meta {
    let carried = Carried {
        victim_port: b.meta_carried("victim_port", 16, true, true),
        paused_bridged: b.meta_carried("paused_at_enqueue", 1, true, false),
        victim_paused: b.meta_carried("victim_paused", 1, true, true),
        pfc_ports: (0..dims.mask_words)
            .map(|w| b.meta_carried(&format!("pfc_ports_w{w}"), 32, true, true))
            .collect(),
        arrival_flags: b.meta_carried("arrival_flags", 8, false, true),
        arrival_port: b.meta_carried("arrival_port", 16, false, true),
        arrival_tstamp: b.meta_carried("arrival_tstamp", 48, false, true),
    };
    let route = Route {
        lookup_src: b.meta("lookup_src_addr", 32),
        lookup_dst: b.meta("lookup_dst_addr", 32),
        lookup_sport: b.meta("lookup_src_port", 16),
        lookup_dport: b.meta("lookup_dst_port", 16),
        routed_port: b.meta("routed_port", 16),
        route_found: b.meta("route_found", 1),
    };
    let dedupe = DedupeKey {
        dedupe_key: b.meta("dedupe_key", 32),
        dedupe_port: b.meta("dedupe_port", 16),
        now_coarse: b.meta("now_coarse", 32),
        dedupe_index: b.meta("dedupe_index", dims.dedupe_bits),
        duplicate: b.meta("polling_duplicate", 32),
    };
    Meta {
        carried,
        route,
        dedupe,
    }
}
