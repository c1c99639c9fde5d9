//! [`Model`]: one switch (the [`DataPlane`] implementation) over the interpreter or the
//! emitted code.

use super::*;

/// The interpreter: the program compiled once (see the module docs), then run per packet
/// without allocation.
#[derive(Debug)]
#[repr(C)]
pub struct Model {
    // What a pass touches first (see [`State`]).
    pub(super) code: Arc<Code>,
    /// The emitted variant the passes run, `None` for the interpreter (no variant, or the
    /// differential tests run the interpreter on purpose).
    pub(super) native: Option<&'static native::Native>,
    pub(super) st: State,
    pub(super) program: Arc<Program>,
    pub(super) groups: HashMap<u16, Vec<u16>>,
    pub(super) cpu_port: u16,
    pub(super) scratch: [PassOutput; 2],
}

impl Model {
    /// A model of `program` with empty registers and tables. The program is compiled into
    /// a flat instruction list here (once per `Arc<Program>`: models of the same program
    /// share the code); a program the model cannot run (more than [`MAX_CARRIED`] bridged
    /// fields, 64 headers, register sizes that are not powers of two) is an error.
    pub fn new(program: Arc<Program>, routing: Routing, cpu_port: u16) -> Result<Self, ModelError> {
        let code = compiled(&program)?;
        if code.bridged.len() > MAX_CARRIED || code.cloned.len() > MAX_CARRIED {
            return Err(program_error(format!(
                "more than {MAX_CARRIED} bridged or cloned fields"
            )));
        }
        let st = State {
            own_phv: None,
            valid: 0,
            parsed: 0,
            dirty: 0,
            stale: 0,
            zeroed: 0,
            meta: META_ANY,
            offsets: [0; MAX_HEADERS],
            in_order: true,
            payload_offset: 0,
            regs: Regs::new(&code),
            views: (0..program.registers.len())
                .map(|_| OnceLock::new())
                .collect(),
            live_views: AtomicUsize::new(0),
            tables: code
                .tables
                .iter()
                .zip(&program.tables)
                .map(|(c, t)| {
                    Arc::new(TableState {
                        direct: if c.direct {
                            let bits: u32 = t
                                .keys
                                .iter()
                                .map(|(f, _)| program.field(*f).width as u32)
                                .sum();
                            let keys = (1u128 << bits.min(64)).min(DIRECT_KEYS);
                            vec![NO_DIRECT; keys as usize]
                        } else {
                            Vec::new()
                        },
                        ..TableState::default()
                    })
                })
                .collect::<Vec<_>>()
                .into(),
            tables_changed: true,
            routing,
            routed: None,
            random_state: 0,
        };
        Ok(Model {
            native: code.native.map(|n| &generated::VARIANTS[n]),
            code,
            st,
            groups: HashMap::new(),
            cpu_port,
            scratch: [PassOutput::default(), PassOutput::default()],
            program,
        })
    }

    /// Seeds the stream the program's `Random` extern draws from (seed 0 at creation):
    /// the same seed and the same packets give the same draws, hence the same output.
    pub fn seed_random(&mut self, seed: u64) {
        self.st.random_state = seed;
    }

