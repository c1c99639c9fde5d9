//! The switch agent reads registers with its own BF Runtime `Read`s (not rbfrt's, which
//! build maps per cell): the requests on the wire are byte for byte the ones rbfrt sends
//! for the same read, so a switch that answers rbfrt answers the agent alike.

use std::sync::{Arc, Mutex};

use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::model::{Model, Routing};
use hawkmesh_proto::bfrt_proto as pb;
use hawkmesh_proto::bfrt_proto::bf_runtime_server::{BfRuntime, BfRuntimeServer};
use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use hawkmesh_switch_agent::SwitchBackend;
use hawkmesh_wire::dataplane::{Register, CPU_PORT};
use prost::Message;
use rbfrt::{register, SwitchConnection};
use tonic::{Request, Response, Status, Streaming};

/// The model's server, recording every read request it is sent.
struct Recording {
    inner: BfrtServer,
    reads: Arc<Mutex<Vec<pb::ReadRequest>>>,
}

#[tonic::async_trait]
impl BfRuntime for Recording {
    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        self.inner.write(request).await
    }

    type ReadStream = <BfrtServer as BfRuntime>::ReadStream;

    async fn read(
        &self,
        request: Request<pb::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        self.reads.lock().unwrap().push(request.get_ref().clone());
        self.inner.read(request).await
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<pb::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<pb::SetForwardingPipelineConfigResponse>, Status> {
        self.inner.set_forwarding_pipeline_config(request).await
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<pb::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<pb::GetForwardingPipelineConfigResponse>, Status> {
        self.inner.get_forwarding_pipeline_config(request).await
    }

    type StreamChannelStream = <BfrtServer as BfRuntime>::StreamChannelStream;

    async fn stream_channel(
        &self,
        request: Request<Streaming<pb::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        self.inner.stream_channel(request).await
    }
}

#[test]
fn register_reads_send_what_rbfrt_sends() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let model = Model::new(program, Routing::FromTable, CPU_PORT).expect("model");
    let device = Arc::new(Mutex::new(Device::new(model)));
    let reads = Arc::new(Mutex::new(Vec::new()));
    let server = BfrtServer::new(
        device,
        "hawkmesh",
        hawkmesh_bfrt_model::program_description().to_vec(),
    )
    .expect("server");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let service = BfRuntimeServer::new(Recording {
        inner: server,
        reads: reads.clone(),
    })
    .max_encoding_message_size(64 * 1024 * 1024);
    runtime.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });

    let mut backend = BfrtBackend::connect(
        runtime.handle().clone(),
        &BfrtEndpoint::new("127.0.0.1", port),
    )
    .expect("the backend connects");
    let name = backend
        .ids()
        .register(Register::SKETCH_KEY)
        .table_name
        .clone();
    let picks = [0u32, 7, 4095, 7];
    let whole = backend
        .read_register(Register::SKETCH_KEY)
        .expect("the whole register");
    assert_eq!(whole.len(), Register::SKETCH_KEY.cells() as usize);
    let cells = backend
        .read_register_cells(Register::SKETCH_KEY, &picks)
        .expect("cells by index, one asked twice");
    assert_eq!(cells, vec![0; picks.len()]);
    let ours: Vec<pb::ReadRequest> = std::mem::take(&mut *reads.lock().unwrap());
    assert_eq!(ours.len(), 2, "one read each: {ours:?}");

    let theirs: Vec<pb::ReadRequest> = runtime.block_on(async {
        let conn = SwitchConnection::builder("127.0.0.1", port)
            .device_id(0)
            .client_id(1)
            .p4_name("hawkmesh")
            .connect()
            .await
            .expect("rbfrt connects");
        // rbfrt's own reads while connecting are not register reads.
        reads.lock().unwrap().clear();
        conn.get_register_entries(vec![register::Request::new(&name)])
            .await
            .expect("rbfrt reads the whole register");
        conn.get_register_entries(
            picks
                .iter()
                .map(|i| register::Request::new(&name).index(*i))
                .collect(),
        )
        .await
        .expect("rbfrt reads by index");
        std::mem::take(&mut *reads.lock().unwrap())
    });
    assert_eq!(theirs.len(), 2);
    for (ours, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(ours, theirs);
        assert_eq!(ours.encode_to_vec(), theirs.encode_to_vec());
    }
    // The index goes as 4 big-endian bytes, the target is every pipe.
    let target = ours[1].target.expect("a target");
    assert_eq!(
        (target.pipe_id, target.direction, target.prsr_id),
        (0xffff, 0xff, 0xff)
    );
    let Some(pb::entity::Entity::TableEntry(e)) = &ours[1].entities[2].entity else {
        panic!("a table entry");
    };
    let Some(pb::table_entry::Value::Key(key)) = &e.value else {
        panic!("a key");
    };
    let Some(pb::key_field::MatchType::Exact(x)) = &key.fields[0].match_type else {
        panic!("exact");
    };
    assert_eq!(x.value, 4095u32.to_be_bytes());
}
