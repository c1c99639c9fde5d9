//! Switch handlers: ingress pipeline hook, ECMP routing, ingress admission (HPCC SwitchMmu
//! accounting), PFC generation and refresh, egress enqueue, dequeue scheduling (strict
//! control priority, then RR/DWRR), ECN marking and the egress pipeline hook.

use super::{CpuPacket, Owner, PfcEvent, Port, Simulation};
use crate::event::EventKind;
use crate::hooks::{EgressActions, EgressMeta, IngressActions, IngressMeta};
use crate::packet::{FiveTuple, Packet, PacketKind, ECN_CE, ECN_NOT_ECT};
use crate::routing::ecmp_hash;
use crate::scenario::Scheduler;
use crate::time::{Time, NS};
use hawkmesh_wire::pfc::{pause_duration_ps, PFC_FRAME_BYTES};
use hawkmesh_wire::topology::PortNo;

impl Simulation {
    pub(super) fn run_ingress_hook(
        &mut self,
        s: u32,
        port: u32,
        id: u32,
        routed: Option<PortNo>,
    ) -> IngressActions {
        let mut actions = IngressActions::default();
        if let Some(pipeline) = self.pipelines[s as usize].as_mut() {
            let meta = IngressMeta {
                switch: self.switches[s as usize].node,
                ingress_port: self.ports[port as usize].local,
                ingress_tstamp_ns: (self.now / NS) & 0xFFFF_FFFF_FFFF,
                routed_egress_port: routed,
                packet_bytes: self.packets.get(id).size,
            };
            pipeline.ingress(&meta, self.packets.get_mut(id), &mut actions);
        }
        actions
    }

    fn route(&self, s: u32, id: u32) -> Option<PortNo> {
        let packet = self.packets.get(id);
        let hops = self.routes.next_hops(s, packet.dst_nic);
        match hops.len() {
            0 => None,
            1 => Some(hops[0]),
            _ => Some(self.ecmp_pick(s, hops, &packet.tuple)),
        }
    }

    /// The next hop switch `s` picks for `tuple` among several equal-cost `hops`: the ECMP
    /// hash, unless an injected imbalance pins the flow to its favoured port. Forwarding and
    /// path tracing ([`Simulation::path_ports`]) both ask here, so a traced path is the
    /// path packets take.
    pub(crate) fn ecmp_pick(&self, s: u32, hops: &[PortNo], t: &FiveTuple) -> PortNo {
        let sw = &self.switches[s as usize];
        if let Some((favoured, fraction)) = sw.imbalance {
            if hops.contains(&favoured) {
                let draw = ecmp_hash(t.dst_ip, t.src_ip, t.dst_port, t.src_port, !sw.ecmp_seed);
                if (draw as f64) < fraction * (u32::MAX as f64) {
                    return favoured;
                }
            }
        }
        let hash = ecmp_hash(t.src_ip, t.dst_ip, t.src_port, t.dst_port, sw.ecmp_seed);
        hops[hash as usize % hops.len()]
    }

    pub(super) fn switch_receive(&mut self, s: u32, port: u32, id: u32) {
        let first = self.switches[s as usize].first_port;
        {
            let packet = self.packets.get_mut(id);
            packet.in_port = port;
            packet.bridge = [0; 2];
            if packet.ttl <= 1 {
                self.ports[port as usize].counters.drops_ttl += 1;
                self.packets.free(id);
                return;
            }
            packet.ttl -= 1;
        }
        // Packets from a pipeline or CPU may name no (or no existing) destination NIC.
        let routed = if self.packets.get(id).dst_nic as usize >= self.nics.len() {
            None
        } else {
            self.route(s, id)
        };
        let mut actions = self.run_ingress_hook(s, port, id, routed);
        if actions.to_cpu {
            self.cpu_inbox.push(CpuPacket {
                time: self.now,
                switch: self.switches[s as usize].node,
                ingress_port: self.ports[port as usize].local,
                egress_port: actions.egress_override.or(routed),
                packet: self.packets.get(id).clone(),
                payload: actions.cpu_payload.take(),
            });
        }
        let port_count = self.switches[s as usize].port_count;
        if !actions.multicast.is_empty() {
            for out in actions.multicast.iter() {
                if (out as u32) < port_count {
                    let copy = self.packets.get(id).clone();
                    let copy_id = self.packets.alloc(copy);
                    self.admit_and_enqueue(s, port, first + out as u32, copy_id);
                }
            }
        }
        if actions.drop {
            self.ports[port as usize].counters.drops_pipeline += 1;
            self.packets.free(id);
            return;
        }
        if !actions.multicast.is_empty() && actions.egress_override.is_none() {
            // Replication replaced unicast.
            self.packets.free(id);
            return;
        }
        match actions.egress_override.or(routed) {
            Some(out) if (out as u32) < port_count => {
                self.admit_and_enqueue(s, port, first + out as u32, id)
            }
            _ => {
                self.ports[port as usize].counters.drops_no_route += 1;
                self.packets.free(id);
            }
        }
    }

