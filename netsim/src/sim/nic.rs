//! NIC handlers. Transmit side: ready-QP rings, data packets, DCQCN rate pacing and its
//! timers, go-back-N retransmission timeout, stall checks. Receive side: the slow-receiver
//! buffer, ACK/NACK generation, CNPs, DCQCN reactions, host-hook packets, flow completion
//! and round scheduling.

use super::{Owner, SendState, Simulation};
use crate::dcqcn::DcqcnEffect;
use crate::event::EventKind;
use crate::hooks::{HostEmit, RttSample};
use crate::packet::{
    FiveTuple, Packet, PacketKind, CUSTOM_CAPACITY, CUSTOM_OVERHEAD, ECN_CE, ECN_ECT0,
    ROCE_ACK_BYTES, ROCE_CNP_BYTES, ROCE_DATA_OVERHEAD,
};
use crate::scenario::CongestionControl;
use crate::time::{serialization, Time};
use hawkmesh_wire::topology::NodeId;

impl Simulation {
    // ----------------------------------------------------------------------------------
    // Transmit side
    // ----------------------------------------------------------------------------------

    pub(super) fn nic_dequeue(&mut self, n: u32) -> Option<u32> {
        let now = self.now;
        let port = self.nics[n as usize].port;
        let ctrl = self.p.control_priority as usize;
        if self.ports[port as usize].paused_until[ctrl] <= now {
            if let Some(id) = self.nics[n as usize].control.pop_front() {
                return Some(id);
            }
        }
        loop {
            let nic = &mut self.nics[n as usize];
            let p = &self.ports[port as usize];
            let mut chosen = None;
            for i in 0..8 {
                let q = (nic.rr_next as usize + i) & 7;
                if !nic.ready[q].is_empty() && p.paused_until[q] <= now {
                    chosen = Some(q);
                    break;
                }
            }
            let prio = chosen?;
            nic.rr_next = ((prio + 1) & 7) as u8;
            let flow = nic.ready[prio].pop_front()?;
            let f = &mut self.flows[flow as usize];
            if f.finished_at.is_some() || f.snd_nxt >= f.size {
                f.send_state = SendState::Idle;
                continue;
            }
            return Some(self.build_data_packet(flow));
        }
    }

    fn build_data_packet(&mut self, flow: u32) -> u32 {
        let now = self.now;
        let mtu = self.p.mtu as u64;
        let overhead = ROCE_DATA_OVERHEAD + self.p.wire_overhead;
        let f = &mut self.flows[flow as usize];
        let payload = (f.size - f.snd_nxt).min(mtu) as u32;
        let mut packet = Packet::new(PacketKind::Data);
        packet.priority = f.priority;
        packet.dscp = crate::packet::dscp_for_priority(f.priority);
        packet.ecn = ECN_ECT0;
        packet.src_nic = f.src_nic;
        packet.dst_nic = f.dst_nic;
        packet.tuple = f.tuple;
        packet.flow = flow;
        packet.seq = f.snd_nxt;
        packet.payload = payload;
        packet.size = payload + overhead;
        packet.sent_at = now;
        if f.snd_nxt < f.max_sent {
            f.retransmitted_bytes += payload as u64;
        }
        f.snd_nxt += payload as u64;
        f.max_sent = f.max_sent.max(f.snd_nxt);
        // Rate pacing from the start of this packet (reference: UpdateNextAvail).
        let rate = if f.cc && self.p.cc == CongestionControl::Dcqcn {
            f.dcqcn.rate
        } else {
            f.line_rate
        };
        let gap = (packet.size as f64 * 8e12 / rate) as Time;
        f.next_avail = now + gap;
        f.last_packet_bytes = packet.size;
        let line_gap = (packet.size as f64 * 8e12 / f.line_rate) as Time;
        let more = f.snd_nxt < f.size;
        let prio = f.priority as usize;
        let src_nic = f.src_nic;
        if !f.rto_pending {
            f.rto_pending = true;
            f.last_progress = f.last_progress.max(now);
            self.events
                .schedule(now + self.p.rto, EventKind::RetransmitTimer { flow });
        }
        if let Some(interval) = self.stall_interval {
            if !f.stall_pending {
                f.stall_pending = true;
                self.events
                    .schedule(now + interval, EventKind::StallCheck { flow });
            }
        }
        let f = &mut self.flows[flow as usize];
        if more {
            if f.next_avail <= now + line_gap {
                f.send_state = SendState::InRing;
                self.nics[src_nic as usize].ready[prio].push_back(flow);
            } else {
                self.wait_for_pacing(flow);
            }
        } else {
            f.send_state = SendState::Idle;
        }
        let f = &mut self.flows[flow as usize];
        if f.cc && self.p.cc == CongestionControl::Dcqcn {
            let line = f.line_rate;
            let old = f.dcqcn.rate;
            if f.dcqcn
                .on_bytes_sent(packet.size as u64, line, &self.p.dcqcn)
            {
                self.rate_increased(flow, old);
            }
        }
        self.packets.alloc(packet)
    }

