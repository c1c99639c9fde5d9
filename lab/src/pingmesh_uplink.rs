//! The simulated host agents' side of the pingmesh controller: what a host agent daemon does
//! over gRPC, done for the agents of [`crate::pingmesh::NetsimProbing`] against the real
//! analyzer service (`hawkmesh.v1.PingmeshController` on a real socket).
//!
//! Each [`Uplink::sync`] — called every upload interval of simulated time — sets the
//! controller's clock to the simulated time (its [`Clock::Manual`]), registers every host
//! whose agent is new or restarted (new QPNs: a higher incarnation), and uploads the probes
//! finished since the last call, one batch per prober host with the next batch number. A
//! host whose agent is down uploads nothing.
//!
//! [`Clock::Manual`]: hawkmesh_analyzer_server::pingmesh::Clock::Manual

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hawkmesh_analyzer_server::pingmesh::batch_of;
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::Simulation;
use hawkmesh_pingmesh::analysis::ProbeRecord;
use hawkmesh_pingmesh::inventory::{Inventory, RnicId};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::pingmesh_controller_client::PingmeshControllerClient;
use hawkmesh_wire::topology::NodeId;
use tonic::transport::Channel;

use crate::pingmesh::NetsimProbing;

/// Why the uplink failed.
#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    /// The runtime could not start.
    #[error("starting the uplink's runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The controller could not be reached.
    #[error("connecting to the pingmesh controller at {addr}: {source}")]
    Connect {
        /// Its address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The controller refused a request.
    #[error("{what} of {host}: {status}")]
    Refused {
        /// The request.
        what: &'static str,
        /// The host.
        host: String,
        /// The answer.
        status: tonic::Status,
    },
}

/// What the uplink did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UplinkStats {
    /// Registrations (first ones and after restarts).
    pub registrations: u64,
    /// Batches uploaded.
    pub batches: u64,
    /// Results uploaded.
    pub results: u64,
    /// Results the controller counted late.
    pub late: u64,
}

/// The simulated agents' gRPC client of the controller.
#[derive(Debug)]
pub struct Uplink {
    runtime: tokio::runtime::Runtime,
    client: PingmeshControllerClient<Channel>,
    clock: Arc<AtomicU64>,
    inventory: Inventory,
    /// Per host: its registered incarnation and the QPNs registered with it.
    registered: BTreeMap<NodeId, (u64, Vec<(RnicId, u32)>)>,
    next_seq: BTreeMap<NodeId, u64>,
    stats: UplinkStats,
}

impl Uplink {
    /// Connects to the controller at `addr` whose clock is `clock`.
    pub fn connect(
        addr: SocketAddr,
        clock: Arc<AtomicU64>,
        inventory: Inventory,
    ) -> Result<Self, UplinkError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = runtime
            .block_on(PingmeshControllerClient::connect(format!("http://{addr}")))
            .map_err(|source| UplinkError::Connect { addr, source })?;
        Ok(Uplink {
            runtime,
            client,
            clock,
            inventory,
            registered: BTreeMap::new(),
            next_seq: BTreeMap::new(),
            stats: UplinkStats::default(),
        })
    }

    /// What it did so far.
    pub fn stats(&self) -> UplinkStats {
        self.stats
    }

    /// Sets the controller's clock to `sim`'s time, registers new or restarted agents and
    /// uploads the finished probes.
    pub fn sync(&mut self, probing: &NetsimProbing, sim: &Simulation) -> Result<(), UplinkError> {
        let now_ns = sim.now() / NS;
        self.clock.fetch_max(now_ns, Ordering::SeqCst);
        let qpns = probing.current_qpns();
        let alive: BTreeMap<NodeId, bool> = probing
            .last_uploads(now_ns)
            .into_iter()
            .map(|(host, last)| (host, last >= now_ns))
            .collect();
        // Registrations: every live host whose QPNs are not the registered ones.
        let mut per_host: BTreeMap<NodeId, Vec<(RnicId, u32)>> = BTreeMap::new();
        for (rnic, qpn) in &qpns {
            if let Some(r) = self.inventory.rnic(*rnic) {
                per_host.entry(r.host).or_default().push((*rnic, *qpn));
            }
        }
        for (host, rnics) in per_host {
            if !alive.get(&host).copied().unwrap_or(false) {
                continue;
            }
            if self.registered.get(&host).is_some_and(|(_, r)| *r == rnics) {
                continue;
            }
            let incarnation = self.registered.get(&host).map_or(1, |(i, _)| i + 1);
            let request = pb::RegisterRequest {
                host: self.inventory.name(host).to_string(),
                incarnation,
                rnics: rnics
                    .iter()
                    .filter_map(|(id, qpn)| {
                        let r = self.inventory.rnic(*id)?;
                        // RoCEv2's IPv4-mapped GID (IBTA RoCEv2 annex A17.4.5.1).
                        let mut gid = vec![0u8; 10];
                        gid.extend([0xff, 0xff]);
                        gid.extend(r.ipv4);
                        Some(pb::RnicInfo {
                            nic: u32::from(r.nic),
                            gid,
                            ip: std::net::Ipv4Addr::from(r.ipv4).to_string(),
                            qpn: *qpn,
                        })
                    })
                    .collect(),
            };
            let name = request.host.clone();
            self.runtime
                .block_on(self.client.register(request))
                .map_err(|status| UplinkError::Refused {
                    what: "registration",
                    host: name,
                    status,
                })?;
            self.registered.insert(host, (incarnation, rnics));
            self.stats.registrations += 1;
        }
        // Uploads: the finished probes, per prober host.
        let mut by_host: BTreeMap<NodeId, Vec<ProbeRecord>> = BTreeMap::new();
        for record in probing.take_records(sim) {
            if let Some(r) = self.inventory.rnic(record.prober) {
                by_host.entry(r.host).or_default().push(record);
            }
        }
        for (host, incarnation) in self
            .registered
            .iter()
            .map(|(h, (i, _))| (*h, *i))
            .collect::<Vec<_>>()
        {
            if !alive.get(&host).copied().unwrap_or(false) {
                continue;
            }
            // An agent uploads every interval, with results or without (it is alive).
            let records = by_host.remove(&host).unwrap_or_default();
            let seq = self.next_seq.entry(host).or_insert(1);
            let batch = batch_of(
                &self.inventory,
                self.inventory.name(host),
                (incarnation, *seq),
                &records,
            );
            *seq += 1;
            let n = batch.results.len() as u64;
            let name = batch.host.clone();
            let reply = self
                .runtime
                .block_on(self.client.upload_results(batch))
                .map_err(|status| UplinkError::Refused {
                    what: "upload",
                    host: name,
                    status,
                })?
                .into_inner();
            self.stats.batches += 1;
            self.stats.results += n;
            self.stats.late += reply.late;
        }
        Ok(())
    }

    /// `host`'s pinglist from the controller.
    pub fn pinglist(&mut self, host: &str) -> Result<pb::PinglistReply, UplinkError> {
        self.runtime
            .block_on(self.client.get_pinglist(pb::PinglistRequest {
                host: host.to_string(),
            }))
            .map(tonic::Response::into_inner)
            .map_err(|status| UplinkError::Refused {
                what: "pinglist",
                host: host.to_string(),
                status,
            })
    }
}
