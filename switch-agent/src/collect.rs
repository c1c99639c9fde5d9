//! From register arrays to a telemetry report (HAWKEYE §3.4: the switch CPU reads the
//! relevant epochs' registers when a polling packet arrives).
//!
//! The ring layout is the program's (dataplane/src/hawkeye.rs): with E the absolute epoch
//! number (48-bit timestamp >> epoch_log2), the slot is `E mod epochs` and the stored epoch
//! id is the 16 timestamp bits above the slot index. Port registers are indexed
//! `slot·ports + port` (counts from ingress with `port_enq_epoch`, queue-depth sums from
//! egress with `port_epoch`), meter registers `slot·ports² + ingress·ports + egress`, flow
//! registers `slot·flow_slots + hash slot`. A cell counts only if its stored epoch id is the
//! one of the epoch being read: stale slots from an earlier lap of the ring are skipped, and
//! so are empty ones.

use crate::backend::{BackendError, SwitchBackend};
use hawkmesh_wire::dataplane::{self, Module, Register};
use hawkmesh_wire::eviction::EvictionHeader;
use hawkmesh_wire::pfc::pause_in_force;
use hawkmesh_wire::telemetry::{
    EpochTelemetry, FiveTuple, FlowRecord, MeterRecord, PausedPort, PortRecord, IP_PROTOCOL_UDP,
};
use std::collections::BTreeMap;

/// The stored epoch id's bits: the program keeps the epoch number's bits above the ring slot
/// index in a field as wide as the eviction report's `epoch_id` (generated layout).
const EPOCH_ID_MASK: u64 = (1 << dataplane::eviction_layout::EPOCH_ID.1) - 1;

/// Sizes of a program variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Front-panel ports covered by the registers.
    pub ports: u32,
    /// Epochs in the ring.
    pub epochs: u32,
    /// Epoch length 2^epoch_log2_ns ns.
    pub epoch_log2_ns: u8,
    /// Flow slots per epoch.
    pub flow_slots: u32,
    /// Bytes per queue-depth unit (Tofino: 80-byte cells).
    pub qdepth_unit_bytes: u64,
}

impl Geometry {
    /// The default (committed) variant, from the generated constants.
    pub fn default_variant() -> Self {
        Geometry {
            ports: dataplane::PORTS as u32,
            epochs: dataplane::EPOCHS as u32,
            epoch_log2_ns: dataplane::EPOCH_LOG2_NS,
            flow_slots: dataplane::FLOW_SLOTS,
            qdepth_unit_bytes: dataplane::QDEPTH_UNIT_BYTES_TOFINO as u64,
        }
    }

    /// Epoch length, ns.
    pub fn epoch_ns(&self) -> u64 {
        1 << self.epoch_log2_ns
    }

    fn epoch_bits(&self) -> u32 {
        self.epochs.trailing_zeros()
    }

    /// (ring slot, stored epoch id) of absolute epoch `epoch`.
    pub fn slot_and_id(&self, epoch: u64) -> (u64, u64) {
        let slot = epoch & (self.epochs as u64 - 1);
        let id = (epoch >> self.epoch_bits()) & EPOCH_ID_MASK;
        (slot, id)
    }
}

/// What one register read pass cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// Registers read.
    pub registers: usize,
    /// Cells read.
    pub cells: usize,
}

/// The telemetry registers of one switch, read once.
#[derive(Debug, Default)]
pub struct RegisterSnapshot {
    arrays: BTreeMap<Register, Vec<u64>>,
}

/// Which ring a telemetry register belongs to (and so how many cells it has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Per (epoch, port).
    Port,
    /// Per (epoch, ingress port, egress port).
    Meter,
    /// Per (epoch, flow slot).
    Flow,
}

/// Registers the report is built from — those of the epoch telemetry modules, from the
/// generated register list (dataplane/src/hawkeye.rs is the one source of them).
pub fn telemetry_registers() -> impl Iterator<Item = (Register, Family)> {
    Register::ALL.into_iter().filter_map(|register| {
        let family = match register.module() {
            Module::PORT_TELEMETRY => Family::Port,
            Module::CAUSALITY_METER => Family::Meter,
            Module::FLOW_TELEMETRY => Family::Flow,
            _ => return None,
        };
        Some((register, family))
    })
}