    /// Whether passes run as emitted Rust (the program's compiled code has a variant in
    /// the generated native back end) rather than on the interpreter.
    pub fn is_native(&self) -> bool {
        self.native.is_some()
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program as shared by the models of it.
    pub fn program_arc(&self) -> &Arc<Program> {
        &self.program
    }

    /// The CPU port number.
    pub fn cpu_port(&self) -> u16 {
        self.cpu_port
    }

    /// The member ports of a multicast group (`None` when it was never configured).
    pub fn multicast_group(&self, group: u16) -> Option<&[u16]> {
        self.groups.get(&group).map(|ports| ports.as_slice())
    }

    pub(super) fn register_id(&self, name: &str) -> Result<usize, ModelError> {
        self.program
            .register_by_name(name)
            .map(|r| r.0 as usize)
            .ok_or_else(|| ModelError::UnknownRegister(name.to_string()))
    }

    /// Number of entries in a table.
    fn table_id(&self, table: &str) -> Result<TableId, ModelError> {
        self.program
            .table_by_name(table)
            .ok_or_else(|| ModelError::UnknownTable(table.to_string()))
    }

    /// Packs an entry's key (and ternary masks) as the table stores it: `(key, mask, exact)`.
    fn pack_key(
        &self,
        table: &str,
        values: &[u64],
        masks: &[u64],
    ) -> Result<(u128, u128, bool), ModelError> {
        let t = self.table_id(table)?;
        let def = &self.program.tables[t.0 as usize];
        let bad = |message: String| ModelError::TableEntry {
            table: table.to_string(),
            message,
        };
        if values.len() != def.keys.len() {
            return Err(bad(format!(
                "{} key values for {} key fields",
                values.len(),
                def.keys.len()
            )));
        }
        let exact = def.keys.iter().all(|(_, k)| *k == MatchKind::Exact);
        if !exact && masks.len() != def.keys.len() {
            return Err(bad("ternary entries need one mask per key field".into()));
        }
        let mut key: u128 = 0;
        let mut m: u128 = 0;
        for (i, (f, kind)) in def.keys.iter().enumerate() {
            let w = self.program.field(*f).width;
            let v = values[i];
            if w < 64 && v >> w != 0 {
                return Err(bad(format!("key value {v:#x} does not fit {w} bits")));
            }
            let km = if *kind == MatchKind::Exact || exact {
                mask(w)
            } else {
                masks[i] & mask(w)
            };
            key = (key << w) | v as u128;
            m = (m << w) | km as u128;
        }
        Ok((key, m, exact))
    }

    /// Removes the entry with this key (ternary: key, masks and priority); whether there
    /// was one (BF Runtime `DELETE`).
    pub fn table_delete(
        &mut self,
        table: &str,
        values: &[u64],
        masks: &[u64],
        priority: u32,
    ) -> Result<bool, ModelError> {
        let (key, m, exact) = self.pack_key(table, values, masks)?;
        let t = self.table_id(table)?;
        let mut tables = self.st.tables.to_vec();
        let state = Arc::make_mut(&mut tables[t.0 as usize]);
        let removed = if exact {
            if key < state.direct.len() as u128 {
                state.direct[key as usize] = NO_DIRECT;
            }
            state.exact.remove(&key).is_some()
        } else {
            let before = state.ternary.len();
            state
                .ternary
                .retain(|e| !(e.0 == key && e.1 == m && e.2 == priority));
            state.ternary.len() != before
        };
        if removed {
            state.entries -= 1;
            self.st.tables = tables.into();
            self.st.tables_changed = true;
        }
        Ok(removed)
    }

    /// Removes every entry of `table` (BF Runtime `DELETE` without a key).
    pub fn table_clear(&mut self, table: &str) -> Result<(), ModelError> {
        let t = self.table_id(table)?;
        let mut tables = self.st.tables.to_vec();
        let state = Arc::make_mut(&mut tables[t.0 as usize]);
        state.direct.iter_mut().for_each(|d| *d = NO_DIRECT);
        state.exact.clear();
        state.ternary.clear();
        state.entries = 0;
        self.st.tables = tables.into();
        self.st.tables_changed = true;
        Ok(())
    }

    pub fn table_len(&self, table: &str) -> Result<usize, ModelError> {
        let t = self.table_id(table)?;
        Ok(self.st.tables[t.0 as usize].entries)
    }
}

/// Packs the values of `fields` (slot, mask, shift) into 128 bits: each field at its
/// shift, its width (the mask's) wide, from bit 0 up in field order (the netsim adapter's
/// `Packet.bridge`; fields from bit 128 on are left out).
#[inline(always)]
pub(super) fn pack_fields(phv: &[u64; PHV_SLOTS], fields: &[(u16, u64, u32)]) -> [u64; 2] {
    let mut acc: u128 = 0;
    for (f, m, shift) in fields {
        if *shift < 128 {
            acc |= ((phv[*f as usize] & m) as u128) << shift;
        }
    }
    [acc as u64, (acc >> 64) as u64]
}

/// Restores `fields` from 128 bits packed by [`pack_fields`].
#[inline(always)]
pub(super) fn unpack_fields(
    phv: &mut [u64; PHV_SLOTS],
    fields: &[(u16, u64, u32)],
    packed: [u64; 2],
) {
    let acc = packed[0] as u128 | (packed[1] as u128) << 64;
    for (f, m, shift) in fields {
        phv[*f as usize] = if *shift < 128 {
            (acc >> shift) as u64 & m
        } else {
            0
        };
    }
}

/// How a pass hands over bridged metadata and the deparsed packet: as
/// [`DataPlane::ingress`] / [`DataPlane::egress`] do, or as the netsim adapter wants them
/// (bridged fields packed into 128 bits; no deparsed copy when the headers are unchanged).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Handover {
    Full,
    Packed,
}

pub(super) const FULL: bool = false;
pub(super) const PACKED: bool = true;

