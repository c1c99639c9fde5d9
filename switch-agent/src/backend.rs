//! The switch behind one trait (dendrite's ASIC-trait pattern): the in-process executable
//! model now (cargo feature `model`), BF Runtime (Tofino) and BMv2 Thrift later. Registers
//! and tables are named by the program's generated typed ids (`wire::dataplane::{Register,
//! Table}`), never by strings. The operations are the ones BF
//! Runtime offers the control plane: register sync + bulk read of a whole register array,
//! register reset, table entry writes, multicast group configuration, and a packet channel
//! from the CPU port.

use hawkmesh_wire::control::TableEntry;
use hawkmesh_wire::dataplane::{
    Register, Table, ETHERTYPE_IPV4, EVICTION_REPORT_BYTES, POLLING_UDP_PORT,
};
use hawkmesh_wire::eviction::EvictionHeader;
use hawkmesh_wire::polling::{Polling, POLLING_PACKET_OFFSET};

/// Why a backend operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The running program has no such register (another program or version is loaded).
    #[error("register `{0}` is not in the switch's running program")]
    UnknownRegister(Register),
    /// The running program has no such table.
    #[error("table `{0}` is not in the switch's running program")]
    UnknownTable(Table),
    /// The switch refused a table entry (unknown action, key or parameter widths...).
    #[error("table `{table}`: entry refused: {reason}")]
    EntryRefused {
        /// Table.
        table: Table,
        /// The switch's reason.
        reason: String,
    },
    /// A register's cells could not be read or written.
    #[error("register `{register}`: {reason}")]
    Register {
        /// Register.
        register: Register,
        /// The switch's reason.
        reason: String,
    },
    /// The switch could not be reached.
    #[error("switch unreachable: {0}")]
    Unreachable(String),
    /// The switch runs another program, or a version whose description differs from the
    /// agent's program.
    #[error("switch program: {0}")]
    Program(String),
    /// The backend has no such object (e.g. MAC counters of the P4 pipeline alone).
    #[error("not available from this switch: {0}")]
    NotAvailable(String),
}

/// What kind of packet reached the CPU port (Tofino: told by the mirror session or CPU
/// header; the model backend is told by whoever delivers the copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuFrameKind {
    /// A copy of a polling packet with its port context.
    Polling,
    /// A flow eviction report (eviction header in front of the evicting packet).
    Eviction,
    /// Anything else.
    Other,
}

impl CpuFrameKind {
    /// What a frame the program sends its CPU port is, from its bytes (a switch whose CPU
    /// port shows no mirror metadata, e.g. Tofino's `bf_pci0`): a polling packet's copy is
    /// an IPv4/UDP frame to the polling port with a polling header of this version
    /// ([`Polling::parse_packet`]); an eviction report is the report header
    /// ([`EvictionHeader`]) with the evicting packet behind it.
    pub fn of(frame: &[u8]) -> CpuFrameKind {
        let dport = POLLING_PACKET_OFFSET - 6;
        let polling = frame.get(12..14) == Some(&ETHERTYPE_IPV4.to_be_bytes()[..])
            && frame.get(dport..dport + 2) == Some(&POLLING_UDP_PORT.to_be_bytes()[..])
            && Polling::parse_packet(frame).is_ok();
        if polling {
            CpuFrameKind::Polling
        } else if frame.len() > usize::from(EVICTION_REPORT_BYTES)
            && EvictionHeader::new_checked(frame).is_some()
        {
            CpuFrameKind::Eviction
        } else {
            CpuFrameKind::Other
        }
    }
}

/// A packet from the CPU port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuFrame {
    /// Switch time when it reached the CPU port, ns (the data plane's 48-bit clock).
    pub time_ns: u64,
    /// Kind.
    pub kind: CpuFrameKind,
    /// Bytes as delivered (from the Ethernet header, or the eviction header before it).
    pub bytes: Vec<u8>,
}

/// A port's MAC counters (BF Runtime `$PORT_STAT` on Tofino; names from open-p4studio's
/// `bf_rt_port_tf1.json`): what the congestion view (PortXmitWait-like paused time, FITF) and
/// PARALEON's PFC pause metric read. The Elastic Sketch needs no method of its own: its
/// registers (`Register::SKETCH_*`) are read and reset like the telemetry's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames received (`$FramesReceivedOK`).
    pub frames_rx: u64,
    /// Frames sent (`$FramesTransmittedOK`).
    pub frames_tx: u64,
    /// PFC frames received per priority (`$Pri{N}FramesReceived`).
    pub pfc_rx: [u64; 8],
    /// PFC frames sent per priority (`$Pri{N}FramesTransmitted`).
    pub pfc_tx: [u64; 8],
    /// Time each priority was held paused by received PFC frames, µs
    /// (`$ReceivePri{N}Pause1USCount`).
    pub paused_rx_us: [u64; 8],
    /// Time each priority's peer was asked to pause by sent PFC frames, µs
    /// (`$TransmitPri{N}Pause1USCount`).
    pub paused_tx_us: [u64; 8],
}