/// The longest pause one PFC frame can ask for (the program's constant, IEEE 802.1Qbb): a
/// stored pause end further ahead than this is a stale value seen across the 32-bit wrap of
/// the ns clock, not a pause in force — the data plane applies the same bound.
pub const MAX_PAUSE_NS: u32 = dataplane::MAX_PAUSE_NS;

/// Port status at `now_ns` from the per-priority pause-end registers (`pause_end_p{q}`,
/// low 32 bits of the ns time the pause ends; HAWKEYE Fig. 3): a pause is in force while
/// its end lies ahead of now by at most [`MAX_PAUSE_NS`]; a pause that ended within the
/// `lookback_ns` before now (the epochs read) is reported as ended. A zero register was
/// never written. Returns the ports and what the read cost.
pub fn paused_ports(
    backend: &mut dyn SwitchBackend,
    geometry: &Geometry,
    now_ns: u64,
    lookback_ns: u64,
) -> Result<(Vec<PausedPort>, ReadCost), CollectError> {
    let ports = geometry.ports as usize;
    let now = now_ns as u32;
    let lookback = lookback_ns.min(u64::from(u32::MAX / 2)) as u32;
    let mut found: BTreeMap<u16, PausedPort> = BTreeMap::new();
    let mut cost = ReadCost::default();
    for (q, register) in Register::PAUSE_END.into_iter().enumerate() {
        let cells = backend.read_register(register)?;
        if cells.len() < ports {
            return Err(CollectError::Geometry {
                register,
                found: cells.len(),
                needed: ports,
            });
        }
        cost.registers += 1;
        cost.cells += cells.len();
        for (port, end) in cells.iter().take(ports).enumerate() {
            let end = *end as u32;
            if end == 0 {
                continue;
            }
            let ahead = end.wrapping_sub(now);
            let behind = now.wrapping_sub(end);
            let (in_force, until_ns) = if pause_in_force(end, now) {
                (true, now_ns + u64::from(ahead))
            } else if behind <= lookback && u64::from(behind) <= now_ns {
                (false, now_ns - u64::from(behind))
            } else {
                continue;
            };
            let entry = found.entry(port as u16).or_insert(PausedPort {
                port: port as u16,
                priorities: 0,
                in_force,
                until_ns,
            });
            entry.priorities |= 1 << q;
            entry.in_force |= in_force;
            entry.until_ns = entry.until_ns.max(until_ns);
        }
    }
    Ok((found.into_values().collect(), cost))
}

/// Why a snapshot could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A register is shorter than the geometry says.
    #[error("register {register} has {found} cells, the program variant needs {needed}")]
    Geometry {
        /// Register.
        register: Register,
        /// Cells found.
        found: usize,
        /// Cells needed.
        needed: usize,
    },
}

impl RegisterSnapshot {
    /// Reads every telemetry register (sync + bulk read each).
    pub fn read(
        backend: &mut dyn SwitchBackend,
        geometry: &Geometry,
    ) -> Result<(Self, ReadCost), CollectError> {
        let mut snapshot = RegisterSnapshot::default();
        let mut cost = ReadCost::default();
        let ports = geometry.ports as usize;
        let epochs = geometry.epochs as usize;
        for (register, family) in telemetry_registers() {
            let cells = backend.read_register(register)?;
            let needed = match family {
                Family::Port => epochs * ports,
                Family::Meter => epochs * ports * ports,
                Family::Flow => epochs * geometry.flow_slots as usize,
            };
            if cells.len() < needed {
                return Err(CollectError::Geometry {
                    register,
                    found: cells.len(),
                    needed,
                });
            }
            cost.registers += 1;
            cost.cells += cells.len();
            snapshot.arrays.insert(register, cells);
        }
        Ok((snapshot, cost))
    }

    fn get(&self, register: Register, index: usize) -> u64 {
        self.arrays
            .get(&register)
            .and_then(|cells| cells.get(index))
            .copied()
            .unwrap_or(0)
    }

