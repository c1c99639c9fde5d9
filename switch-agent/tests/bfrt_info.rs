//! The BF Runtime description parser and the id mapping, on the bfrt.json codegen writes for
//! `p4/tna/hawkmesh.p4` and on descriptions that do not match the agent's program.

use hawkmesh_switch_agent::bfrt_info::{BfrtInfo, BfrtInfoError, ProgramIds};
use hawkmesh_wire::dataplane::{Register, Table};
use serde_json::Value;

fn committed() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../p4/tna/bfrt.json");
    let text =
        std::fs::read(path).expect("p4/tna/bfrt.json (cargo run -p hawkmesh-codegen -- --write)");
    serde_json::from_slice(&text).expect("json")
}

fn resolve(doc: &Value) -> Result<ProgramIds, BfrtInfoError> {
    let info = BfrtInfo::parse(doc.to_string().as_bytes())?;
    ProgramIds::resolve(&info)
}

fn tables(doc: &mut Value) -> &mut Vec<Value> {
    doc["tables"].as_array_mut().expect("tables")
}

#[test]
fn every_register_and_table_of_the_program_resolves_in_its_description() {
    let ids = resolve(&committed()).expect("resolves");
    let pair = ids.register(Register::SKETCH_KEY);
    assert_eq!(pair.table_name, "pipe.Ingress.sketch_key");
    assert_eq!(pair.index_id, 65557);
    assert_eq!(
        (pair.lo.name.as_str(), pair.lo.width),
        ("Ingress.sketch_key.lo", 32)
    );
    assert_eq!(
        pair.hi.as_ref().map(|h| h.name.as_str()),
        Some("Ingress.sketch_key.hi")
    );
    let plain = ids.register(Register::PORT_QDEPTH_SUM);
    assert_eq!(plain.table_name, "pipe.Egress.port_qdepth_sum");
    assert_eq!(
        (plain.lo.name.as_str(), plain.hi.is_none()),
        ("Egress.port_qdepth_sum.f1", true)
    );
    // The table ids are p4c's: 0x8B registers, 0x02 tables.
    assert_eq!(plain.table_id >> 24, 0x8B);
    let forward = &ids.table(Table::FORWARD).info;
    assert_eq!(forward.id >> 24, 0x02);
    let keys: Vec<(&str, u32)> = forward
        .keys
        .iter()
        .map(|k| (k.name.as_str(), k.width))
        .collect();
    assert_eq!(
        keys,
        [("meta.lookup_dst_addr", 32), ("meta.ecmp_bucket", 4)]
    );
    let set_route = forward.action("set_route").expect("set_route");
    assert_eq!(set_route.name, "Ingress.set_route");
    assert_eq!(
        (set_route.params[0].name.as_str(), set_route.params[0].width),
        ("port", 16)
    );
    // Every register and table has its own id.
    let mut all: Vec<u32> = Register::ALL
        .iter()
        .map(|r| ids.register(*r).table_id)
        .collect();
    all.extend(Table::ALL.iter().map(|t| ids.table(*t).info.id));
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n);
}

#[test]
fn a_program_without_a_register_the_agent_reads_is_refused_by_name() {
    let mut doc = committed();
    tables(&mut doc).retain(|t| t["name"] != "pipe.Egress.port_epoch");
    assert_eq!(
        resolve(&doc).unwrap_err().to_string(),
        "the switch's program has no register `port_epoch` (is another program or version loaded?)"
    );
}