    fn pfc_threshold(&self, s: u32, in_port: u32) -> u64 {
        let sw = &self.switches[s as usize];
        let free = sw
            .buffer
            .saturating_sub(sw.total_headroom + sw.total_reserve + sw.shared_used);
        free >> self.ports[in_port as usize].pfc_shift
    }

    fn shared_used(&self, in_port: u32, prio: usize) -> u64 {
        self.ports[in_port as usize].ingress_bytes[prio].saturating_sub(self.p.reserve)
    }

    /// Ingress admission (HPCC SwitchMmu semantics) and enqueue at the egress port.
    fn admit_and_enqueue(&mut self, s: u32, in_port: u32, out_port: u32, id: u32) {
        let (prio, size) = {
            let packet = self.packets.get(id);
            (packet.priority as usize, packet.size as u64)
        };
        if prio != self.p.control_priority as usize {
            let threshold = self.pfc_threshold(s, in_port);
            let shared = self.shared_used(in_port, prio);
            let reserve = self.p.reserve;
            let p = &self.ports[in_port as usize];
            let admit = if self.p.pfc_enabled {
                !(size + p.headroom_used[prio] > p.headroom && size + shared > threshold)
            } else {
                p.ingress_bytes[prio] + size <= reserve || size + shared <= threshold
            };
            if !admit {
                self.ports[in_port as usize].counters.drops_buffer += 1;
                self.packets.free(id);
                return;
            }
            let p = &mut self.ports[in_port as usize];
            let new_bytes = p.ingress_bytes[prio] + size;
            if new_bytes <= reserve {
                p.ingress_bytes[prio] += size;
            } else if self.p.pfc_enabled && new_bytes - reserve > threshold {
                p.headroom_used[prio] += size;
            } else {
                p.ingress_bytes[prio] += size;
                self.switches[s as usize].shared_used += size.min(new_bytes - reserve);
            }
            let out_local = self.ports[out_port as usize].local as usize;
            if let Some(held) = self.ports[in_port as usize].ingress_to.get_mut(out_local) {
                *held += size;
            }
            self.check_pause(s, in_port, prio);
        }
        self.enqueue_egress(out_port, id);
    }

    pub(super) fn enqueue_egress(&mut self, out_port: u32, id: u32) {
        let now = self.now;
        let p = &mut self.ports[out_port as usize];
        let packet = self.packets.get_mut(id);
        let prio = packet.priority as usize & 7;
        packet.enq_time = now;
        packet.enq_qdepth = p.queue_bytes[prio].min(u32::MAX as u64) as u32;
        p.queue_bytes[prio] += packet.size as u64;
        p.queued_total += 1;
        p.queues[prio].push_back(id);
        if let Some(flow) = self.flows.get(packet.flow as usize) {
            let size = u64::from(packet.size);
            match p
                .workload_bytes
                .iter_mut()
                .find(|(w, _)| *w == flow.workload)
            {
                Some((_, b)) => *b += size,
                None => p.workload_bytes.push((flow.workload, size)),
            }
        }
        let total: u64 = p.queue_bytes.iter().sum();
        if total > p.counters.max_queue_bytes {
            p.counters.max_queue_bytes = total;
        }
        if !self.watched_workloads.is_empty() {
            self.track_incast_queue(out_port, id, true);
        }
        self.kick(out_port);
    }

