//! The interpreter: the per-thread PHV scratch, register storage, the model's state and the
//! passes over compiled code (parser, instructions, register actions, deparser).

use super::*;

/// One single-word register action on its cell; returns the output.
#[inline(always)]
pub(super) fn word_step(
    wa: &WordAction,
    conds: &[CCond],
    cell: &mut u32,
    phv: &[u64; PHV_SLOTS],
) -> u64 {
    let m = wa.word_mask;
    let lo = *cell & m;
    let outcome = match wa.cond {
        COND_NONE => false,
        COND_EQ => phv[wa.cond_slot as usize] as u32 & m == wa.cond_k,
        COND_NE => phv[wa.cond_slot as usize] as u32 & m != wa.cond_k,
        _ => conds[wa.cond_k as usize].test(phv, lo as u64, 0, m as u64),
    };
    let step = &wa.on[outcome as usize];
    let s = if step.phv {
        phv[step.slot as usize] as u32 & m
    } else {
        step.konst
    };
    let new = match step.op {
        WordOp::Keep => lo,
        WordOp::Set => s,
        WordOp::Add => lo.wrapping_add(s) & m,
        WordOp::Sub => lo.wrapping_sub(s) & m,
        WordOp::SatAdd => lo.saturating_add(s).min(m),
        WordOp::SatSub => lo.saturating_sub(s),
        WordOp::Min => lo.min(s),
        WordOp::Max => lo.max(s),
        WordOp::And => lo & s,
        WordOp::Or => lo | s,
        WordOp::Xor => lo ^ s,
    };
    if wa.writes {
        *cell = new;
    }
    ((lo & step.out_old) | (new & step.out_new) | step.out_konst) as u64
}

/// A PHV shared by the models of one program on one thread.
pub(super) struct Scratch {
    pub(super) code: Weak<Code>,
    pub(super) phv: Box<[u64; PHV_SLOTS]>,
    /// Headers whose fields may be non-zero in `phv`.
    pub(super) stale: u64,
    /// Which metadata may be non-zero in `phv` (`META_*`).
    pub(super) meta: u8,
}

/// All metadata is zero.
pub(super) const META_CLEAN: u8 = 0;
/// An ingress pass ran last: metadata it wrote may be non-zero.
pub(super) const META_INGRESS: u8 = 1;
/// An egress pass ran last: metadata it wrote may be non-zero.
pub(super) const META_EGRESS: u8 = 2;
/// Any metadata may be non-zero.
pub(super) const META_ANY: u8 = 3;

/// Most programs a thread keeps a shared PHV for.
pub(super) const MAX_SCRATCH: usize = 8;