#[test]
fn a_register_of_another_size_or_width_or_word_order_is_refused() {
    let mut doc = committed();
    for t in tables(&mut doc) {
        if t["name"] == "pipe.Ingress.port_packets" {
            t["size"] = 128.into();
        }
    }
    let e = resolve(&doc).unwrap_err().to_string();
    assert_eq!(e, "the switch's program has `pipe.Ingress.port_packets` but it has 128 cells, the agent's program 256");

    let mut doc = committed();
    for t in tables(&mut doc) {
        if t["name"] == "pipe.Ingress.port_packets" {
            t["data"][0]["singleton"]["type"]["width"] = 16.into();
        }
    }
    let e = resolve(&doc).unwrap_err().to_string();
    assert_eq!(
        e,
        "the switch's program has `Ingress.port_packets.f1` but it is 16 bits wide, the agent's 32"
    );

    let mut doc = committed();
    for t in tables(&mut doc) {
        if t["name"] == "pipe.Ingress.sketch_key" {
            t["data"][0]["singleton"]["id"] = 2.into();
            t["data"][1]["singleton"]["id"] = 1.into();
        }
    }
    let e = resolve(&doc).unwrap_err().to_string();
    assert!(e.contains("its `hi` field has the lower id"), "{e}");
}

#[test]
fn a_table_of_another_kind_is_refused() {
    let mut doc = committed();
    for t in tables(&mut doc) {
        if t["name"] == "pipe.Ingress.forward" {
            t["table_type"] = "Register".into();
        }
    }
    let e = resolve(&doc).unwrap_err().to_string();
    assert_eq!(e, "the switch's program has `pipe.Ingress.forward` but it is a Register table, not a match-action table");
}

#[test]
fn bad_descriptions_are_errors_not_panics() {
    for text in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"tables\": 3}",
        b"{\"tables\": [{\"name\": 1}]}",
    ] {
        assert!(matches!(BfrtInfo::parse(text), Err(BfrtInfoError::Json(_))));
    }
    let mut doc = committed();
    let first = tables(&mut doc)[0].clone();
    let first_name = first["name"].as_str().expect("a name").to_string();
    tables(&mut doc).push(first);
    assert!(matches!(
        BfrtInfo::parse(doc.to_string().as_bytes()),
        Err(BfrtInfoError::Duplicate(name)) if name == first_name
    ));
}

#[test]
fn selector_tables_and_fixed_tables_parse() {
    // bf-p4c's shape for an action-selector table (data as a `oneof`, p4c bfruntime.cpp
    // addOneOf) and a fixed table of bf_switchd (bf_rt_pre_tf1.json `$pre.mgid`).
    let text = br#"{"tables": [
      {"name": "pipe.SwitchIngress.sel", "id": 33554433, "table_type": "MatchAction_Indirect_Selector", "size": 1024,
       "key": [{"id": 1, "name": "hdr.ipv4.dst_addr", "mandatory": false, "match_type": "Exact", "type": {"type": "bytes", "width": 32}}],
       "data": [{"mandatory": true, "read_only": false, "oneof": [
          {"id": 65539, "name": "$ACTION_MEMBER_ID", "repeated": false, "annotations": [], "type": {"type": "uint32"}},
          {"id": 65540, "name": "$SELECTOR_GROUP_ID", "repeated": false, "annotations": [], "type": {"type": "uint32"}}]}]},
      {"name": "$pre.mgid", "id": 4278321153, "table_type": "PreMgid", "size": 65536,
       "key": [{"id": 1, "name": "$MGID", "mandatory": true, "match_type": "Exact", "type": {"type": "uint16"}}],
       "data": [{"mandatory": false, "read_only": false, "singleton": {"id": 1, "name": "$MULTICAST_NODE_ID", "repeated": true, "type": {"type": "uint32"}}}]}
    ]}"#;
    let info = BfrtInfo::parse(text).expect("parses");
    let sel = info
        .table("pipe.SwitchIngress.sel")
        .expect("selector table");
    assert_eq!(
        sel.data_field("$SELECTOR_GROUP_ID").map(|f| f.id),
        Some(65540)
    );
    let mgid = info.table_by_id(4_278_321_153).expect("by id");
    assert_eq!(mgid.key("$MGID").map(|k| k.width), Some(16));
    assert_eq!(
        mgid.data_field("$MULTICAST_NODE_ID").map(|f| f.width),
        Some(32)
    );
}