    fn check_pause(&mut self, s: u32, in_port: u32, prio: usize) {
        if !self.p.pfc_enabled {
            return;
        }
        let threshold = self.pfc_threshold(s, in_port);
        let shared = self.shared_used(in_port, prio);
        let p = &self.ports[in_port as usize];
        if !p.xoff_sent[prio] && (p.headroom_used[prio] > 0 || shared >= threshold) {
            self.send_xoff(in_port, prio as u8);
        }
    }

    fn should_resume_switch(&self, s: u32, in_port: u32, prio: usize) -> bool {
        let p = &self.ports[in_port as usize];
        if !p.xoff_sent[prio] || p.headroom_used[prio] > 0 {
            return false;
        }
        let shared = self.shared_used(in_port, prio);
        shared == 0 || shared + self.p.resume_offset <= self.pfc_threshold(s, in_port)
    }

    fn make_pfc(&mut self, port: u32, prio: u8, quanta: u16) -> u32 {
        let mut packet = Packet::new(PacketKind::Pfc);
        packet.priority = prio;
        packet.size = PFC_FRAME_BYTES as u32 + self.p.wire_overhead;
        packet.pfc_vector = 1 << prio;
        packet.pfc_quanta[prio as usize] = quanta;
        let p = &mut self.ports[port as usize];
        p.counters.pause_frames_sent[prio as usize] += 1;
        // The ground truth needs every PFC frame (XOFFs for the spreading tree, XONs for
        // when its pauses ended) even when events are not exported.
        let cause = if quanta > 0 {
            p.ingress_to
                .iter()
                .enumerate()
                .filter(|(_, held)| **held > 0)
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                .map(|(local, _)| local as PortNo)
        } else {
            None
        };
        let (node, local) = (p.node, p.local);
        let cause_workload = match (cause, p.owner) {
            (Some(out_local), Owner::Switch(s)) => self.queue_majority_workload(
                self.switches[s as usize].first_port + u32::from(out_local),
            ),
            _ => None,
        };
        self.pfc_log.push(PfcEvent {
            time_ns: self.now / NS,
            node,
            port: local,
            priority: prio,
            quanta,
            cause,
            cause_workload,
        });
        self.packets.alloc(packet)
    }

    /// Ground truth: counts a packet of a watched incast in (or out of) egress `port`'s queue
    /// and keeps the incast's peak there (which ports the incast itself made queue).
    fn track_incast_queue(&mut self, port: u32, id: u32, enqueued: bool) {
        let packet = self.packets.get(id);
        if packet.kind != crate::packet::PacketKind::Data {
            return;
        }
        let size = u64::from(packet.size);
        let Some(flow) = self.flows.get(packet.flow as usize) else {
            return;
        };
        let workload = flow.workload;
        if !self
            .watched_workloads
            .get(workload)
            .copied()
            .unwrap_or(false)
        {
            return;
        }
        let Some(list) = self.incast_queues.get_mut(port as usize) else {
            return;
        };
        let at = match list.iter().position(|(w, _, _)| *w as usize == workload) {
            Some(at) => at,
            None => {
                list.push((workload as u32, 0, 0));
                list.len() - 1
            }
        };
        let entry = &mut list[at];
        if enqueued {
            entry.1 += size;
            entry.2 = entry.2.max(entry.1);
        } else {
            entry.1 = entry.1.saturating_sub(size);
        }
    }

    /// The workload owning more than half of the bytes queued (all priorities) at egress
    /// `port`, if one does. Ground truth only: runs once per XOFF.
    fn queue_majority_workload(&self, port: u32) -> Option<u32> {
        let p = self.ports.get(port as usize)?;
        let total: u64 = p.queue_bytes.iter().sum();
        p.workload_bytes
            .iter()
            .find(|(_, b)| *b * 2 > total)
            .map(|(w, _)| *w as u32)
    }

    fn pause_refresh_interval(&self, port: u32) -> Time {
        self.p.pause_refresh.unwrap_or_else(|| {
            (pause_duration_ps(self.p.pause_quanta, self.ports[port as usize].bps) / 2).max(NS)
        })
    }

