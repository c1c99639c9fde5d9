//! One-hot port masks. Tofino's ALUs shift by immediates only, so `1 << port` is a table
//! the control plane fills (see [`super::port_mask_entries`]): `port_mask` in ingress,
//! `egress_port_mask` in egress.

use super::dsl::*;
use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// The ingress port mask: the port to look up and its one-hot mask in 32-port words.
pub(super) struct PortMask {
    pub(super) mask_port: FieldId,
    pub(super) masks: Vec<FieldId>,
    pub(super) table: TableId,
}

/// The `port_mask` table: the egress port of a data or polling packet, the port a PFC
/// frame pauses.
pub(super) fn ingress_port_mask(b: &mut ProgramBuilder, cx: &Ctx) -> PortMask {
    let mask_port = b.meta("mask_port", 16);
    let masks: Vec<FieldId> = word_meta(b, "port_mask", cx.dims.mask_words);
    let table = mask_table(
        b,
        cx,
        "port_mask",
        mask_port,
        &masks,
        "The one-hot mask of the port, in 32-port words",
        "Port → one-hot mask (ingress): the egress port of a data or polling packet, the port a PFC frame pauses",
    );
    PortMask {
        mask_port,
        masks,
        table,
    }
}

/// A one-hot mask table `name` keyed by `key`, with the actions `{name}_set` (the mask
/// as parameters, one per 32-port word, into `masks`) and `{name}_none` (an empty mask,
/// the default).
pub(super) fn mask_table(
    b: &mut ProgramBuilder,
    cx: &Ctx,
    name: &str,
    key: FieldId,
    masks: &[FieldId],
    set_doc: &str,
    table_doc: &str,
) -> TableId {
    let mask_params: Vec<(String, u8)> = (0..cx.dims.mask_words)
        .map(|w| (format!("w{w}"), 32))
        .collect();
    let mask_param_refs: Vec<(&str, u8)> =
        mask_params.iter().map(|(n, w)| (n.as_str(), *w)).collect();
    let set_masks = masks.to_vec();
    let mask_set = b.action(
        &format!("{name}_set"),
        set_doc,
        &mask_param_refs,
        move |p| {
            set_masks
                .iter()
                .zip(p)
                .map(|(m, v)| Stmt::Assign(*m, f(*v)))
                .collect()
        },
    );
    let zero_masks = masks.to_vec();
    let mask_none = b.action(
        &format!("{name}_none"),
        "No port: an empty mask",
        &[],
        move |_| {
            zero_masks
                .iter()
                .map(|m| Stmt::Assign(*m, c(0, 32)))
                .collect()
        },
    );
    b.table(Table {
        name: name.into(),
        keys: vec![(key, MatchKind::Exact)],
        actions: vec![mask_set, mask_none],
        default_action: (mask_none, vec![]),
        size: cx.params.ports,
        doc: table_doc.into(),
        forwarding: false,
    })
}