    /// Puts a flow that has data to (re)send into its NIC's scheduling.
    fn make_eligible(&mut self, flow: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.finished_at.is_some() || f.snd_nxt >= f.size || f.send_state == SendState::InRing {
            return;
        }
        if f.next_avail <= now {
            f.send_state = SendState::InRing;
            let nic = f.src_nic;
            let prio = f.priority as usize;
            self.nics[nic as usize].ready[prio].push_back(flow);
            let port = self.nics[nic as usize].port;
            self.kick(port);
        } else {
            self.wait_for_pacing(flow);
        }
    }

    /// Parks a flow until its pacing time `next_avail`. At most one wake-up event per flow
    /// is useful: an event that fires early re-arms itself for the (later) current time.
    fn wait_for_pacing(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        f.send_state = SendState::Waiting;
        f.wake_at = f.next_avail;
        match f.wake_event_at {
            Some(pending) if pending <= f.wake_at => {}
            _ => {
                f.wake_event_at = Some(f.wake_at);
                self.events.schedule(f.wake_at, EventKind::QpReady { flow });
            }
        }
    }

    pub(super) fn on_qp_ready(&mut self, flow: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.wake_event_at != Some(now) {
            return; // superseded by an earlier wake-up
        }
        f.wake_event_at = None;
        if f.send_state != SendState::Waiting {
            return;
        }
        if now < f.wake_at {
            f.wake_event_at = Some(f.wake_at);
            let at = f.wake_at;
            self.events.schedule(at, EventKind::QpReady { flow });
            return;
        }
        f.send_state = SendState::Idle;
        f.next_avail = f.next_avail.min(now);
        self.make_eligible(flow);
    }

    pub(super) fn on_flow_start(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        f.start = Some(self.now);
        f.last_progress = self.now;
        f.next_avail = self.now;
        self.make_eligible(flow);
    }

    /// A DCQCN increase also shortens the wait already running for the QP's next packet
    /// (the reference's `ChangeRate`, which its HPCC and TIMELY use): otherwise a QP cut to a
    /// low rate keeps the departure time computed at that rate after it recovered (at
    /// ConnectX's 1 Mb/s floor, 8.5 ms for one packet).
    fn rate_increased(&mut self, flow: u32, old_rate: f64) {
        let f = &mut self.flows[flow as usize];
        let new_rate = f.dcqcn.rate;
        if new_rate == old_rate || f.last_packet_bytes == 0 {
            return;
        }
        let bits = f.last_packet_bytes as f64 * 8e12;
        let old_gap = (bits / old_rate) as i128;
        let new_gap = (bits / new_rate) as i128;
        let adjusted = (f.next_avail as i128 + new_gap - old_gap).max(0) as Time;
        f.next_avail = adjusted;
        if f.send_state == SendState::Waiting && f.wake_at != adjusted {
            f.send_state = SendState::Idle;
            self.make_eligible(flow);
        }
    }