thread_local! {
    static SCRATCH: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn new_phv() -> Box<[u64; PHV_SLOTS]> {
    match vec![0u64; PHV_SLOTS].into_boxed_slice().try_into() {
        Ok(phv) => phv,
        Err(_) => unreachable!("the vector has PHV_SLOTS elements"),
    }
}

/// 64-byte aligned words, so that an interleaved cell group never straddles two lines.
#[repr(align(64))]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Line([u32; 16]);

/// Register storage: the slabs of each kind one after another in one array (a slab of
/// words starts on a line), so that a register access goes straight to its cell, without
/// a per-slab descriptor to load first.
#[derive(Clone, Debug, Default)]
pub(super) struct Regs {
    pub(super) bytes: Vec<u8>,
    pub(super) halves: Vec<u16>,
    pub(super) words: Vec<Line>,
}

impl Regs {
    pub(super) fn new(code: &Code) -> Regs {
        let [bytes, halves, words] = code.regs_len;
        Regs {
            bytes: vec![0; bytes],
            halves: vec![0; halves],
            words: vec![Line::default(); words.div_ceil(16)],
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, kind: SlabKind, w: usize) -> u64 {
        match kind {
            SlabKind::Bytes => self.bytes[w] as u64,
            SlabKind::Halves => self.halves[w] as u64,
            SlabKind::Words => self.words[w >> 4].0[w & 15] as u64,
        }
    }

    /// Stores the low bits of `value` (values always fit the register's width).
    #[inline(always)]
    pub(super) fn set(&mut self, kind: SlabKind, w: usize, value: u64) {
        match kind {
            SlabKind::Bytes => self.bytes[w] = value as u8,
            SlabKind::Halves => self.halves[w] = value as u16,
            SlabKind::Words => self.words[w >> 4].0[w & 15] = value as u32,
        }
    }
}

/// Per-pass and persistent state of the interpreter. The fields a pass touches come first,
/// in declaration order (`repr(C)`): a switch's pass finds them in a few adjacent lines.
#[derive(Debug)]
#[repr(C)]
pub(super) struct State {
    /// Header validity (bit per header).
    pub(super) valid: u64,
    /// Headers the parser extracted this pass.
    pub(super) parsed: u64,
    /// Headers whose fields were written (or made valid) this pass.
    pub(super) dirty: u64,
    /// Headers whose PHV fields may be non-zero from an earlier pass.
    pub(super) stale: u64,
    /// Headers made valid (all fields zeroed) by the program this pass.
    pub(super) zeroed: u64,
    pub(super) payload_offset: usize,
    /// Which metadata may be non-zero in `phv` (`META_*`).
    pub(super) meta: u8,
    pub(super) regs: Regs,
    /// Shared with other models while equal ([`intern_table`]); copied on write.
    pub(super) tables: Arc<[Arc<TableState>]>,
    /// How many views exist (a register action checks its register's view only then).
    pub(super) live_views: AtomicUsize,
    pub(super) routed: Option<u16>,
    /// The state of the random stream ([`State::random`]).
    pub(super) random_state: u64,
    /// Whether the parser extracted headers in deparse (declaration) order.
    pub(super) in_order: bool,
    /// A table changed since the tables were last shared.
    pub(super) tables_changed: bool,
    pub(super) routing: Routing,
    /// Byte offset of each extracted header in the input.
    pub(super) offsets: [u32; MAX_HEADERS],
    /// Each register as the control plane reads it (`hi << 32 | lo`), built on demand by
    /// [`DataPlane::register_read_all`] and dropped when the data plane writes it.
    pub(super) views: Vec<OnceLock<Vec<u64>>>,
    /// The PHV of a pass that cannot use the thread's shared one (a pass started inside
    /// another pass of the same program), made on first use.
    pub(super) own_phv: Option<Box<PhvBuf>>,
}

pub(super) struct PassCtx<'a> {
    pub(super) packet: &'a [u8],
    pub(super) clone_bytes: &'a mut Vec<u8>,
    pub(super) digests: &'a mut Vec<DigestMessage>,
    pub(super) forward: Forward,
    pub(super) dropped: bool,
    pub(super) clone: bool,
}

/// A header field at byte `offset` of the packet (the header fits): the big-endian 64-bit
/// word at its first byte shifted right by `shift`, or read bit by bit (`NO_WINDOW`, or
/// the word runs past the end of the packet).
#[inline(always)]
pub(super) fn extract(
    packet: &[u8],
    offset: usize,
    byte: u16,
    bit: u16,
    shift: u8,
    width: u8,
) -> u64 {
    let at = offset + byte as usize;
    match packet.get(at..at + 8) {
        Some(b) if shift != NO_WINDOW => {
            let w = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            (w >> shift) & mask(width)
        }
        _ => read_bits(packet, offset * 8 + bit as usize, width),
    }
}

/// The big-endian 64-bit word at `at`, if the buffer holds it.
#[inline(always)]
pub(super) fn window(buf: &[u8], at: usize) -> Option<u64> {
    buf.get(at..at + 8)
        .map(|b| u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

impl State {
    /// Runs `pass` with this thread's PHV for `code`'s program (shared by every model of the
    /// program, so it stays in cache however many switches take turns). The PHV is handed
    /// to the pass apart from the state, so that the emitted code knows the two do not
    /// alias and keeps PHV values in registers.
    pub(super) fn with_phv<R>(
        &mut self,
        code: &Arc<Code>,
        pass: impl FnOnce(&mut State, &mut PhvBuf) -> R,
    ) -> R {
        let mut pass = Some(pass);
        let shared = SCRATCH.with(|scratch| {
            let Ok(mut scratch) = scratch.try_borrow_mut() else {
                return None;
            };
            let at = match scratch
                .iter()
                .position(|s| std::ptr::eq(s.code.as_ptr(), Arc::as_ptr(code)))
            {
                Some(at) => at,
                None => {
                    scratch.retain(|s| s.code.strong_count() > 0);
                    if scratch.len() >= MAX_SCRATCH {
                        scratch.remove(0);
                    }
                    scratch.push(Scratch {
                        code: Arc::downgrade(code),
                        phv: new_phv(),
                        stale: 0,
                        meta: META_CLEAN,
                    });
                    scratch.len() - 1
                }
            };
            let s = &mut scratch[at];
            self.stale = s.stale;
            // While the pass runs its fields count as stale (if the pass panics, they
            // stay so).
            s.stale = u64::MAX;
            self.meta = s.meta;
            s.meta = META_ANY;
            self.dirty = 0;
            let r = pass.take().map(|pass| pass(self, &mut s.phv));
            s.stale = self.stale | self.dirty;
            s.meta = self.meta;
            r
        });
        match (shared, pass) {
            (Some(r), _) => r,
            (None, Some(pass)) => {
                // This model's own PHV, as another pass (or none) left it.
                self.stale = u64::MAX;
                self.meta = META_ANY;
                self.dirty = 0;
                let mut own = std::mem::take(&mut self.own_phv);
                let phv = own.get_or_insert_with(new_phv);
                let r = pass(self, phv);
                self.own_phv = own;
                r
            }
            (None, None) => unreachable!("the pass ran with the shared PHV"),
        }
    }

    /// Starts a pass: no header is valid. The interpreter (`emitted` false) also makes the
    /// metadata and action parameters the pass may read before writing
    /// ([`Code::meta_exposed`] of `gress`, 0 ingress, 1 egress) read as zero, and gives
    /// every other metadata field an all-ones value, so a read the analysis missed changes
    /// the interpreter's result and the differential test fails; the emitted pass clears
    /// the same ranges itself, with constant bounds.
    pub(super) fn reset(&mut self, code: &Code, gress: usize, emitted: bool, phv: &mut PhvBuf) {
        self.stale |= self.dirty;
        if !emitted {
            for (start, end) in &code.meta_ranges {
                phv[*start..*end].copy_from_slice(&code.masks[*start..*end]);
            }
            for (start, end) in &code.meta_exposed[gress] {
                phv[*start..*end].fill(0);
            }
            self.meta = META_ANY;
        }
        self.valid = 0;
        self.parsed = 0;
        self.dirty = 0;
        self.zeroed = 0;
        self.in_order = true;
    }

    pub(super) fn parse(&mut self, code: &Code, packet: &[u8], phv: &mut PhvBuf) {
        let mut state = 0usize;
        let mut offset = 0usize;
        let mut last: i32 = -1;
        while let Some(s) = code.parser.get(state) {
            if s.header != NO_HEADER {
                let h = s.header as usize;
                if offset + s.bytes as usize > packet.len() {
                    break;
                }
                for f in &code.pfields[s.fields as usize..s.fields_end as usize] {
                    phv[f.phv as usize] = extract(packet, offset, f.byte, f.bit, f.shift, f.width);
                }
                self.extracted(h, offset, &mut last);
                offset += s.bytes as usize;
            }
            match s.kind {
                GOTO => state = s.next as usize,
                SELECT => {
                    let v = phv[s.select as usize];
                    match code.pcases[s.cases as usize..s.cases_end as usize]
                        .iter()
                        .find(|(c, _)| *c == v)
                    {
                        Some((_, t)) if *t != NO_SLOT => state = *t as usize,
                        _ => break,
                    }
                }
                _ => break,
            }
        }
        self.parse_done(code, offset, phv);
    }

    /// Header `h` was extracted at byte `offset`; `last` is the previous header extracted.
    #[inline(always)]
    pub(super) fn extracted(&mut self, h: usize, offset: usize, last: &mut i32) {
        self.valid |= 1 << h;
        self.parsed |= 1 << h;
        self.offsets[h] = offset as u32;
        if (h as i32) < *last {
            self.in_order = false;
        }
        *last = h as i32;
    }

    /// The parser stopped at byte `offset`.
    #[inline(always)]
    pub(super) fn parse_done(&mut self, code: &Code, offset: usize, phv: &mut PhvBuf) {
        self.payload_offset = offset;
        // Fields of headers not extracted now read as zero, as after a fresh reset. A
        // switch mostly sees the header stack of its previous pass again: nothing to clear.
        let stale = self.stale & !self.parsed;
        if stale != 0 {
            self.clear_unparsed(code, stale, phv);
        }
        self.stale = self.parsed;
    }

    /// Zeroes the fields of the headers in `stale` (set by an earlier pass, not extracted
    /// by this one).
    #[inline(never)]
    pub(super) fn clear_unparsed(&mut self, code: &Code, mut stale: u64, phv: &mut PhvBuf) {
        while stale != 0 {
            let h = stale.trailing_zeros() as usize;
            stale &= stale - 1;
            let (a, b) = code.header_fields[h];
            for f in &code.pfields[a as usize..b as usize] {
                phv[f.phv as usize] = 0;
            }
        }
    }

    /// Writes `fields` (of a header at byte `base`) from the PHV into `out`.
    pub(super) fn emit_fields(&self, fields: &[CField], out: &mut [u8], base: usize, phv: &PhvBuf) {
        for f in fields {
            write_bits(out, base * 8 + f.bit as usize, f.width, phv[f.phv as usize]);
        }
    }

    /// Shares each table, and the set of them, with the models that have the same entries.
    #[cold]
    pub(super) fn share_tables(&mut self) {
        let tables: Vec<Arc<TableState>> = self
            .tables
            .iter()
            .map(|t| intern_table(Arc::clone(t)))
            .collect();
        self.tables = intern_table_set(tables);
        self.tables_changed = false;
    }

    /// Whether the deparser would emit the input packet as it is: the valid headers are
    /// the parsed ones, in order, and none was written.
    #[inline(always)]
    pub(super) fn unchanged(&self) -> bool {
        self.valid == self.parsed && self.in_order && self.dirty & self.valid == 0
    }

    /// Writes the packet as the deparser emits it. A parsed header starts from its input
    /// bytes and gets the fields the program writes re-emitted if it was written; a header
    /// the program made valid is emitted whole. When the valid headers are the parsed ones
    /// (in order), the output is a copy of the input with the written headers patched.
    pub(super) fn deparse(&self, code: &Code, packet: &[u8], out: &mut Vec<u8>, phv: &PhvBuf) {
        out.clear();
        if self.valid == self.parsed && self.in_order {
            out.extend_from_slice(packet);
            let mut dirty = self.dirty & self.valid;
            while dirty != 0 {
                let h = dirty.trailing_zeros() as usize;
                dirty &= dirty - 1;
                let header = &code.headers[h];
                let fields = if self.zeroed & (1 << h) != 0 {
                    &header.fields
                } else {
                    &header.emit
                };
                self.emit_fields(fields, out, self.offsets[h] as usize, phv);
            }
            return;
        }
        for (h, header) in code.headers.iter().enumerate() {
            let bit = 1 << h;
            if self.valid & bit == 0 {
                continue;
            }
            let start = out.len();
            if self.parsed & !self.zeroed & bit != 0 {
                let at = self.offsets[h] as usize;
                out.extend_from_slice(&packet[at..at + header.bytes]);
                if self.dirty & bit != 0 {
                    self.emit_fields(&header.emit, out, start, phv);
                }
            } else {
                out.resize(start + header.bytes, 0);
                self.emit_fields(&header.fields, out, start, phv);
            }
        }
        if self.payload_offset < packet.len() {
            out.extend_from_slice(&packet[self.payload_offset..]);
        }
    }

    /// One TNA RegisterAction: conditions, predicated updates, one output.
    pub(super) fn execute(&mut self, code: &Code, ra: u16, index: u64, phv: &PhvBuf) -> u64 {
        let ra = &code.register_actions[ra as usize];
        // Registers are powers of two; masking the index is the hardware's behaviour.
        let w = ra.base + ((index as usize) & ra.size_mask) * ra.stride + ra.offset;
        let lo = self.regs.get(ra.kind, w);
        let hi = if ra.pair {
            self.regs.get(ra.kind, w + 1)
        } else {
            0
        };
        let m = ra.word_mask;
        let mut outcome = 0usize;
        for (i, c) in ra.conditions.iter().enumerate() {
            if c.test(phv, lo, hi, m) {
                outcome |= 1 << i;
            }
        }
        let o = ra.outcomes[outcome];
        let update = |u: u8| ra.updates[u as usize].apply(phv, lo, hi, m);
        let new_lo = if o.lo == NONE { lo } else { update(o.lo) };
        let new_hi = if o.hi == NONE { hi } else { update(o.hi) };
        if ra.writes {
            self.regs.set(ra.kind, w, new_lo);
            if ra.pair {
                self.regs.set(ra.kind, w + 1, new_hi);
            }
            if *self.live_views.get_mut() != 0 {
                self.drop_view(ra.register as usize);
            }
        }
        if o.out == NONE {
            return 0;
        }
        match ra.outputs[o.out as usize] {
            SaluOutputValue::Old(Word::Lo) => lo,
            SaluOutputValue::Old(Word::Hi) => hi,
            SaluOutputValue::New(Word::Lo) => new_lo,
            SaluOutputValue::New(Word::Hi) => new_hi,
            SaluOutputValue::Const(c) => c,
        }
    }

    /// A [`WordAction`] on word `w` of its slab (emitted code passes a constant action).
    #[inline(always)]
    pub(super) fn word_at(&mut self, code: &Code, a: &WordAction, w: usize, phv: &PhvBuf) -> u64 {
        let w = a.base as usize + w;
        let cell = &mut self.regs.words[w >> 4].0[w & 15];
        word_step(a, &code.word_conds, cell, phv)
    }

    /// Drops every control-plane view: a pass is about to run and may write any register
    /// (emitted code then needs no check per register write).
    #[cold]
    pub(super) fn drop_views(&mut self) {
        for v in self.views.iter_mut() {
            v.take();
        }
        *self.live_views.get_mut() = 0;
    }

    /// A register action in its [`WordAction`] form.
    #[inline(always)]
    pub(super) fn execute_word(&mut self, code: &Code, wa: u16, index: u64, phv: &PhvBuf) -> u64 {
        let a = &code.word_actions[wa as usize];
        let w = a.base as usize
            + ((index as usize) & a.size_mask as usize) * a.stride as usize
            + a.offset as usize;
        let cell = &mut self.regs.words[w >> 4].0[w & 15];
        let value = word_step(a, &code.word_conds, cell, phv);
        if a.writes && *self.live_views.get_mut() != 0 {
            self.drop_view(code.word_registers[wa as usize] as usize);
        }
        value
    }

    /// The word actions of an [`Ins::ExecuteGroup`]: one cell group, one address.
    pub(super) fn execute_group(
        &mut self,
        code: &Code,
        members: &[(u16, u16, u64)],
        index: u64,
        phv: &mut PhvBuf,
    ) {
        let Some(&(first, _, _)) = members.first() else {
            return;
        };
        let first = &code.word_actions[first as usize];
        let base = first.base as usize
            + ((index as usize) & first.size_mask as usize) * first.stride as usize;
        let lines = &mut self.regs.words;
        for &(wa, out, mask) in members {
            let wa = &code.word_actions[wa as usize];
            let w = base + wa.offset as usize;
            let value = word_step(wa, &code.word_conds, &mut lines[w >> 4].0[w & 15], phv);
            if out != NO_SLOT {
                phv[out as usize] = value & mask;
            }
        }
        if *self.live_views.get_mut() != 0 {
            for &(wa, _, _) in members {
                if code.word_actions[wa as usize].writes {
                    self.drop_view(code.word_registers[wa as usize] as usize);
                }
            }
        }
    }

    /// The next value of the model's random stream (the program's `Random` extern):
    /// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014) over `random_state`, which
    /// [`Model::seed_random`] sets, so the same seed and packets give the same draws.
    #[inline]
    pub(super) fn random(&mut self) -> u64 {
        let mut generator = hawkmesh_wire::rng::SplitMix64::new(self.random_state);
        let value = generator.next_u64();
        self.random_state = self
            .random_state
            .wrapping_add(hawkmesh_wire::rng::SPLITMIX64_GAMMA);
        value
    }

    pub(super) fn hash(&self, code: &Code, unit: u16, phv: &PhvBuf) -> u64 {
        let h = &code.hashes[unit as usize];
        hash_inputs(phv, &h.inputs, h.mask)
    }

    pub(super) fn set_params(&mut self, code: &Code, action: u16, args: &[u64], phv: &mut PhvBuf) {
        for ((p, m), v) in code.action_params[action as usize].iter().zip(args) {
            phv[*p as usize] = v & m;
        }
    }

    /// The direct entry of table `t` for `key` (emitted code only): `None` beyond the direct
    /// array (the generic [`State::select`] then looks the key up), an entry whose action
    /// is `NO_SLOT` where no entry is installed (the default action applies).
    #[inline(always)]
    pub(super) fn direct_entry(&self, t: u16, key: u64) -> Option<Direct> {
        let direct = &self.tables[t as usize].direct;
        usize::try_from(key)
            .ok()
            .and_then(|k| direct.get(k))
            .copied()
    }

    /// Whether this model takes the forwarding table's result from its input (emitted
    /// code: the table is then not looked up), and the routed port if there is one.
    #[inline(always)]
    pub(super) fn routed_from_input(&self) -> Option<Option<u16>> {
        (self.routing == Routing::FromInput).then_some(self.routed)
    }

    /// Looks `t` up: sets the chosen action's parameters and returns the action.
    pub(super) fn select(&mut self, code: &Code, t: u16, phv: &mut PhvBuf) -> u16 {
        let table = &code.tables[t as usize];
        if table.forwarding && self.routing == Routing::FromInput {
            if let (Some(port), Some(action)) = (self.routed, table.first_action) {
                if let Some((p, m)) = code.action_params[action as usize].first() {
                    phv[*p as usize] = port as u64 & m;
                }
                return action;
            }
            self.set_params(code, table.default_action, &table.default_params, phv);
            return table.default_action;
        }
        let mut key: u128 = 0;
        for (f, w) in &table.keys {
            key = (key << w) | phv[*f as usize] as u128;
        }
        let state = &self.tables[t as usize];
        if key < state.direct.len() as u128 {
            let d = state.direct[key as usize];
            if d.action == NO_SLOT {
                self.set_params(code, table.default_action, &table.default_params, phv);
                return table.default_action;
            }
            for ((p, m), v) in code.action_params[d.action as usize].iter().zip(d.params) {
                phv[*p as usize] = v & m;
            }
            return d.action;
        }
        let hit = if table.all_exact {
            state.exact.get(&key).map(|(a, p)| (a.0, p))
        } else {
            state
                .ternary
                .iter()
                .find(|(v, m, _, _, _)| key & m == *v & m)
                .map(|(_, _, _, a, p)| (a.0, p))
        };
        match hit {
            Some((a, params)) => {
                for ((p, m), v) in code.action_params[a as usize].iter().zip(params) {
                    phv[*p as usize] = v & m;
                }
                a
            }
            None => {
                self.set_params(code, table.default_action, &table.default_params, phv);
                table.default_action
            }
        }
    }

    pub(super) fn run(&mut self, code: &Code, start: u32, ctx: &mut PassCtx, phv: &mut PhvBuf) {
        let mut pc = start as usize;
        while let Some(ins) = code.ins.get(pc) {
            pc += 1;
            match *ins {
                Ins::Mov { dst, src, mask } => {
                    phv[dst as usize] = phv[src as usize] & mask;
                }
                Ins::Imm { dst, value } => phv[dst as usize] = value,
                Ins::Bin {
                    op,
                    dst,
                    a,
                    b,
                    mask,
                } => {
                    phv[dst as usize] = bin(op, phv[a as usize], phv[b as usize], mask);
                }
                Ins::BinImm {
                    op,
                    dst,
                    a,
                    b,
                    mask,
                } => {
                    phv[dst as usize] = bin(op, phv[a as usize], b, mask);
                }
                Ins::Shl { dst, a, n, mask } => {
                    phv[dst as usize] = phv[a as usize].wrapping_shl(n as u32) & mask;
                }
                Ins::Shr { dst, a, n, mask } => {
                    phv[dst as usize] = phv[a as usize].wrapping_shr(n as u32) & mask;
                }
                Ins::ShlOr { dst, a, n, b, mask } => {
                    phv[dst as usize] =
                        (phv[a as usize].wrapping_shl(n as u32) | phv[b as usize]) & mask;
                }
                Ins::JumpCmp { cmp, a, b, target } => {
                    if cmp.test(phv[a as usize], cmp.norm(phv[b as usize])) {
                        pc = target as usize;
                    }
                }
                Ins::JumpCmpImm { cmp, a, b, target } => {
                    if cmp.test(phv[a as usize], b) {
                        pc = target as usize;
                    }
                }
                Ins::JumpValid(h, target) => {
                    if self.valid & (1 << h) != 0 {
                        pc = target as usize;
                    }
                }
                Ins::JumpInvalid(h, target) => {
                    if self.valid & (1 << h) == 0 {
                        pc = target as usize;
                    }
                }
                Ins::Jump(target) => pc = target as usize,
                Ins::Dirty(h) => self.dirty |= 1 << h,
                Ins::Execute {
                    ra,
                    index,
                    out,
                    mask,
                } => {
                    let v = self.execute(code, ra, phv[index as usize], phv);
                    if out != NO_SLOT {
                        phv[out as usize] = v & mask;
                    }
                }
                Ins::ExecuteGroup {
                    first,
                    count,
                    index,
                } => {
                    let members = &code.group_members[first as usize..][..count as usize];
                    self.execute_group(code, members, phv[index as usize], phv);
                    pc += count as usize - 1;
                }
                Ins::CondSet {
                    cmp,
                    a,
                    b,
                    dst,
                    value,
                } => {
                    if cmp.test(phv[a as usize], cmp.norm(phv[b as usize])) {
                        phv[dst as usize] = value;
                    }
                }
                Ins::CondSetImm {
                    cmp,
                    a,
                    dst,
                    b,
                    value,
                } => {
                    if cmp.test(phv[a as usize], b) {
                        phv[dst as usize] = value;
                    }
                }
                Ins::ExecuteWord {
                    wa,
                    index,
                    out,
                    mask,
                } => {
                    let v = self.execute_word(code, wa, phv[index as usize], phv);
                    if out != NO_SLOT {
                        phv[out as usize] = v & mask;
                    }
                }
                Ins::Hash { unit, dst, mask } => {
                    phv[dst as usize] = self.hash(code, unit, phv) & mask;
                }
                Ins::Random { dst, mask } => phv[dst as usize] = self.random() & mask,
                Ins::SetValid(h) => self.set_valid(code, h, phv),
                Ins::SetInvalid(h) => self.valid &= !(1 << h),
                Ins::Unicast(port) => {
                    ctx.forward = Forward::Unicast(phv[port as usize] as u16);
                }
                Ins::Multicast(g) => ctx.forward = Forward::Multicast(g),
                Ins::Drop => ctx.dropped = true,
                Ins::Clone => {
                    // The copy is taken here; in ingress the rule checker guarantees that no
                    // header was rewritten before this point.
                    ctx.clone = true;
                    self.deparse(code, ctx.packet, ctx.clone_bytes, phv);
                }
                // The values are filled in at the end of the pass (the deparser sends
                // the digest with the fields' final values).
                Ins::Digest(d) => ctx.digests.push(DigestMessage {
                    digest: DigestId(d),
                    values: Vec::new(),
                }),
                Ins::Apply(t) => {
                    let action = self.select(code, t, phv);
                    self.run(code, code.action_start[action as usize], ctx, phv);
                }
                Ins::Return => return,
            }
        }
    }

    pub(super) fn set_valid(&mut self, code: &Code, h: u8, phv: &mut PhvBuf) {
        if self.valid & (1 << h) == 0 {
            self.valid |= 1 << h;
            self.dirty |= 1 << h;
            self.zeroed |= 1 << h;
            self.stale |= 1 << h;
            for f in &code.headers[h as usize].fields {
                phv[f.phv as usize] = 0;
            }
        }
    }

    /// Fills `c` (which holds the default) with the values of `fields`.
    pub(super) fn carry_into(&self, fields: &[(u16, u64)], c: &mut Carried, phv: &PhvBuf) {
        for (v, (f, _)) in c.values.iter_mut().zip(fields) {
            *v = phv[*f as usize];
        }
    }

    pub(super) fn carry(&self, fields: &[(u16, u64)], phv: &PhvBuf) -> Carried {
        let mut c = Carried::default();
        self.carry_into(fields, &mut c, phv);
        c
    }

    /// Restores what ingress carried in a [`Carried`]: a clone's cloned fields, or a
    /// normal packet's bridged ones.
    pub(super) fn restore_carried(&mut self, code: &Code, carried: &Carried, phv: &mut PhvBuf) {
        let fields = if carried.clone_kind != 0 {
            &code.cloned
        } else {
            &code.bridged
        };
        self.restore(fields, carried, phv);
    }

    pub(super) fn restore(&mut self, fields: &[(u16, u64)], carried: &Carried, phv: &mut PhvBuf) {
        for (v, (f, m)) in carried.values.iter().zip(fields) {
            phv[*f as usize] = v & m;
        }
    }

    #[inline(always)]
    pub(super) fn set_intrinsic(
        &mut self,
        code: &Code,
        which: Intrinsic,
        value: u64,
        phv: &mut PhvBuf,
    ) {
        let (f, m) = code.intrinsic(which);
        phv[f as usize] = value & m;
    }

    /// Drops the control-plane view of register `r` (its cells changed).
    pub(super) fn drop_view(&mut self, r: usize) {
        if self.views[r].take().is_some() {
            *self.live_views.get_mut() -= 1;
        }
    }

    /// The control-plane view of register `r`, built if needed.
    pub(super) fn view(&self, code: &Code, r: usize) -> &[u64] {
        let loc = &code.registers[r];
        self.views[r].get_or_init(|| {
            self.live_views.fetch_add(1, Ordering::Relaxed);
            (0..loc.size).map(|i| self.cell(loc, i)).collect()
        })
    }

    /// A register cell as the control plane sees it (`hi << 32 | lo` for pairs).
    pub(super) fn cell(&self, loc: &RegLoc, index: usize) -> u64 {
        let w = loc.base + index * loc.stride + loc.offset;
        if loc.pair {
            (self.regs.get(loc.kind, w + 1) << 32) | self.regs.get(loc.kind, w)
        } else {
            self.regs.get(loc.kind, w)
        }
    }
}