impl Model {
    /// [`DataPlane::ingress`] for simulator glue that carries the bridged metadata itself:
    /// the bridged fields go into `bridge` (packed in declaration order into 128 bits,
    /// `out.bridged` is left as it is) and, when the program left every header as parsed,
    /// `out.bytes` is not written and the result is `true` (the output packet is the input).
    /// `#[inline]` so that the glue's crate instantiates and inlines the pass.
    #[inline]
    pub fn ingress_packed(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
        bridge: &mut [u64; 2],
    ) -> Result<bool, ModelError> {
        self.ingress_pass::<PACKED>(packet, input, out, bridge)
    }

    /// [`DataPlane::egress`] for simulator glue that carries the bridged metadata itself:
    /// the bridged fields of a normal packet come packed in `bridge`; `true` when the output
    /// packet is the input (`out.bytes` not written).
    #[inline]
    pub fn egress_packed(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        bridge: [u64; 2],
        out: &mut PassOutput,
    ) -> Result<bool, ModelError> {
        self.egress_pass::<PACKED>(packet, input, Err(bridge), out)
    }

    pub(super) fn ingress_pass<const H: bool>(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
        bridge: &mut [u64; 2],
    ) -> Result<bool, ModelError> {
        let handover = if H { Handover::Packed } else { Handover::Full };
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        if handover == Handover::Full {
            out.reset();
        } else {
            out.reset_but_bridged();
        }
        if self.st.tables_changed {
            self.st.share_tables();
        }
        if *self.st.live_views.get_mut() != 0 {
            self.st.drop_views();
        }
        let code = &self.code;
        let native = self.native;
        Ok(self.st.with_phv(code, |st, phv| {
            st.reset(code, 0, native.is_some(), phv);
            st.routed = input.routed_egress_port;
            let mut ctx = PassCtx {
                packet,
                clone_bytes: &mut out.clone_bytes,
                digests: &mut out.digests,
                forward: Forward::None,
                dropped: false,
                clone: false,
            };
            match native {
                Some(n) => (n.ingress)(st, phv, code, &mut ctx, input),
                None => {
                    st.set_intrinsic(code, Intrinsic::IngressPort, input.ingress_port as u64, phv);
                    st.set_intrinsic(code, Intrinsic::IngressTstamp, input.tstamp_ns, phv);
                    st.parse(code, packet, phv);
                    st.run(code, code.ingress, &mut ctx, phv);
                }
            }
            let (dropped, forward, clone) = (ctx.dropped, ctx.forward, ctx.clone);
            let same = handover == Handover::Packed && st.unchanged();
            if !same {
                st.deparse(code, packet, &mut out.bytes, phv);
            }
            out.dropped = dropped;
            out.forward = forward;
            match handover {
                Handover::Full => st.carry_into(&code.bridged, &mut out.bridged, phv),
                Handover::Packed => {
                    *bridge = match native {
                        Some(n) => (n.pack)(phv),
                        None => pack_fields(phv, &code.bridge_packing),
                    }
                }
            }
            for d in out.digests.iter_mut() {
                d.values = code.digests[d.digest.0 as usize]
                    .iter()
                    .map(|f| phv[*f as usize])
                    .collect();
            }
            if clone {
                let mut c = st.carry(&code.cloned, phv);
                c.clone_kind = CLONE_INGRESS as u8;
                out.clone = Some(c);
            }
            st.meta = META_INGRESS;
            same
        }))
    }