    /// Epochs older than the ring window that a slot still holds whole, in epoch order,
    /// starting no earlier than `oldest_ns`.
    ///
    /// The window `current - epochs + 1 ..= current` covers every slot once. A slot that no
    /// packet touched in its window epoch still holds the cells of the last epoch that
    /// touched it, and the newest of those epochs is complete: any later touch would have
    /// reset the cell to a later id. A switch frozen behind a deadlock touches nothing, so
    /// its last busy epochs — what its buffers still hold — survive here after they left
    /// the window (HAWKEYE §3.3 resets a slot only on first touch in a new epoch). Port,
    /// meter and flow cells carry their own epoch ids; a slot counts only when all of them
    /// stopped at the same epoch. Older ids in the slot are partial (some cells were
    /// overwritten since) and are not reported.
    pub fn aged_epochs(
        &self,
        geometry: &Geometry,
        current: u64,
        oldest_ns: u64,
    ) -> Vec<EpochTelemetry> {
        let epochs = u64::from(geometry.epochs);
        let bits = geometry.epoch_bits();
        let ports = geometry.ports as usize;
        let flow_slots = geometry.flow_slots as usize;
        // (epoch-id register, content register, cells per slot) per family.
        let families: [(Register, Register, usize); 3] = [
            (Register::PORT_ENQ_EPOCH, Register::PORT_PACKETS, ports),
            (Register::METER_EPOCH, Register::METER_BYTES, ports * ports),
            (Register::FLOW_EPOCH, Register::FLOW_PACKETS, flow_slots),
        ];
        let mut found: Vec<u64> = Vec::new();
        'slots: for slot in 0..epochs {
            let back = (current.wrapping_sub(slot)) % epochs;
            let Some(window_epoch) = current.checked_sub(back) else {
                continue; // not yet reached since boot
            };
            let window_hi = window_epoch >> bits;
            // The newest epoch each family holds in this slot; a family touched in the
            // window epoch means the switch was not frozen there.
            let mut newest: [Option<u64>; 3] = [None; 3];
            for (family, (id_register, content_register, cells)) in families.iter().enumerate() {
                for cell in 0..*cells {
                    let index = slot as usize * cells + cell;
                    if self.get(*content_register, index) == 0 {
                        continue;
                    }
                    let id = self.get(*id_register, index) & EPOCH_ID_MASK;
                    let laps_back = (window_hi.wrapping_sub(id)) & EPOCH_ID_MASK;
                    if laps_back == 0 {
                        continue 'slots;
                    }
                    let Some(hi) = window_hi.checked_sub(laps_back) else {
                        continue;
                    };
                    let epoch = (hi << bits) | slot;
                    newest[family] = Some(newest[family].map_or(epoch, |n: u64| n.max(epoch)));
                }
            }
            // Only a slot the whole switch left alone since one epoch is that epoch, whole:
            // families that stopped at different epochs (flow cells are written as packets
            // leave, so a paused queue's enqueues reach the port cells only) would mix
            // epochs' halves.
            let mut held = newest.iter().flatten();
            let Some(epoch) = held.next().copied() else {
                continue;
            };
            if held.any(|e| *e != epoch) || (epoch << geometry.epoch_log2_ns) < oldest_ns {
                continue;
            }
            found.push(epoch);
        }
        found.sort_unstable();
        found
            .into_iter()
            .map(|epoch| self.epoch(geometry, epoch))
            .filter(|e| !(e.ports.is_empty() && e.meters.is_empty() && e.flows.is_empty()))
            .collect()
    }

    /// The epoch `epoch` (absolute number) as telemetry, empty slots dropped.
    pub fn epoch(&self, geometry: &Geometry, epoch: u64) -> EpochTelemetry {
        let (slot, id) = geometry.slot_and_id(epoch);
        let ports = geometry.ports as usize;
        let unit = geometry.qdepth_unit_bytes;
        let slot = slot as usize;
        let mut telemetry = EpochTelemetry {
            epoch_id: epoch,
            start_ns: epoch << geometry.epoch_log2_ns,
            lost_evictions: 0,
            ports: Vec::new(),
            meters: Vec::new(),
            flows: Vec::new(),
        };
        for port in 0..ports {
            let index = slot * ports + port;
            // Packet counts are taken at enqueue (ingress), queue-depth sums when the
            // packets leave (egress); each half has its own epoch id. Packets still queued
            // (e.g. behind a PAUSE) are counted without a depth yet.
            if self.get(Register::PORT_ENQ_EPOCH, index) != id
                || self.get(Register::PORT_PACKETS, index) == 0
            {
                continue;
            }
            let departed = self.get(Register::PORT_EPOCH, index) == id;
            let depth = |register: Register| {
                if departed {
                    self.get(register, index) * unit
                } else {
                    0
                }
            };
            telemetry.ports.push(PortRecord {
                port: port as u16,
                packet_count: self.get(Register::PORT_PACKETS, index) as u32,
                paused_packet_count: self.get(Register::PORT_PAUSED_PACKETS, index) as u32,
                queue_depth_sum_bytes: depth(Register::PORT_QDEPTH_SUM),
                unpaused_queue_depth_sum_bytes: depth(Register::PORT_UNPAUSED_QDEPTH_SUM),
                xon_count: 0,
            });
        }
        // XONs the port received in the epoch (lo = epoch id, hi = count), with or
        // without packets enqueued there.
        for port in 0..ports {
            let cell = self.get(Register::PORT_XON, slot * ports + port);
            let xons = (cell >> 32).min(u64::from(u16::MAX)) as u16;
            if cell & EPOCH_ID_MASK != id || xons == 0 {
                continue;
            }
            match telemetry.ports.iter_mut().find(|r| r.port == port as u16) {
                Some(record) => record.xon_count = xons,
                None => telemetry.ports.push(PortRecord {
                    port: port as u16,
                    packet_count: 0,
                    paused_packet_count: 0,
                    queue_depth_sum_bytes: 0,
                    unpaused_queue_depth_sum_bytes: 0,
                    xon_count: xons,
                }),
            }
        }
        telemetry.ports.sort_by_key(|r| r.port);
        for ingress in 0..ports {
            for egress in 0..ports {
                let index = slot * ports * ports + ingress * ports + egress;
                let bytes = self.get(Register::METER_BYTES, index);
                if self.get(Register::METER_EPOCH, index) != id || bytes == 0 {
                    continue;
                }
                telemetry.meters.push(MeterRecord {
                    ingress_port: ingress as u16,
                    egress_port: egress as u16,
                    bytes,
                });
            }
        }
        let slots = geometry.flow_slots as usize;
        for flow_slot in 0..slots {
            let index = slot * slots + flow_slot;
            let packets = self.get(Register::FLOW_PACKETS, index);
            let src = self.get(Register::FLOW_KEY_SRC, index) as u32;
            if self.get(Register::FLOW_EPOCH, index) != id || packets == 0 || src == 0 {
                continue;
            }
            let ports_word = self.get(Register::FLOW_KEY_PORTS, index) as u32;
            telemetry.flows.push(FlowRecord {
                flow: FiveTuple {
                    src_ip: src.to_be_bytes(),
                    dst_ip: (self.get(Register::FLOW_KEY_DST, index) as u32).to_be_bytes(),
                    src_port: (ports_word >> 16) as u16,
                    dst_port: ports_word as u16,
                    protocol: IP_PROTOCOL_UDP,
                },
                egress_port: self.get(Register::FLOW_EGRESS_PORT, index) as u16,
                packet_count: packets as u32,
                paused_packet_count: self.get(Register::FLOW_PAUSED_PACKETS, index) as u32,
                queue_depth_sum_bytes: self.get(Register::FLOW_UNPAUSED_QDEPTH_SUM, index) * unit,
                first_enqueue_offset_ns: self.get(Register::FLOW_FIRST_OFFSET, index) as u32,
                last_enqueue_offset_ns: self.get(Register::FLOW_LAST_OFFSET, index) as u32,
                evicted: false,
            });
        }
        telemetry
    }
}