    /// Sends XOFF for `prio` out of `port` (toward the upstream sender) and arms the refresh.
    pub(crate) fn send_xoff(&mut self, port: u32, prio: u8) {
        let id = self.make_pfc(port, prio, self.p.pause_quanta);
        let refresh = self.pause_refresh_interval(port);
        let p = &mut self.ports[port as usize];
        p.xoff_sent[prio as usize] = true;
        p.pfc_generation[prio as usize] = p.pfc_generation[prio as usize].wrapping_add(1);
        let generation = p.pfc_generation[prio as usize];
        p.mac_control.push_back(id);
        self.events.schedule(
            self.now + refresh,
            EventKind::PfcRefresh {
                port,
                priority: prio,
                generation,
            },
        );
        self.kick(port);
    }

    pub(super) fn send_xon(&mut self, port: u32, prio: u8) {
        let id = self.make_pfc(port, prio, 0);
        let p = &mut self.ports[port as usize];
        p.xoff_sent[prio as usize] = false;
        p.pfc_generation[prio as usize] = p.pfc_generation[prio as usize].wrapping_add(1);
        p.mac_control.push_back(id);
        self.kick(port);
    }

    pub(super) fn on_pfc_refresh(&mut self, port: u32, prio: u8, generation: u32) {
        let p = &self.ports[port as usize];
        if p.pfc_generation[prio as usize] != generation || !p.xoff_sent[prio as usize] {
            return;
        }
        match p.owner {
            Owner::Switch(s) => {
                if self.should_resume_switch(s, port, prio as usize) {
                    self.send_xon(port, prio);
                } else {
                    self.send_xoff(port, prio);
                }
            }
            Owner::Nic(n) => {
                let nic = &self.nics[n as usize];
                let injecting = self.now < nic.inject_until && nic.inject_priority == prio;
                let congested = nic.rx_xoff && nic.rx_buffer > self.p.rx_xon;
                if injecting || congested {
                    self.send_xoff(port, prio);
                } else if nic.rx_xoff {
                    self.nics[n as usize].rx_xoff = false;
                    self.send_xon(port, prio);
                } else {
                    // A storm that ended simply stops refreshing; the pause expires.
                    self.ports[port as usize].xoff_sent[prio as usize] = false;
                }
            }
        }
    }