    /// An egress pass with the metadata carried from ingress (`Ok`), or a normal packet's
    /// bridged fields packed into 128 bits (`Err`).
    pub(super) fn egress_pass<const H: bool>(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: Result<&Carried, [u64; 2]>,
        out: &mut PassOutput,
    ) -> Result<bool, ModelError> {
        let handover = if H { Handover::Packed } else { Handover::Full };
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        if handover == Handover::Full {
            out.reset();
        } else {
            out.reset_but_bridged();
        }
        if self.st.tables_changed {
            self.st.share_tables();
        }
        if *self.st.live_views.get_mut() != 0 {
            self.st.drop_views();
        }
        let code = &self.code;
        let native = self.native;
        Ok(self.st.with_phv(code, |st, phv| {
            st.reset(code, 1, native.is_some(), phv);
            let mut unused = Vec::new();
            let mut ctx = PassCtx {
                packet,
                clone_bytes: &mut unused,
                digests: &mut out.digests,
                forward: Forward::None,
                dropped: false,
                clone: false,
            };
            match native {
                Some(n) => (n.egress)(st, phv, code, &mut ctx, input, carried),
                None => {
                    let clone_kind = carried.map_or(0, |c| c.clone_kind);
                    let port = input.ingress_port as u64;
                    st.set_intrinsic(code, Intrinsic::EgressIngressPort, port, phv);
                    st.set_intrinsic(code, Intrinsic::EgressPort, input.egress_port as u64, phv);
                    st.set_intrinsic(code, Intrinsic::EnqTstamp, input.enq_tstamp_ns, phv);
                    st.set_intrinsic(code, Intrinsic::EnqQdepth, input.enq_qdepth as u64, phv);
                    let len = input.packet_length as u64;
                    st.set_intrinsic(code, Intrinsic::PacketLength, len, phv);
                    st.set_intrinsic(code, Intrinsic::CloneKind, clone_kind as u64, phv);
                    match carried {
                        Ok(c) => st.restore_carried(code, c, phv),
                        Err(packed) => unpack_fields(phv, &code.bridge_packing, packed),
                    }
                    st.parse(code, packet, phv);
                    st.run(code, code.egress, &mut ctx, phv);
                }
            }
            let (dropped, clone) = (ctx.dropped, ctx.clone);
            let same = handover == Handover::Packed && !clone && st.unchanged();
            if !same {
                st.deparse(code, packet, &mut out.bytes, phv);
            }
            out.dropped = dropped;
            if clone {
                let mut c = st.carry(&code.cloned, phv);
                c.clone_kind = CLONE_EGRESS as u8;
                out.clone = Some(c);
                out.clone_bytes.clear();
                out.clone_bytes.extend_from_slice(&out.bytes);
            }
            st.meta = META_EGRESS;
            same
        }))
    }
}

impl DataPlane for Model {
    fn ingress(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        let mut unused = [0; 2];
        self.ingress_pass::<FULL>(packet, input, out, &mut unused)
            .map(|_| ())
    }

    fn egress(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: &Carried,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        self.egress_pass::<FULL>(packet, input, Ok(carried), out)
            .map(|_| ())
    }

    fn process(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        queue: u8,
    ) -> Result<SwitchOutput, ModelError> {
        let mut result = SwitchOutput::default();
        let mut ing = std::mem::take(&mut self.scratch[0]);
        let mut eg = std::mem::take(&mut self.scratch[1]);
        let outcome = (|| {
            self.ingress(packet, input, &mut ing)?;
            result.digests.append(&mut ing.digests);
            let cpu_input = EgressInput {
                ingress_port: input.ingress_port,
                egress_port: self.cpu_port,
                queue,
                enq_tstamp_ns: input.tstamp_ns,
                enq_qdepth: 0,
                packet_length: 0,
            };
            if let Some(c) = ing.clone {
                let bytes = ing.clone_bytes.clone();
                let mut ci = cpu_input;
                ci.packet_length = bytes.len() as u16;
                self.egress(&bytes, &ci, &c, &mut eg)?;
                if !eg.dropped {
                    result.cpu.push(eg.bytes.clone());
                }
            }
            if ing.dropped {
                return Ok(());
            }
            let ports: Vec<u16> = match ing.forward {
                Forward::None => vec![],
                Forward::Unicast(p) => vec![p],
                Forward::Multicast(g) => self.groups.get(&g).cloned().unwrap_or_default(),
            };
            let bytes = ing.bytes.clone();
            for port in ports {
                let ei = EgressInput {
                    ingress_port: input.ingress_port,
                    egress_port: port,
                    queue,
                    enq_tstamp_ns: input.tstamp_ns,
                    enq_qdepth: 0,
                    packet_length: bytes.len() as u16,
                };
                self.egress(&bytes, &ei, &ing.bridged, &mut eg)?;
                if let Some(c) = eg.clone {
                    let clone_bytes = eg.clone_bytes.clone();
                    let kept = (!eg.dropped).then(|| eg.bytes.clone());
                    let mut ci = cpu_input;
                    ci.ingress_port = input.ingress_port;
                    ci.packet_length = clone_bytes.len() as u16;
                    self.egress(&clone_bytes, &ci, &c, &mut eg)?;
                    if !eg.dropped {
                        result.cpu.push(eg.bytes.clone());
                    }
                    if let Some(k) = kept {
                        result.ports.push((port, k));
                    }
                } else if !eg.dropped {
                    result.ports.push((port, eg.bytes.clone()));
                }
            }
            Ok(())
        })();
        self.scratch[0] = ing;
        self.scratch[1] = eg;
        outcome.map(|_| {
            result.ports.sort_by_key(|(p, _)| *p);
            result
        })
    }

