//! The BF Runtime server over the model, driven over TCP by `rbfrt` (the Rust BF Runtime
//! client, a third-party implementation of the protocol) and by a bare gRPC client.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{self, program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets;
use hawkmesh_proto::bfrt_proto as pb;
use hawkmesh_proto::bfrt_proto::bf_runtime_client::BfRuntimeClient;
use hawkmesh_wire::dataplane::{CPU_MIRROR_SESSION, CPU_PORT, MCAST_GROUP_ALL_PORTS};
use hawkmesh_wire::telemetry::FiveTuple;
use rbfrt::table::{MatchValue, Request, TableOperation};
use rbfrt::{register, SwitchConnection};

struct Switch {
    device: Arc<Mutex<Device>>,
    program: Arc<Program>,
    port: u16,
}

fn bfrt_json() -> Vec<u8> {
    hawkmesh_bfrt_model::program_description().to_vec()
}

async fn start() -> Switch {
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
    let device = Arc::new(Mutex::new(Device::new(model)));
    let server = BfrtServer::new(device.clone(), "hawkmesh", bfrt_json()).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { server.serve(listener).await });
    Switch {
        device,
        program,
        port,
    }
}

impl Switch {
    /// The ports a data packet from 10.0.0.1 to `dst` leaves by.
    fn egress_ports(&self, dst: Ipv4Addr, sport: u16) -> Vec<u16> {
        let bytes = data_packet(&self.program, [10, 0, 0, 1], dst.octets(), sport);
        let out = self
            .device
            .lock()
            .unwrap()
            .process(&bytes, &IngressInput::default(), 0, CPU_MIRROR_SESSION)
            .expect("process");
        out.ports.iter().map(|(p, _)| *p).collect()
    }
}

async fn connect(port: u16) -> SwitchConnection {
    SwitchConnection::builder("127.0.0.1", port)
        .device_id(0)
        .client_id(1)
        .p4_name("hawkmesh")
        .connect()
        .await
        .expect("rbfrt connects, binds and loads the program's description")
}

fn data_packet(program: &Program, src: [u8; 4], dst: [u8; 4], sport: u16) -> Vec<u8> {
    let t = FiveTuple::rocev2(src, sport, dst);
    packets::rocev2_data(program, &t, 0, 2, 64, 1, 1000)
}