    pub(super) fn switch_dequeue(&mut self, port: u32) -> Option<u32> {
        let now = self.now;
        let ctrl = self.p.control_priority as usize;
        loop {
            let p = &mut self.ports[port as usize];
            let prio = if !p.queues[ctrl].is_empty() {
                ctrl
            } else {
                match self.p.scheduler {
                    Scheduler::Rr => {
                        let mut chosen = None;
                        for i in 0..8 {
                            let q = (p.rr_next as usize + i) & 7;
                            if q != ctrl && !p.queues[q].is_empty() && p.paused_until[q] <= now {
                                chosen = Some(q);
                                break;
                            }
                        }
                        let q = chosen?;
                        p.rr_next = ((q + 1) & 7) as u8;
                        q
                    }
                    Scheduler::Dwrr => {
                        let eligible = |p: &Port, q: usize| {
                            q != ctrl && !p.queues[q].is_empty() && p.paused_until[q] <= now
                        };
                        if !(0..8).any(|q| eligible(p, q)) {
                            return None;
                        }
                        let mut chosen = None;
                        for _ in 0..64 * 8 {
                            let q = p.rr_next as usize & 7;
                            if eligible(p, q) {
                                let head = self.packets.get(p.queues[q][0]).size as u64;
                                if p.dwrr_deficit[q] >= head {
                                    p.dwrr_deficit[q] -= head;
                                    chosen = Some(q);
                                    break;
                                }
                                p.dwrr_deficit[q] += self.p.dwrr_quantum[q];
                            } else if p.queues[q].is_empty() {
                                p.dwrr_deficit[q] = 0;
                            }
                            if chosen.is_none() {
                                p.rr_next = ((q + 1) & 7) as u8;
                            }
                        }
                        chosen?
                    }
                }
            };
            let id = p.queues[prio].pop_front()?;
            let size = self.packets.get(id).size as u64;
            p.queue_bytes[prio] -= size;
            p.queued_total -= 1;
            if let Some(flow) = self.flows.get(self.packets.get(id).flow as usize) {
                if let Some((_, b)) = p
                    .workload_bytes
                    .iter_mut()
                    .find(|(w, _)| *w == flow.workload)
                {
                    *b -= size;
                }
            }
            if p.queues[prio].is_empty() {
                p.dwrr_deficit[prio] = 0;
            }
            if !self.watched_workloads.is_empty() {
                self.track_incast_queue(port, id, false);
            }
            let in_port = self.packets.get(id).in_port;
            if prio != ctrl && in_port != u32::MAX {
                let out_local = self.ports[port as usize].local as usize;
                self.release_ingress(in_port, out_local, prio, size);
            }
            // ECN marking at dequeue on the instantaneous queue (after removal, as the
            // reference does), linear between Kmin and Kmax up to Pmax.
            if prio != ctrl && self.p.ecn_enabled && self.packets.get(id).ecn != ECN_NOT_ECT {
                let p = &self.ports[port as usize];
                let queued = p.queue_bytes[prio];
                let mark = if queued > p.kmax {
                    true
                } else if queued > p.kmin {
                    let prob = p.pmax * (queued - p.kmin) as f64 / (p.kmax - p.kmin).max(1) as f64;
                    self.rng.next_f64() < prob
                } else {
                    false
                };
                if mark {
                    self.packets.get_mut(id).ecn = ECN_CE;
                    self.ports[port as usize].counters.ecn_marked += 1;
                }
            }
            let Owner::Switch(s) = self.ports[port as usize].owner else {
                return Some(id);
            };
            if self.pipelines[s as usize].is_none() {
                return Some(id);
            }
            let mut actions = EgressActions::default();
            let (meta, ingress_local) = {
                let packet = self.packets.get(id);
                let ingress_local = if packet.in_port == u32::MAX {
                    PortNo::MAX
                } else {
                    self.ports[packet.in_port as usize].local
                };
                (
                    EgressMeta {
                        switch: self.switches[s as usize].node,
                        ingress_port: ingress_local,
                        egress_port: self.ports[port as usize].local,
                        priority: prio as u8,
                        enq_tstamp_ns: (packet.enq_time / NS) & 0xFFFF_FFFF_FFFF,
                        enq_qdepth_bytes: packet.enq_qdepth,
                        deq_timedelta_ns: (now - packet.enq_time) / NS,
                    },
                    ingress_local,
                )
            };
            if let Some(pipeline) = self.pipelines[s as usize].as_mut() {
                pipeline.egress(&meta, self.packets.get_mut(id), &mut actions);
            }
            if actions.to_cpu {
                self.cpu_inbox.push(CpuPacket {
                    time: now,
                    switch: meta.switch,
                    ingress_port: ingress_local,
                    egress_port: Some(meta.egress_port),
                    packet: self.packets.get(id).clone(),
                    payload: actions.cpu_payload.take(),
                });
            }
            if actions.drop {
                self.ports[port as usize].counters.drops_pipeline += 1;
                self.packets.free(id);
                continue;
            }
            return Some(id);
        }
    }

    fn release_ingress(&mut self, in_port: u32, out_local: usize, prio: usize, size: u64) {
        let reserve = self.p.reserve;
        let Owner::Switch(s) = self.ports[in_port as usize].owner else {
            return;
        };
        let p = &mut self.ports[in_port as usize];
        if let Some(held) = p.ingress_to.get_mut(out_local) {
            *held = held.saturating_sub(size);
        }
        let from_headroom = p.headroom_used[prio].min(size);
        let from_shared = (size - from_headroom).min(p.ingress_bytes[prio].saturating_sub(reserve));
        p.headroom_used[prio] -= from_headroom;
        p.ingress_bytes[prio] = p.ingress_bytes[prio].saturating_sub(size - from_headroom);
        self.switches[s as usize].shared_used -= from_shared;
        if self.should_resume_switch(s, in_port, prio) {
            self.send_xon(in_port, prio as u8);
        }
    }
}