    fn register_read(&self, register: &str, index: u64) -> Result<u64, ModelError> {
        let r = self.register_id(register)?;
        let loc = &self.code.registers[r];
        if index >= loc.size as u64 {
            return Err(ModelError::RegisterIndex {
                register: register.to_string(),
                index,
                size: self.program.registers[r].size,
            });
        }
        Ok(self.st.cell(loc, index as usize))
    }

    fn register_write(&mut self, register: &str, index: u64, value: u64) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        let def = &self.program.registers[r];
        if def.width < 64 && value >> def.width != 0 {
            return Err(ModelError::RegisterValue {
                register: register.to_string(),
                value,
                width: def.width,
            });
        }
        let loc = self.code.registers[r];
        if index >= loc.size as u64 {
            return Err(ModelError::RegisterIndex {
                register: register.to_string(),
                index,
                size: def.size,
            });
        }
        let w = loc.base + index as usize * loc.stride + loc.offset;
        let regs = &mut self.st.regs;
        if loc.pair {
            regs.set(loc.kind, w, value & 0xFFFF_FFFF);
            regs.set(loc.kind, w + 1, value >> 32);
        } else {
            regs.set(loc.kind, w, value);
        }
        self.st.drop_view(r);
        Ok(())
    }

    fn register_read_all(&self, register: &str) -> Result<&[u64], ModelError> {
        let r = self.register_id(register)?;
        Ok(self.st.view(&self.code, r))
    }

    fn register_sync(&mut self, register: &str) -> Result<(), ModelError> {
        self.register_id(register).map(|_| ())
    }

    fn register_reset(&mut self, register: &str) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        let loc = self.code.registers[r];
        let regs = &mut self.st.regs;
        match loc.kind {
            // A register alone in its slab: the slab's range at once.
            SlabKind::Bytes if loc.stride == 1 => {
                regs.bytes[loc.base..loc.base + loc.size].fill(0);
            }
            SlabKind::Halves if loc.stride == 1 => {
                regs.halves[loc.base..loc.base + loc.size].fill(0);
            }
            _ => {
                for i in 0..loc.size {
                    let w = loc.base + i * loc.stride + loc.offset;
                    regs.set(loc.kind, w, 0);
                    if loc.pair {
                        regs.set(loc.kind, w + 1, 0);
                    }
                }
            }
        }
        self.st.drop_view(r);
        Ok(())
    }

    fn table_add(&mut self, table: &str, entry: TableEntry) -> Result<(), ModelError> {
        let t = self.table_id(table)?;
        let def = &self.program.tables[t.0 as usize];
        let bad = |message: String| ModelError::TableEntry {
            table: table.to_string(),
            message,
        };
        let action = def
            .actions
            .iter()
            .copied()
            .find(|a| self.program.actions[a.0 as usize].name == entry.action)
            .ok_or_else(|| ModelError::UnknownAction {
                table: table.to_string(),
                action: entry.action.clone(),
            })?;
        let params = &self.program.actions[action.0 as usize].params;
        if params.len() != entry.params.len() {
            return Err(bad(format!(
                "action `{}` takes {} parameters, {} given",
                entry.action,
                params.len(),
                entry.params.len()
            )));
        }
        for (p, v) in params.iter().zip(&entry.params) {
            let w = self.program.field(*p).width;
            if w < 64 && v >> w != 0 {
                return Err(bad(format!("parameter value {v:#x} does not fit {w} bits")));
            }
        }
        let (key, m, exact) = self.pack_key(table, &entry.key, &entry.mask)?;
        self.st.tables_changed = true;
        let mut tables = self.st.tables.to_vec();
        let state = Arc::make_mut(&mut tables[t.0 as usize]);
        let size = def.size;
        if exact {
            if !state.exact.contains_key(&key) && state.entries >= size as usize {
                return Err(ModelError::TableFull {
                    table: table.to_string(),
                    size,
                });
            }
            if key < state.direct.len() as u128 {
                let d = &mut state.direct[key as usize];
                d.action = action.0;
                for (slot, v) in d.params.iter_mut().zip(&entry.params) {
                    *slot = *v;
                }
            }
            if state.exact.insert(key, (action, entry.params)).is_none() {
                state.entries += 1;
            }
        } else {
            if state.entries >= size as usize {
                return Err(ModelError::TableFull {
                    table: table.to_string(),
                    size,
                });
            }
            state
                .ternary
                .push((key, m, entry.priority, action, entry.params));
            state.ternary.sort_by_key(|e| e.2);
            state.entries += 1;
        }
        self.st.tables = tables.into();
        Ok(())
    }

    fn multicast_group_set(&mut self, group: u16, ports: Vec<u16>) {
        self.groups.insert(group, ports);
    }
}