/// A flow the data plane evicted from its slot (HAWKEYE §3.3), from an eviction CPU copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// Stored epoch id of the evicted entry.
    pub epoch_id: u16,
    /// Ring slot of the evicted entry.
    pub epoch_index: u8,
    /// The evicted record.
    pub record: FlowRecord,
}

impl Eviction {
    /// Parses the eviction report at the front of an eviction CPU copy (`None` when it is
    /// too short); `unit` is the bytes per queue-depth unit.
    pub fn parse(bytes: &[u8], unit: u64) -> Option<Eviction> {
        let h = EvictionHeader::new_checked(bytes)?;
        Some(Eviction {
            epoch_id: h.epoch_id.get(),
            epoch_index: h.epoch_index,
            record: FlowRecord {
                flow: FiveTuple {
                    src_ip: h.src_addr.get().to_be_bytes(),
                    dst_ip: h.dst_addr.get().to_be_bytes(),
                    src_port: h.src_port.get(),
                    dst_port: h.dst_port.get(),
                    protocol: IP_PROTOCOL_UDP,
                },
                egress_port: h.egress_port.get(),
                packet_count: h.packets.get(),
                paused_packet_count: h.paused_packets.get(),
                queue_depth_sum_bytes: u64::from(h.unpaused_qdepth_sum.get()) * unit,
                first_enqueue_offset_ns: h.first_offset_ns.get(),
                last_enqueue_offset_ns: h.last_offset_ns.get(),
                evicted: true,
            },
        })
    }

