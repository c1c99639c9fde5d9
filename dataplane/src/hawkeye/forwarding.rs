//! The switch's L3/ECMP forwarding.

use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// The `forward` table (`set_route` / `no_route`), keyed by the lookup fields.
pub(super) fn forward_table(b: &mut ProgramBuilder, cx: &Ctx) -> TableId {
    let r = &cx.meta.route;
    let (routed_port, route_found) = (r.routed_port, r.route_found);
    let (lookup_src, lookup_dst, lookup_sport, lookup_dport) =
        (r.lookup_src, r.lookup_dst, r.lookup_sport, r.lookup_dport);
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
    b.table(Table {
        name: "forward".into(),
        keys: vec![(lookup_dst, MatchKind::Exact)],
        actions: vec![set_route, no_route],
        default_action: (no_route, vec![]),
        size: 4096,
        doc: "The switch's L3/ECMP forwarding: exact match on the destination IPv4 address, ECMP member chosen by an action selector over the 5-tuple; installed by the control plane. For polling packets the lookup uses the victim's 5-tuple so the polling packet follows the victim's own ECMP choice (HAWKEYE §3.4). The executable model takes this table's result as an input from the simulator's routing.".into(),
        forwarding: true,
        selector: vec![lookup_src, lookup_dst, lookup_sport, lookup_dport],
    })
}
