//! The BF Runtime description (`bfrt.json`) of the TNA program, in the schema Intel's
//! bf-p4c writes beside the compiled pipeline and bf_switchd serves to control-plane
//! clients (`GetForwardingPipelineConfig`, `ForwardingPipelineConfig.bfruntime_info`).
//!
//! Written from the IR, like the P4 it describes, so that the model-backed BF Runtime
//! server and the switch agent's id mapping can be tested without bf-p4c. The shapes are the
//! compiler's (p4c `backends/tofino/bf-p4c/control-plane/bfruntime.cpp`, `bfruntime_ext.cpp`,
//! `bfruntime_arch_handler.h`; checked against compiler outputs in open-p4studio's
//! `tdi_tofino/tests/tofino_context_json_files/*/bf-rt.json`):
//!
//! - match tables: `pipe.<Control>.<table>`, `table_type` `MatchAction_Direct`, key fields
//!   named by their P4 expression with ids 1.. in key order (`$MATCH_PRIORITY`, id 65537,
//!   added when a key is ternary), `action_specs` named `<Control>.<action>` with their
//!   parameters as data fields (ids 1..), attribute `EntryScope`;
//! - registers: `pipe.<Control>.<register>`, `table_type` `Register`, the one key
//!   `$REGISTER_INDEX` (id 65557, uint32), data fields `<Control>.<register>.f1` for a
//!   `bit<W>` cell or `.lo` / `.hi` (ids 1, 2) for the `pair_t` cell, each annotated
//!   `$bfrt_field_class = register_data` (bf_switchd reads a two-field register's lower id
//!   as its low word), operation `Sync`;
//! - ids: `(prefix << 24) | (Jenkins one-at-a-time hash of the name & 0xffffff)`, the next
//!   free id on a collision (p4c `control-plane/p4RuntimeSymbolTable.cpp`); prefixes 0x01
//!   actions (hashed without `pipe.`), 0x02 tables, 0x8B registers (p4c
//!   `bf-p4c/control-plane/proto/barefoot/p4info.proto`).

use std::collections::{BTreeMap, BTreeSet};

use hawkmesh_dataplane::ir::{Gress, MatchKind, Program};
use serde_json::{json, Value};

use crate::p4::{field_ref, registers_in, tables_in, tna_control};

/// The P4 program name bf_switchd and its clients know the program by.
pub const P4_NAME: &str = "hawkmesh";

/// Id of the `$REGISTER_INDEX` key field of every register table (bf-p4c `TDDataFieldIds`).
pub const REGISTER_INDEX_ID: u32 = 65557;
/// Id of the `$MATCH_PRIORITY` key field of a table with a ternary key.
pub const MATCH_PRIORITY_ID: u32 = 65537;

const PREFIX_ACTION: u32 = 0x01;
const PREFIX_TABLE: u32 = 0x02;
const PREFIX_REGISTER: u32 = 0x8B;