    fn apply_dcqcn_effect(&mut self, flow: u32, effect: DcqcnEffect) {
        if let Some(at) = effect.decrease_at {
            self.events.schedule(at, EventKind::DcqcnDecrease { flow });
        }
        if let Some((at, generation)) = effect.increase_at {
            // One pending timer event per flow: a restarted timer only moves the deadline.
            let f = &mut self.flows[flow as usize];
            f.increase_deadline = (at, generation);
            if f.increase_event_at.is_none_or(|pending| pending > at) {
                f.increase_event_at = Some(at);
                self.events
                    .schedule(at, EventKind::DcqcnIncrease { flow, generation });
            }
        }
        // A decrease paces the packets sent from now on and leaves the wait already running
        // for the next one (reference: `RdmaHw::CheckRateDecreaseMlx` sets `m_rate` without
        // `ChangeRate`; stretching that wait left single QPs stranded at a low rate for a
        // whole increase period, one 400 KB flow of an incast finishing 30 % after the
        // others). An increase also shortens that wait (`rate_increased`).
        if let Some(old) = effect.old_rate {
            if self.flows[flow as usize].dcqcn.rate > old {
                self.rate_increased(flow, old);
            }
        }
    }

    pub(super) fn on_dcqcn_decrease(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        if f.finished_at.is_some() {
            return;
        }
        let effect = f
            .dcqcn
            .on_decrease_check(self.now, f.line_rate, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    pub(super) fn on_dcqcn_increase(&mut self, flow: u32, _generation: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.increase_event_at != Some(now) {
            return;
        }
        f.increase_event_at = None;
        if f.finished_at.is_some() {
            return;
        }
        let (deadline, generation) = f.increase_deadline;
        if now < deadline {
            f.increase_event_at = Some(deadline);
            self.events
                .schedule(deadline, EventKind::DcqcnIncrease { flow, generation });
            return;
        }
        let (effect, _) =
            f.dcqcn
                .on_increase_timer(self.now, generation, f.line_rate, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    pub(super) fn on_retransmit_timer(&mut self, flow: u32) {
        let now = self.now;
        let rto = self.p.rto;
        let f = &mut self.flows[flow as usize];
        f.rto_pending = false;
        // Nothing to do once finished or when everything sent has been acknowledged.
        if f.finished_at.is_some() || f.snd_una >= f.max_sent {
            return;
        }
        if now >= f.last_progress + rto {
            f.timeouts += 1;
            f.snd_nxt = f.snd_una;
            f.last_progress = now;
            f.rto_pending = true;
            self.events
                .schedule(now + rto, EventKind::RetransmitTimer { flow });
            self.make_eligible(flow);
        } else {
            f.rto_pending = true;
            let at = f.last_progress + rto;
            self.events
                .schedule(at, EventKind::RetransmitTimer { flow });
        }
    }

    /// Tells the host hook about a flow whose data has been unacknowledged for the stall
    /// interval; re-arms while data is outstanding.
    pub(super) fn on_stall_check(&mut self, flow: u32) {
        let now = self.now;
        let Some(interval) = self.stall_interval else {
            return;
        };
        let src_pause = {
            let f = &self.flows[flow as usize];
            self.nic_pause(f.src_nic, f.priority)
        };
        let f = &mut self.flows[flow as usize];
        f.stall_pending = false;
        if f.finished_at.is_some() || f.snd_una >= f.max_sent {
            return;
        }
        f.stall_pending = true;
        let stuck_since = f.last_progress;
        if now < stuck_since + interval {
            self.events
                .schedule(stuck_since + interval, EventKind::StallCheck { flow });
            return;
        }
        self.events
            .schedule(now + interval, EventKind::StallCheck { flow });
        let sample = RttSample {
            host: self.nics[f.src_nic as usize].host,
            src_nic: f.src_nic,
            dst_nic: f.dst_nic,
            flow,
            tuple: f.tuple,
            acked: f.snd_una,
            sent_at: stuck_since,
            now,
            base_rtt: f.base_rtt,
            src_pause,
        };
        if let Some(hook) = self.host_hook.as_mut() {
            hook.on_stall(&sample, &mut self.emit_buffer);
            if !self.emit_buffer.is_empty() {
                let emits = std::mem::take(&mut self.emit_buffer);
                for emit in emits {
                    self.send_custom(emit);
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Receive side
    // ----------------------------------------------------------------------------------

    pub(super) fn nic_receive(&mut self, n: u32, id: u32) {
        let nic = &mut self.nics[n as usize];
        if let Some(bps) = nic.drain_bps {
            // Slow receiver: packets wait in the NIC receive buffer and drain at `bps`.
            let size = self.packets.get(id).size;
            nic.rx_buffer += size as u64;
            let start = nic.rx_busy_until.max(self.now);
            nic.rx_busy_until = start + serialization(size, bps);
            let done = nic.rx_busy_until;
            let port = nic.port;
            let over = nic.rx_buffer > self.p.rx_xoff && !nic.rx_xoff;
            self.events
                .schedule(done, EventKind::NicRxDrain { port, packet: id });
            if over {
                let prio = self.packets.get(id).priority;
                if prio != self.p.control_priority {
                    self.nics[n as usize].rx_xoff = true;
                    self.nics[n as usize].rx_xoff_priority = prio;
                    self.send_xoff(port, prio);
                }
            }
            return;
        }
        if self.nics[n as usize].rx_buffer > 0 {
            // Still draining after the slow period: keep order.
            let nic = &mut self.nics[n as usize];
            let size = self.packets.get(id).size as u64;
            nic.rx_buffer += size;
            let done = nic.rx_busy_until.max(self.now);
            let port = nic.port;
            self.events
                .schedule(done, EventKind::NicRxDrain { port, packet: id });
            return;
        }
        self.nic_process(n, id);
    }

    pub(super) fn on_nic_rx_drained(&mut self, port: u32, id: u32) {
        let Owner::Nic(n) = self.ports[port as usize].owner else {
            self.packets.free(id);
            return;
        };
        let size = self.packets.get(id).size as u64;
        let nic = &mut self.nics[n as usize];
        nic.rx_buffer = nic.rx_buffer.saturating_sub(size);
        if nic.rx_xoff && nic.rx_buffer <= self.p.rx_xon {
            nic.rx_xoff = false;
            let prio = nic.rx_xoff_priority;
            if self.ports[port as usize].xoff_sent[prio as usize] {
                self.send_xon(port, prio);
            }
        }
        self.nic_process(n, id);
    }

    fn nic_process(&mut self, n: u32, id: u32) {
        let kind = self.packets.get(id).kind;
        match kind {
            PacketKind::Data => self.receive_data(n, id),
            PacketKind::Ack | PacketKind::Nack => self.receive_ack(id),
            PacketKind::Cnp => self.receive_cnp(id),
            PacketKind::Custom => {
                let host = self.nics[n as usize].host;
                if let Some(hook) = self.host_hook.as_mut() {
                    hook.on_custom_packet(
                        host,
                        self.packets.get(id),
                        self.now,
                        &mut self.emit_buffer,
                    );
                    self.flush_emits();
                }
            }
            PacketKind::Pfc => {}
        }
        self.packets.free(id);
    }

    fn control_packet(&self, kind: PacketKind, flow: u32, size: u32) -> Packet {
        let f = &self.flows[flow as usize];
        let mut packet = Packet::new(kind);
        packet.priority = if kind == PacketKind::Cnp {
            self.p.cnp_priority
        } else if self.p.ack_on_data_priority {
            // The HPCC reference's switches queue ACKs with the data of their priority
            // (`SwitchNode::SendToDev`: `m_ackHighPrio` is 0 unless set, and `third.cc`
            // never sets it); its NICs still send them ahead of data (`RdmaEgressQueue`).
            f.priority
        } else {
            self.p.control_priority
        };
        packet.dscp = crate::packet::dscp_for_priority(packet.priority);
        packet.src_nic = f.dst_nic;
        packet.dst_nic = f.src_nic;
        packet.tuple = FiveTuple {
            src_ip: f.tuple.dst_ip,
            dst_ip: f.tuple.src_ip,
            src_port: f.tuple.dst_port,
            dst_port: f.tuple.src_port,
            protocol: 17,
        };
        packet.flow = flow;
        packet.size = size + self.p.wire_overhead;
        packet
    }

    fn send_from_nic(&mut self, nic: u32, packet: Packet) {
        self.send_from_nic_reporting(nic, packet, None);
    }

    /// Queues a control packet at `nic`; with `tx_token`, its send completion is reported to
    /// the host hook (the token is filed before the port may start sending it).
    fn send_from_nic_reporting(&mut self, nic: u32, packet: Packet, tx_token: Option<u64>) {
        let id = self.packets.alloc(packet);
        if let Some(token) = tx_token {
            let host = self.nics[nic as usize].host;
            self.tx_tokens.insert(id, (host, token));
        }
        let n = &mut self.nics[nic as usize];
        n.control.push_back(id);
        let port = n.port;
        self.kick(port);
    }

    fn receive_data(&mut self, n: u32, id: u32) {
        let now = self.now;
        let (flow, seq, payload, ce, sent_at) = {
            let packet = self.packets.get(id);
            (
                packet.flow,
                packet.seq,
                packet.payload as u64,
                packet.ecn == ECN_CE,
                packet.sent_at,
            )
        };
        if flow as usize >= self.flows.len() || self.flows[flow as usize].dst_nic != n {
            return;
        }
        if ce {
            let gap = self.p.dcqcn.min_time_between_cnps;
            let f = &mut self.flows[flow as usize];
            f.ce_received += 1;
            let due = match f.last_cnp {
                None => true,
                Some(last) => now >= last + gap,
            };
            if due {
                f.last_cnp = Some(now);
                f.cnps_sent += 1;
                let packet = self.control_packet(PacketKind::Cnp, flow, ROCE_CNP_BYTES);
                self.send_from_nic(n, packet);
            }
        }
        let ack_every = self.p.ack_every;
        let nack_interval = self.p.nack_interval;
        let f = &mut self.flows[flow as usize];
        let reply = if seq == f.rcv_expected {
            f.rcv_expected += payload;
            self.delivered_bytes += payload;
            f.rcv_unacked_packets += 1;
            if f.rcv_unacked_packets >= ack_every || f.rcv_expected >= f.size {
                f.rcv_unacked_packets = 0;
                Some(PacketKind::Ack)
            } else {
                None
            }
        } else if seq > f.rcv_expected {
            if now >= f.nack_timer || f.last_nack != f.rcv_expected {
                f.nack_timer = now + nack_interval;
                f.last_nack = f.rcv_expected;
                Some(PacketKind::Nack)
            } else {
                None
            }
        } else {
            // Duplicate (after go-back-N or a lost ACK): re-acknowledge.
            Some(PacketKind::Ack)
        };
        if let Some(kind) = reply {
            let expected = self.flows[flow as usize].rcv_expected;
            let mut packet = self.control_packet(kind, flow, ROCE_ACK_BYTES);
            packet.seq = expected;
            packet.sent_at = sent_at;
            self.send_from_nic(n, packet);
        }
    }

    fn receive_ack(&mut self, id: u32) {
        let now = self.now;
        let (flow, seq, kind, sent_at) = {
            let packet = self.packets.get(id);
            (packet.flow, packet.seq, packet.kind, packet.sent_at)
        };
        let src_pause = self
            .flows
            .get(flow as usize)
            .map_or(0, |f| self.nic_pause(f.src_nic, f.priority));
        let Some(f) = self.flows.get_mut(flow as usize) else {
            return;
        };
        if f.finished_at.is_some() {
            return;
        }
        if seq > f.snd_una {
            f.snd_una = seq.min(f.size);
            f.last_progress = now;
        }
        if kind == PacketKind::Nack {
            // Go-back-N: resend from the first unacknowledged byte.
            f.snd_nxt = f.snd_una;
        }
        let sample = (kind == PacketKind::Ack).then(|| RttSample {
            host: self.nics[f.src_nic as usize].host,
            src_nic: f.src_nic,
            dst_nic: f.dst_nic,
            flow,
            tuple: f.tuple,
            acked: f.snd_una,
            sent_at,
            now,
            base_rtt: f.base_rtt,
            src_pause,
        });
        if f.snd_una >= f.size {
            f.finished_at = Some(now);
            self.on_flow_finished(flow);
        } else if kind == PacketKind::Nack {
            self.make_eligible(flow);
        }
        if let (Some(sample), Some(hook)) = (sample, self.host_hook.as_mut()) {
            hook.on_rtt_sample(&sample, &mut self.emit_buffer);
            self.flush_emits();
        }
    }

    /// Sends what the host hook pushed to the emit buffer.
    pub(crate) fn flush_emits(&mut self) {
        if !self.emit_buffer.is_empty() {
            let emits = std::mem::take(&mut self.emit_buffer);
            for emit in emits {
                self.send_custom(emit);
            }
        }
    }

    /// The host hook's periodic wake-up; schedules the next one.
    pub(crate) fn on_host_wakeup(&mut self) {
        let Some(interval) = self.wakeup_interval else {
            return;
        };
        if let Some(hook) = self.host_hook.as_mut() {
            hook.on_wakeup(self.now, &mut self.emit_buffer);
            self.flush_emits();
        }
        let next = self.now + interval;
        if next <= self.p.end {
            self.events.schedule(next, EventKind::HostWakeup);
        }
    }

    pub(crate) fn schedule_tx_done(&mut self, at: Time, token: (NodeId, u64)) {
        let slot = self.tx_done.insert(token);
        self.events.schedule(at, EventKind::HostTxDone { slot });
    }

    pub(crate) fn on_host_tx_done(&mut self, slot: u32) {
        let Some((host, token)) = self.tx_done.take(slot) else {
            return;
        };
        if let Some(hook) = self.host_hook.as_mut() {
            hook.on_custom_sent(host, token, self.now, &mut self.emit_buffer);
            self.flush_emits();
        }
    }

    /// Sends a packet built by a host hook (at once, or at its `not_before`).
    pub(crate) fn send_custom(&mut self, emit: HostEmit) {
        if emit.src_nic as usize >= self.nics.len() || emit.dst_nic as usize >= self.nics.len() {
            return;
        }
        if emit.not_before > self.now {
            let at = emit.not_before;
            let slot = self.deferred_sends.insert(emit);
            self.events.schedule(at, EventKind::HostSend { slot });
            return;
        }
        let mut packet = Packet::new(PacketKind::Custom);
        packet.priority = emit.priority & 7;
        packet.dscp = crate::packet::dscp_for_priority(packet.priority);
        packet.src_nic = emit.src_nic;
        packet.dst_nic = emit.dst_nic;
        packet.tuple = emit.tuple;
        let len = emit.custom.len().min(CUSTOM_CAPACITY);
        packet.custom[..len].copy_from_slice(&emit.custom[..len]);
        packet.custom_len = len as u8;
        packet.size = (CUSTOM_OVERHEAD + len as u32).max(64) + self.p.wire_overhead;
        self.send_from_nic_reporting(emit.src_nic, packet, emit.tx_token);
    }

    fn receive_cnp(&mut self, id: u32) {
        let flow = self.packets.get(id).flow;
        let Some(f) = self.flows.get_mut(flow as usize) else {
            return;
        };
        if f.finished_at.is_some() || !f.cc || self.p.cc != CongestionControl::Dcqcn {
            return;
        }
        let effect = f.dcqcn.on_cnp(self.now, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    fn on_flow_finished(&mut self, flow: u32) {
        let (workload, round) = {
            let f = &self.flows[flow as usize];
            (f.workload, f.round)
        };
        let Some(remaining) = self
            .round_remaining
            .get_mut(workload)
            .and_then(|r| r.get_mut(round as usize))
        else {
            return;
        };
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            let next = round as usize + 1;
            if let Some(flows) = self.round_flows[workload].get(next).cloned() {
                let at = self.now + self.round_off[workload];
                for flow in flows {
                    self.events.schedule(at, EventKind::FlowStart { flow });
                }
            }
        }
    }
}