fn route(dst: Ipv4Addr, bucket: u64, port: u16) -> Request {
    Request::new("pipe.Ingress.forward")
        .match_key("meta.lookup_dst_addr", MatchValue::exact(dst))
        .match_key("meta.ecmp_bucket", MatchValue::exact(bucket as u8))
        .action("Ingress.set_route")
        .action_data("port", port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbfrt_programs_routes_and_the_model_forwards_by_them() {
    let sw = start().await;
    let conn = connect(sw.port).await;
    let dst = Ipv4Addr::new(10, 0, 1, 1);
    let hops = [3u16, 5];
    let requests: Vec<Request> = hawkeye::forward_entries(dst, &hops)
        .into_iter()
        .map(|(key, _, params)| route(dst, key[1], params[0] as u16))
        .collect();
    conn.write_table_entries(requests).await.expect("routes");

    // The entries read back, and the model forwards by them (ECMP by the 5-tuple hash).
    let entries = conn
        .get_table_entries(Request::new("pipe.Ingress.forward"))
        .await
        .expect("read back");
    assert_eq!(entries.len(), hawkeye::ECMP_BUCKETS as usize);
    assert!(entries
        .iter()
        .all(|e| e.get_action_name() == "Ingress.set_route"));
    for sport in [49152u16, 49153, 49154, 49155] {
        let bucket = hawkeye::ecmp_bucket([10, 0, 0, 1].into(), dst, sport, 4791);
        assert_eq!(
            sw.egress_ports(dst, sport),
            [hops[bucket as usize % 2]],
            "sport {sport}"
        );
    }

    // INSERT of an existing key is refused; MODIFY changes the next hop; DELETE removes.
    let again = conn.write_table_entry(route(dst, 0, 7)).await;
    assert!(again.is_err(), "duplicate insert accepted");
    conn.update_table_entry(route(dst, 0, 7))
        .await
        .expect("modify");
    conn.clear_table("pipe.Ingress.forward")
        .await
        .expect("clear");
    assert!(
        sw.egress_ports(dst, 49152).is_empty(),
        "no route after the table was cleared"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_register_syncs_and_reads_back_as_the_model_holds_it() {
    let sw = start().await;
    let conn = connect(sw.port).await;
    // Port masks and a route, then traffic, so that telemetry registers hold values.
    let mut requests = Vec::new();
    for (table, port, action, params) in hawkeye::port_mask_entries(&sw.program) {
        let control = if table.starts_with("egress_") {
            "Egress"
        } else {
            "Ingress"
        };
        let key = if control == "Egress" {
            "meta.intr_egress_port"
        } else {
            "meta.mask_port"
        };
        let mut r = Request::new(&format!("pipe.{control}.{table}"))
            .match_key(key, MatchValue::exact(port as u16))
            .action(&format!("{control}.{action}"));
        for (w, v) in params.iter().enumerate() {
            r = r.action_data(&format!("w{w}"), *v as u32);
        }
        requests.push(r);
    }
    conn.write_table_entries(requests)
        .await
        .expect("port masks");
    let dst = Ipv4Addr::new(10, 0, 1, 1);
    let routes: Vec<Request> = (0..hawkeye::ECMP_BUCKETS as u64)
        .map(|b| route(dst, b, 2))
        .collect();
    conn.write_table_entries(routes).await.expect("routes");
    for i in 0..20u16 {
        let bytes = data_packet(
            &sw.program,
            [10, 0, 0, (i % 3) as u8 + 1],
            dst.octets(),
            49152 + i,
        );
        let input = IngressInput {
            ingress_port: i % 2,
            tstamp_ns: 1_000_000 + u64::from(i) * 1000,
            routed_egress_port: None,
        };
        sw.device
            .lock()
            .unwrap()
            .process(&bytes, &input, 0, CPU_MIRROR_SESSION)
            .expect("process");
    }

    let doc: serde_json::Value = serde_json::from_slice(&bfrt_json()).expect("json");
    let described: Vec<String> = doc["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    let mut nonzero = 0;
    for r in &sw.program.registers {
        let table = described
            .iter()
            .find(|n| n.ends_with(&format!(".{}", r.name)))
            .unwrap_or_else(|| panic!("{} is not described", r.name))
            .clone();
        let control = table.split('.').nth(1).expect("control").to_string();
        conn.execute_operation(Request::new(&table).operation(TableOperation::SyncRegister))
            .await
            .unwrap_or_else(|e| panic!("sync {table}: {e}"));
        let read = conn
            .get_register_entry(register::Request::new(&table))
            .await
            .unwrap_or_else(|e| panic!("read {table}: {e}"));
        let expected = sw
            .device
            .lock()
            .unwrap()
            .model
            .register_read_all(&r.name)
            .expect("model")
            .to_vec();
        assert_eq!(read.entries().len(), expected.len(), "{table}: cells");
        let base = format!("{control}.{}", r.name);
        for (i, want) in expected.iter().enumerate() {
            let cell = read.get(i as u32).unwrap_or_else(|| panic!("{table}[{i}]"));
            let word = |member: &str| -> u64 {
                let v = cell
                    .get(&format!("{base}.{member}"))
                    .unwrap_or_else(|| panic!("{table}[{i}] has no {member}"));
                assert_eq!(v.len(), 1, "one pipe");
                v[0].iter().fold(0u64, |a, b| (a << 8) | u64::from(*b))
            };
            let got = if r.width == 64 {
                (word("hi") << 32) | word("lo")
            } else {
                word("f1")
            };
            assert_eq!(got, *want, "{table}[{i}]");
            if got != 0 {
                nonzero += 1;
            }
        }
    }
    assert!(nonzero > 50, "the traffic left {nonzero} non-zero cells");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multicast_nodes_and_groups_and_the_cpu_mirror_session_reach_the_model() {
    let sw = start().await;
    let conn = connect(sw.port).await;
    conn.write_table_entry(
        Request::new("$pre.node")
            .match_key("$MULTICAST_NODE_ID", MatchValue::exact(7u32))
            .action_data("$MULTICAST_RID", 1u16)
            .action_data_repeated("$MULTICAST_LAG_ID", Vec::<u32>::new())
            .action_data_repeated("$DEV_PORT", vec![0u32, 1, 2, 3]),
    )
    .await
    .expect("node");
    conn.write_table_entry(
        Request::new("$pre.mgid")
            .match_key("$MGID", MatchValue::exact(MCAST_GROUP_ALL_PORTS))
            .action_data_repeated("$MULTICAST_NODE_ID", vec![7u32])
            .action_data_repeated("$MULTICAST_NODE_L1_XID_VALID", vec![false])
            .action_data_repeated("$MULTICAST_NODE_L1_XID", vec![0u32]),
    )
    .await
    .expect("group");
    assert_eq!(
        sw.device
            .lock()
            .unwrap()
            .model
            .multicast_group(MCAST_GROUP_ALL_PORTS),
        Some(&[0u16, 1, 2, 3][..])
    );
    assert!(!sw
        .device
        .lock()
        .unwrap()
        .cpu_mirror_active(CPU_MIRROR_SESSION));
    conn.write_table_entry(
        Request::new("$mirror.cfg")
            .match_key("$sid", MatchValue::exact(CPU_MIRROR_SESSION))
            .action("$normal")
            .action_data("$direction", "BOTH")
            .action_data("$session_enable", true)
            .action_data("$ucast_egress_port", u32::from(CPU_PORT))
            .action_data("$ucast_egress_port_valid", true),
    )
    .await
    .expect("mirror session");
    assert!(sw
        .device
        .lock()
        .unwrap()
        .cpu_mirror_active(CPU_MIRROR_SESSION));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_errors_that_name_the_problem() {
    let sw = start().await;
    let mut client = BfRuntimeClient::connect(format!("http://127.0.0.1:{}", sw.port))
        .await
        .expect("grpc");
    let info = client
        .get_forwarding_pipeline_config(pb::GetForwardingPipelineConfigRequest {
            device_id: 0,
            client_id: 9,
        })
        .await
        .expect("config")
        .into_inner();
    assert_eq!(info.config[0].p4_name, "hawkmesh");
    assert_eq!(info.config[0].bfruntime_info, bfrt_json());

    let read = |table_id: u32, index: Option<u32>| pb::ReadRequest {
        target: None,
        client_id: 9,
        entities: vec![pb::Entity {
            entity: Some(pb::entity::Entity::TableEntry(pb::TableEntry {
                table_id,
                value: index.map(|i| {
                    pb::table_entry::Value::Key(pb::TableKey {
                        fields: vec![pb::KeyField {
                            field_id: 65557,
                            match_type: Some(pb::key_field::MatchType::Exact(
                                pb::key_field::Exact {
                                    value: i.to_be_bytes().to_vec(),
                                },
                            )),
                        }],
                    })
                }),
                data: None,
                is_default_entry: false,
                entry_tgt: None,
                table_flags: None,
            })),
        }],
        p4_name: "hawkmesh".into(),
    };
    let e = client.read(read(1, None)).await.expect_err("unbound");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(
        e.message().contains("client 9 is not bound"),
        "{}",
        e.message()
    );

    let bind = |name: &str| pb::SetForwardingPipelineConfigRequest {
        device_id: 0,
        client_id: 9,
        action: 0,
        dev_init_mode: 0,
        base_path: String::new(),
        config: vec![pb::ForwardingPipelineConfig {
            p4_name: name.into(),
            bfruntime_info: vec![],
            profiles: vec![],
        }],
    };
    let e = client
        .set_forwarding_pipeline_config(bind("other"))
        .await
        .expect_err("wrong program");
    assert_eq!(e.code(), tonic::Code::NotFound);
    client
        .set_forwarding_pipeline_config(bind("hawkmesh"))
        .await
        .expect("bind");

    let e = client.read(read(1, None)).await.expect_err("no table 1");
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(
        e.message().contains("no table with id 0x00000001"),
        "{}",
        e.message()
    );

    let doc: serde_json::Value = serde_json::from_slice(&bfrt_json()).expect("json");
    let port_packets = doc["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["name"] == "pipe.Ingress.port_packets")
        .and_then(|t| t["id"].as_u64())
        .expect("port_packets id") as u32;
    let e = client
        .read(read(port_packets, Some(256)))
        .await
        .expect_err("index out of range");
    assert_eq!(e.code(), tonic::Code::OutOfRange);
    assert!(
        e.message()
            .contains("pipe.Ingress.port_packets: index 256 of 256 cells"),
        "{}",
        e.message()
    );
    let ok = client
        .read(read(port_packets, Some(3)))
        .await
        .expect("one cell")
        .into_inner()
        .message()
        .await
        .expect("stream")
        .expect("one response");
    assert_eq!(ok.entities.len(), 1);

    // A write with a value wider than its field names the field.
    let write = pb::WriteRequest {
        target: None,
        client_id: 9,
        updates: vec![pb::Update {
            r#type: pb::update::Type::Insert as i32,
            entity: Some(pb::Entity {
                entity: Some(pb::entity::Entity::TableEntry(pb::TableEntry {
                    table_id: port_packets,
                    value: Some(pb::table_entry::Value::Key(pb::TableKey {
                        fields: vec![pb::KeyField {
                            field_id: 65557,
                            match_type: Some(pb::key_field::MatchType::Exact(
                                pb::key_field::Exact {
                                    value: 3u32.to_be_bytes().to_vec(),
                                },
                            )),
                        }],
                    })),
                    data: Some(pb::TableData {
                        action_id: 0,
                        fields: vec![pb::DataField {
                            field_id: 1,
                            value: Some(pb::data_field::Value::Stream(vec![1, 0, 0, 0, 0])),
                        }],
                    }),
                    is_default_entry: false,
                    entry_tgt: None,
                    table_flags: None,
                })),
            }),
        }],
        atomicity: 0,
        p4_name: "hawkmesh".into(),
    };
    let e = client.write(write).await.expect_err("too wide");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message()
            .contains("update 0: pipe.Ingress.port_packets: field `Ingress.port_packets.f1`: value 0x100000000 does not fit 32 bits"),
        "{}",
        e.message()
    );
    assert_eq!(
        sw.device
            .lock()
            .unwrap()
            .model
            .register_read("port_packets", 3)
            .expect("cell"),
        0,
        "the refused write left the cell alone"
    );
}