    /// Whether it belongs to absolute epoch `epoch`.
    pub fn belongs_to(&self, geometry: &Geometry, epoch: u64) -> bool {
        let (slot, id) = geometry.slot_and_id(epoch);
        u64::from(self.epoch_index) == slot && u64::from(self.epoch_id) == id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuFrame;
    use hawkmesh_wire::control::TableEntry;
    use hawkmesh_wire::dataplane::Table;

    /// Pause-end registers only; everything else is refused.
    struct PauseRegisters(BTreeMap<Register, Vec<u64>>);

    impl SwitchBackend for PauseRegisters {
        fn read_register(&mut self, register: Register) -> Result<Vec<u64>, BackendError> {
            self.0
                .get(&register)
                .cloned()
                .ok_or(BackendError::UnknownRegister(register))
        }
        fn reset_register(&mut self, register: Register) -> Result<(), BackendError> {
            Err(BackendError::UnknownRegister(register))
        }
        fn add_table_entry(&mut self, table: Table, _: TableEntry) -> Result<(), BackendError> {
            Err(BackendError::UnknownTable(table))
        }
        fn set_multicast_group(&mut self, group: u16, _: Vec<u16>) -> Result<(), BackendError> {
            Err(BackendError::Unreachable(format!("group {group}")))
        }
        fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError> {
            Ok(Vec::new())
        }
        fn port_counters(
            &mut self,
            port: u16,
        ) -> Result<crate::backend::PortCounters, BackendError> {
            Err(BackendError::NotAvailable(format!("port {port}")))
        }
    }

    fn geometry() -> Geometry {
        Geometry {
            ports: 8,
            ..Geometry::default_variant()
        }
    }

    #[test]
    fn aged_epochs_are_the_newest_intact_epoch_of_slots_untouched_in_the_window() {
        // 2 ports, 4 epochs, 2 flow slots; the window is epochs 997..=1000.
        let geometry = Geometry {
            ports: 2,
            epochs: 4,
            flow_slots: 2,
            ..Geometry::default_variant()
        };
        let id = |epoch: u64| geometry.slot_and_id(epoch).1;
        let mut snapshot = RegisterSnapshot::default();
        let mut set = |register: Register, index: usize, value: u64| {
            let cells = snapshot
                .arrays
                .entry(register)
                .or_insert_with(|| vec![0; 64]);
            cells[index] = value;
        };
        // Slot 1 (window epoch 997) froze after epoch 993: port 0 and the meter row 1 → 0
        // were last touched then; port 1 last in 989 (overwritten since in other cells'
        // terms: a partial, older epoch).
        set(Register::PORT_ENQ_EPOCH, 2, id(993));
        set(Register::PORT_EPOCH, 2, id(993));
        set(Register::PORT_PACKETS, 2, 5);
        set(Register::PORT_PAUSED_PACKETS, 2, 5);
        set(Register::PORT_ENQ_EPOCH, 3, id(989));
        set(Register::PORT_PACKETS, 3, 7);
        set(Register::METER_EPOCH, 4 + 2, id(993));
        set(Register::METER_BYTES, 4 + 2, 5000);
        // Slot 2 (window epoch 998) was touched in the window on port 0: port 1's older
        // cell is not reported.
        set(Register::PORT_ENQ_EPOCH, 4, id(998));
        set(Register::PORT_PACKETS, 4, 1);
        set(Register::PORT_ENQ_EPOCH, 5, id(994));
        set(Register::PORT_PACKETS, 5, 9);
        // Slot 0 (window epoch 1000): packets were enqueued in 996 and held there (port
        // cells), the last ones left in 992 (flow cells): halves of two epochs, not one.
        set(Register::PORT_ENQ_EPOCH, 0, id(996));
        set(Register::PORT_PACKETS, 0, 4);
        set(Register::FLOW_EPOCH, 1, id(992));
        set(Register::FLOW_PACKETS, 1, 3);
        set(Register::FLOW_KEY_SRC, 1, 0x0B00_0001);
        // Slot 3 (window epoch 999) last touched in 983, 4.5 ms before the poll.
        set(Register::PORT_ENQ_EPOCH, 7, id(983));
        set(Register::PORT_PACKETS, 7, 2);

        let epoch_start = |e: u64| e << geometry.epoch_log2_ns;
        let aged = snapshot.aged_epochs(&geometry, 1000, epoch_start(990));
        assert_eq!(aged.len(), 1, "{aged:?}");
        assert_eq!(aged[0].epoch_id, 993);
        assert_eq!(aged[0].start_ns, epoch_start(993));
        assert_eq!(aged[0].ports.len(), 1);
        assert_eq!(aged[0].ports[0].port, 0);
        assert_eq!(aged[0].ports[0].packet_count, 5);
        assert_eq!(aged[0].ports[0].paused_packet_count, 5);
        assert_eq!(
            aged[0].meters,
            vec![MeterRecord {
                ingress_port: 1,
                egress_port: 0,
                bytes: 5000
            }]
        );
        // With a longer lookback slot 3's last epoch comes too, in epoch order.
        let aged = snapshot.aged_epochs(&geometry, 1000, 0);
        let ids: Vec<u64> = aged.iter().map(|e| e.epoch_id).collect();
        assert_eq!(ids, vec![983, 993]);
        // The window epochs themselves are not aged: read in 1001, slot 1 is in the window
        // (epoch 1001) and untouched there, so 993 is still aged; slot 2 stays touched.
        let aged = snapshot.aged_epochs(&geometry, 1001, epoch_start(990));
        let ids: Vec<u64> = aged.iter().map(|e| e.epoch_id).collect();
        assert_eq!(ids, vec![993]);
    }

    #[test]
    fn port_status_tells_pauses_in_force_from_ended_stale_and_never_written() {
        // Now: 5 s after boot, past the 32-bit wrap of the ns clock (4.29 s).
        let now: u64 = 5_000_000_000;
        let lo = |t: u64| u64::from(t as u32);
        let mut registers: BTreeMap<Register, Vec<u64>> = Register::PAUSE_END
            .into_iter()
            .map(|register| (register, vec![0; 8]))
            .collect();
        let p3 = registers.get_mut(&Register::PAUSE_END_P3).unwrap();
        p3[1] = lo(now + 200_000); // in force for 200 µs more
        p3[2] = lo(now - 300_000); // ended 300 µs ago, inside the lookback
        p3[4] = lo(now - 3_000_000_000); // ended 3 s ago: beyond 2^31 ns it looks "ahead"
        p3[5] = lo(now + 10_000_000); // 10 ms ahead: no PFC frame pauses that long
        registers.get_mut(&Register::PAUSE_END_P5).unwrap()[1] = lo(now + 50_000);
        let mut backend = PauseRegisters(registers);
        let (paused, cost) = paused_ports(&mut backend, &geometry(), now, 1_048_576).unwrap();
        assert_eq!(cost.registers, 8);
        assert_eq!(
            paused,
            vec![
                PausedPort {
                    port: 1,
                    priorities: (1 << 3) | (1 << 5),
                    in_force: true,
                    until_ns: now + 200_000,
                },
                PausedPort {
                    port: 2,
                    priorities: 1 << 3,
                    in_force: false,
                    until_ns: now - 300_000,
                },
            ]
        );
        // A short register is a geometry error naming it.
        let mut short = PauseRegisters(
            Register::PAUSE_END
                .into_iter()
                .map(|register| (register, vec![0; 4]))
                .collect(),
        );
        assert!(matches!(
            paused_ports(&mut short, &geometry(), now, 1_048_576),
            Err(CollectError::Geometry {
                register: Register::PAUSE_END_P0,
                found: 4,
                needed: 8
            })
        ));
    }
}
