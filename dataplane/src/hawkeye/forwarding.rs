//! The switch's L3/ECMP forwarding.

use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// ECMP hash buckets per destination: the control plane installs one `forward` entry per
/// (destination, bucket), spreading a destination's next hops over the buckets.
pub const ECMP_BUCKETS: u32 = 16;

/// Destinations the `forward` table holds (each with [`ECMP_BUCKETS`] entries).
pub const FORWARD_DESTINATIONS: u32 = 4096;

/// The `forward` table and the hash statement that must run before it is applied.
pub(super) struct Forwarding {
    pub(super) table: TableId,
    /// Computes the ECMP bucket of the lookup 5-tuple.
    pub(super) bucket_hash: Stmt,
}

/// The `forward` table (`set_route` / `no_route`), keyed by the destination and the ECMP
/// bucket of the lookup 5-tuple.
///
/// ECMP as hash buckets in an exact-match table rather than a TNA `ActionSelector`: the
/// control plane writes plain entries (no action-profile members or selector groups), the
/// next hop a 5-tuple takes is computable off the switch (CRC-32 of the 5-tuple, the same
/// unit as the flow slots), and the compiler's BF Runtime description of the table is a
/// plain `MatchAction_Direct` (bf-p4c describes a selector table's data as a `oneof`, which
/// the `rbfrt` client 0.1.11 cannot parse).
pub(super) fn forward_table(b: &mut ProgramBuilder, cx: &Ctx) -> Forwarding {
    let r = &cx.meta.route;
    let (routed_port, route_found) = (r.routed_port, r.route_found);
    let (lookup_src, lookup_dst, lookup_sport, lookup_dport) =
        (r.lookup_src, r.lookup_dst, r.lookup_sport, r.lookup_dport);
    let bucket_bits = ECMP_BUCKETS.trailing_zeros() as u8;
    b.constant(
        "ECMP_BUCKETS",
        u64::from(ECMP_BUCKETS),
        32,
        "ECMP hash buckets per destination in the forward table (bucket = CRC-32 of the lookup 5-tuple, low bits)",
    );
    let bucket = b.meta("ecmp_bucket", bucket_bits);
    let hash = b.hash(
        "ecmp_hash",
        vec![lookup_src, lookup_dst, lookup_sport, lookup_dport],
        bucket_bits,
    );
    let set_route = b.action(
        "set_route",
        "L3/ECMP result: the egress port of the next hop",
        &[("port", 16)],
        |p| {
            vec![
                Stmt::Assign(routed_port, f(p[0])),
                Stmt::Assign(route_found, c(1, 1)),
            ]
        },
    );
    let no_route = b.action("no_route", "No route: the packet is dropped", &[], |_| {
        vec![Stmt::Assign(route_found, c(0, 1))]
    });
    let table = b.table(Table {
        name: "forward".into(),
        keys: vec![(lookup_dst, MatchKind::Exact), (bucket, MatchKind::Exact)],
        actions: vec![set_route, no_route],
        default_action: (no_route, vec![]),
        size: FORWARD_DESTINATIONS * ECMP_BUCKETS,
        doc: "The switch's L3/ECMP forwarding: exact match on the destination IPv4 address and the ECMP bucket (CRC-32 of the lookup 5-tuple, low bits); the control plane installs one entry per (destination, bucket). For polling packets the lookup uses the victim's 5-tuple so the polling packet follows the victim's own ECMP choice (HAWKEYE §3.4). The executable model takes this table's result as an input from the simulator's routing.".into(),
        forwarding: true,
    });
    Forwarding {
        table,
        bucket_hash: Stmt::Hash(hash, bucket),
    }
}