/// One switch, as the control plane sees it.
pub trait SwitchBackend {
    /// Makes the data-plane values of `register` visible (BF Runtime `REGISTER_SYNC`) and
    /// reads every cell (pairs as `hi << 32 | lo`).
    fn read_register(&mut self, register: Register) -> Result<Vec<u64>, BackendError>;
    /// Makes the data-plane values of `register` visible and reads the cells at `indices`
    /// only, in that order (BF Runtime: one read request with a `$REGISTER_INDEX` key per
    /// cell). By default the whole register is read and the cells picked.
    fn read_register_cells(
        &mut self,
        register: Register,
        indices: &[u32],
    ) -> Result<Vec<u64>, BackendError> {
        let all = self.read_register(register)?;
        indices
            .iter()
            .map(|&i| {
                all.get(i as usize)
                    .copied()
                    .ok_or_else(|| BackendError::Register {
                        register,
                        reason: format!("cell {i} of {}", all.len()),
                    })
            })
            .collect()
    }
    /// Clears a register.
    fn reset_register(&mut self, register: Register) -> Result<(), BackendError>;
    /// Adds a table entry.
    fn add_table_entry(&mut self, table: Table, entry: TableEntry) -> Result<(), BackendError>;
    /// Sets a multicast group's member ports.
    fn set_multicast_group(&mut self, group: u16, ports: Vec<u16>) -> Result<(), BackendError>;
    /// Packets that reached the CPU port since the last call.
    fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError>;
    /// Port `port`'s MAC counters.
    fn port_counters(&mut self, port: u16) -> Result<PortCounters, BackendError>;
    /// Whether port `port`'s link is up (BF Runtime `$PORT`'s `$PORT_UP`). A backend
    /// without ports (the P4 pipeline alone) cannot tell.
    fn port_is_up(&mut self, port: u16) -> Result<bool, BackendError> {
        Err(BackendError::NotAvailable(format!(
            "port {port}'s link state: this backend has no ports (a switch reports it as BF Runtime `$PORT`'s `$PORT_UP`)"
        )))
    }
}

/// A borrowed backend is a backend: a congestion-view source can read the counters of the
/// switch an agent already holds.
impl<B: SwitchBackend + ?Sized> SwitchBackend for &mut B {
    fn read_register(&mut self, register: Register) -> Result<Vec<u64>, BackendError> {
        (**self).read_register(register)
    }
    fn read_register_cells(
        &mut self,
        register: Register,
        indices: &[u32],
    ) -> Result<Vec<u64>, BackendError> {
        (**self).read_register_cells(register, indices)
    }
    fn reset_register(&mut self, register: Register) -> Result<(), BackendError> {
        (**self).reset_register(register)
    }
    fn add_table_entry(&mut self, table: Table, entry: TableEntry) -> Result<(), BackendError> {
        (**self).add_table_entry(table, entry)
    }
    fn set_multicast_group(&mut self, group: u16, ports: Vec<u16>) -> Result<(), BackendError> {
        (**self).set_multicast_group(group, ports)
    }
    fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError> {
        (**self).poll_cpu()
    }
    fn port_counters(&mut self, port: u16) -> Result<PortCounters, BackendError> {
        (**self).port_counters(port)
    }
    fn port_is_up(&mut self, port: u16) -> Result<bool, BackendError> {
        (**self).port_is_up(port)
    }
}

#[cfg(feature = "model")]
pub use model::ModelBackend;

/// The executable data-plane model as a backend (cargo feature `model`).
#[cfg(feature = "model")]
mod model {
    use super::{BackendError, CpuFrame, SwitchBackend};
    use hawkmesh_dataplane::model::DataPlane;
    use hawkmesh_dataplane::ModelError;
    use hawkmesh_wire::control::TableEntry;
    use hawkmesh_wire::dataplane::{Register, Table};
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    /// The executable model, shared with whoever runs packets through it (the simulator
    /// glue): the agent reads the very registers the simulated switch updates.
    #[derive(Debug)]
    pub struct ModelBackend<M: DataPlane> {
        model: Rc<RefCell<M>>,
        cpu: VecDeque<CpuFrame>,
    }

    impl<M: DataPlane> ModelBackend<M> {
        /// A backend over a shared model.
        pub fn new(model: Rc<RefCell<M>>) -> Self {
            ModelBackend {
                model,
                cpu: VecDeque::new(),
            }
        }

        /// Delivers a CPU-port packet (called by the simulator glue).
        pub fn deliver_cpu(&mut self, frame: CpuFrame) {
            self.cpu.push_back(frame);
        }
    }

    fn register_error(register: Register, error: ModelError) -> BackendError {
        match error {
            ModelError::UnknownRegister(_) => BackendError::UnknownRegister(register),
            other => BackendError::Register {
                register,
                reason: other.to_string(),
            },
        }
    }

    impl<M: DataPlane> SwitchBackend for ModelBackend<M> {
        fn read_register(&mut self, register: Register) -> Result<Vec<u64>, BackendError> {
            let mut model = self.model.borrow_mut();
            model
                .register_sync(register.name())
                .map_err(|e| register_error(register, e))?;
            Ok(model
                .register_read_all(register.name())
                .map_err(|e| register_error(register, e))?
                .to_vec())
        }

        fn reset_register(&mut self, register: Register) -> Result<(), BackendError> {
            self.model
                .borrow_mut()
                .register_reset(register.name())
                .map_err(|e| register_error(register, e))
        }

        fn add_table_entry(&mut self, table: Table, entry: TableEntry) -> Result<(), BackendError> {
            self.model
                .borrow_mut()
                .table_add(table.name(), entry)
                .map_err(|e| match e {
                    ModelError::UnknownTable(_) => BackendError::UnknownTable(table),
                    other => BackendError::EntryRefused {
                        table,
                        reason: other.to_string(),
                    },
                })
        }

        fn set_multicast_group(&mut self, group: u16, ports: Vec<u16>) -> Result<(), BackendError> {
            self.model.borrow_mut().multicast_group_set(group, ports);
            Ok(())
        }

        fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError> {
            Ok(self.cpu.drain(..).collect())
        }

        fn port_counters(&mut self, port: u16) -> Result<super::PortCounters, BackendError> {
            Err(BackendError::NotAvailable(format!(
                "port {port}'s MAC counters: the in-process model is the P4 pipeline alone (a switch's MAC keeps them: BF Runtime `$PORT_STAT`; in simulation, netsim's port counters)"
            )))
        }
    }
}