/// Jenkins' one-at-a-time hash (Bob Jenkins, "A Hash Function for Hash Table Lookup",
/// 1997), the hash p4c derives control-plane ids from.
pub fn jenkins_one_at_a_time(name: &str) -> u32 {
    let mut h: u32 = 0;
    for b in name.bytes() {
        h = h.wrapping_add(u32::from(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

/// Ids as p4c assigns them: prefix in the top byte, the name's hash below, and on a
/// collision with another name the next free id with the same prefix. One name, one id (an
/// action two tables share keeps its id).
#[derive(Default)]
struct Ids {
    taken: BTreeSet<u32>,
    named: BTreeMap<(u32, String), u32>,
}

impl Ids {
    fn assign(&mut self, prefix: u32, name: &str) -> u32 {
        if let Some(id) = self.named.get(&(prefix, name.to_string())) {
            return *id;
        }
        let mut low = jenkins_one_at_a_time(name) & 0x00FF_FFFF;
        loop {
            let id = (prefix << 24) | low;
            if self.taken.insert(id) {
                self.named.insert((prefix, name.to_string()), id);
                return id;
            }
            low = (low + 1) & 0x00FF_FFFF;
        }
    }
}

fn bytes_type(width: u8) -> Value {
    json!({ "type": "bytes", "width": width })
}

/// The bfrt.json text of `p` (pretty-printed, deterministic).
pub fn emit(p: &Program) -> String {
    let mut ids = Ids::default();
    let mut tables = Vec::new();
    for gress in [Gress::Ingress, Gress::Egress] {
        let control = tna_control(gress);
        for t in tables_in(p, gress) {
            let table = &p.tables[t.0 as usize];
            let name = format!("pipe.{control}.{}", table.name);
            let id = ids.assign(PREFIX_TABLE, &name);
            let mut key: Vec<Value> = table
                .keys
                .iter()
                .enumerate()
                .map(|(i, (f, kind))| {
                    json!({
                        "id": i + 1,
                        "name": field_ref(p, *f),
                        "repeated": false,
                        "annotations": [],
                        "mandatory": false,
                        "match_type": match kind {
                            MatchKind::Exact => "Exact",
                            MatchKind::Ternary => "Ternary",
                        },
                        "type": bytes_type(p.field(*f).width),
                    })
                })
                .collect();
            if table.keys.iter().any(|(_, k)| *k == MatchKind::Ternary) {
                key.push(json!({
                    "id": MATCH_PRIORITY_ID,
                    "name": "$MATCH_PRIORITY",
                    "repeated": false,
                    "annotations": [],
                    "mandatory": false,
                    "match_type": "Exact",
                    "type": { "type": "uint32" },
                }));
            }
            let action_specs: Vec<Value> = table
                .actions
                .iter()
                .map(|a| {
                    let action = &p.actions[a.0 as usize];
                    let action_name = format!("{control}.{}", action.name);
                    let data: Vec<Value> = action
                        .params
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            let field = p.field(*f);
                            json!({
                                "id": i + 1,
                                "name": field.name,
                                "repeated": false,
                                "mandatory": true,
                                "read_only": false,
                                "annotations": [],
                                "type": bytes_type(field.width),
                            })
                        })
                        .collect();
                    json!({
                        "id": ids.assign(PREFIX_ACTION, &action_name),
                        "name": action_name,
                        "action_scope": "TableAndDefault",
                        "annotations": [],
                        "data": data,
                    })
                })
                .collect();
            tables.push(json!({
                "name": name,
                "id": id,
                "table_type": "MatchAction_Direct",
                "size": table.size,
                "annotations": [],
                "depends_on": [],
                "has_const_default_action": false,
                "key": key,
                "action_specs": action_specs,
                "data": [],
                "supported_operations": [],
                "attributes": ["EntryScope"],
            }));
        }
        for r in registers_in(p, gress) {
            let reg = &p.registers[r as usize];
            let name = format!("pipe.{control}.{}", reg.name);
            let id = ids.assign(PREFIX_REGISTER, &name);
            let fields: Vec<(&str, u8)> = if reg.is_pair() {
                vec![("lo", 32), ("hi", 32)]
            } else {
                vec![("f1", reg.width)]
            };
            let data: Vec<Value> = fields
                .iter()
                .enumerate()
                .map(|(i, (member, width))| {
                    json!({
                        "mandatory": true,
                        "read_only": false,
                        "singleton": {
                            "id": i + 1,
                            "name": format!("{control}.{}.{member}", reg.name),
                            "repeated": false,
                            "annotations": [{ "name": "$bfrt_field_class", "value": "register_data" }],
                            "type": bytes_type(*width),
                        },
                    })
                })
                .collect();
            tables.push(json!({
                "name": name,
                "id": id,
                "table_type": "Register",
                "size": reg.size,
                "annotations": [],
                "depends_on": [],
                "key": [{
                    "id": REGISTER_INDEX_ID,
                    "name": "$REGISTER_INDEX",
                    "repeated": false,
                    "annotations": [],
                    "mandatory": true,
                    "match_type": "Exact",
                    "type": { "type": "uint32" },
                }],
                "data": data,
                "supported_operations": ["Sync"],
                "attributes": [],
            }));
        }
    }
    let doc = json!({
        "schema_version": "1.0.0",
        "tables": tables,
        "learn_filters": [],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_p4cs() {
        // Compiler outputs in open-p4studio (tdi_tofino tests, tna_exact_match and
        // tna_action_selector): table, action, action profile ids.
        let mut ids = Ids::default();
        assert_eq!(ids.assign(0x02, "pipe.SwitchIngress.ipRoute"), 34_746_517);
        assert_eq!(ids.assign(0x01, "SwitchIngress.route"), 31_369_524);
        assert_eq!(ids.assign(0x01, "NoAction"), 21_257_015);
        assert_eq!(
            ids.assign(0x81, "pipe.SwitchIngress.example_action_selector_ap"),
            2_174_840_330
        );
        // The same name keeps its id; another name on a taken id takes the next one.
        assert_eq!(ids.assign(0x01, "NoAction"), 21_257_015);
        ids.taken
            .insert((0x02 << 24) | (jenkins_one_at_a_time("pipe.X.t") & 0x00FF_FFFF));
        let next = (0x02 << 24) | ((jenkins_one_at_a_time("pipe.X.t") + 1) & 0x00FF_FFFF);
        assert_eq!(ids.assign(0x02, "pipe.X.t"), next);
    }
}
