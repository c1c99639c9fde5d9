//! The packet traces in `codegen/traces/` on the executable model and, when selected with
//! `HAWKMESH_BMV2=1` (an external tool is selected by an environment variable, so a plain
//! `cargo test` runs the model side and never skips it), on BMv2 `simple_switch` running `p4/v1model/hawkmesh.p4`, comparing the
//! emitted packets and register dumps with the model. How to run it: `hw-lab/bmv2.md`.
//!
//! BMv2 side: `p4c-bm2-ss` compiles the program; `simple_switch --use-files` reads one
//! `<iface>_in.pcap` per port and writes `<iface>_out.pcap` (BMv2 simple_switch docs,
//! `--use-files`: packets are replayed with the pcap files' relative timing after the given
//! wait); `simple_switch_CLI` configures the mirror session, the multicast group and the
//! routes, and reads registers (`register_read <name>` prints the whole array).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hawkmesh_codegen::trace::{run_model, run_model_times, Trace, TraceRun, BASE_US, LAB_PORTS};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_wire::polling::POLLING_PACKET_OFFSET;

/// Smallest gap between steps: BMv2 replays in real time, and a packet must have left the
/// switch before the next arrives so queues stay empty (the model's `process` has zero
/// queueing) and scheduling jitter cannot reorder time-sensitive steps.
const MIN_GAP_US: u64 = 100;
/// Longest trace: 2 ms spans at most 3 epochs of 2^20 ns, fewer than the ring's 4, so
/// folding the ring (see [`normalise_register`]) never mixes two uses of one slot.
const MAX_SPAN_US: u64 = 2_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The program `p4/v1model/hawkmesh.p4` is generated from.
fn lab_program() -> Arc<Program> {
    Arc::new(program(&HawkeyeParams::default()).expect("program builds"))
}

fn traces() -> Vec<(String, Trace)> {
    let dir = root().join("codegen/traces");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("codegen/traces exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read trace");
            let trace = Trace::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), trace)
        })
        .collect()
}

fn constant(program: &Program, name: &str) -> u64 {
    program
        .constant(name)
        .unwrap_or_else(|| panic!("constant {name}"))
}

// ---------------------------------------------------------------------------------------
// Normalised view: what is compared between the model and BMv2.

/// Packets per egress port (the CPU port included) in emission order, and registers after
/// the trace, both normalised.
#[derive(Debug, Default, PartialEq, Eq)]
struct View {
    ports: BTreeMap<u16, Vec<Vec<u8>>>,
    registers: BTreeMap<String, Vec<u64>>,
    /// Queue-depth sums and the counter register of the packets they sum over.
    depths: Depths,
    /// BMv2 only: epochs between the first and the last its epoch-id registers record.
    epoch_span: Option<u64>,
}

/// Queue-depth sums by register: the counter register of their packets, the folded sums.
type Depths = BTreeMap<String, (String, Vec<u64>)>;

/// The model leaves the IPv4 header checksum at 0; the v1model program recomputes it in
/// `MainComputeChecksum` (v1model.p4 `update_checksum`, csum16 = RFC 1071). Recompute it on
/// both sides so only a real header difference shows. `report` (CPU port only) is where an
/// eviction report's clock-valued bytes lie, and a polling copy's ingress timestamp
/// ([`Report`]).
fn normalise_packet(mut bytes: Vec<u8>, report: Option<&Report>) -> Vec<u8> {
    let mut frame = 0;
    if let Some(r) = report {
        if r.is_report(&bytes) {
            for range in &r.clock {
                bytes[range.clone()].fill(0);
            }
            frame = r.bytes;
        } else if let Some(tstamp) = bytes.get_mut(r.polling_tstamp.clone()) {
            tstamp.fill(0);
        }
    }
    let eth = &mut bytes[frame..];
    if eth.len() >= 34 && eth[12..14] == [0x08, 0x00] && eth[14] >> 4 == 4 {
        let ihl = (eth[14] & 0x0F) as usize * 4;
        if ihl >= 20 && eth.len() >= 14 + ihl {
            eth[24] = 0;
            eth[25] = 0;
            let mut sum: u32 = 0;
            for pair in eth[14..14 + ihl].chunks(2) {
                sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
            }
            while sum > 0xFFFF {
                sum = (sum & 0xFFFF) + (sum >> 16);
            }
            let c = !(sum as u16);
            eth[24..26].copy_from_slice(&c.to_be_bytes());
        }
    }
    bytes
}

/// The eviction report an egress clone carries in front of the evicting packet (HAWKEYE
/// §3.3; the `eviction` header of the program). Its epoch id and ring slot are the switch
/// clock's, its queue-depth sum the target's queues, its first and last offsets clock
/// times: those bytes are zeroed on both sides; the evicted flow's key, egress port and
/// packet counts are compared. A polling CPU copy carries the switch's ingress timestamp
/// (`polling.context_tstamp`): zeroed too.
struct Report {
    /// Header length in bytes.
    bytes: usize,
    /// Byte ranges of the clock- and queue-valued fields.
    clock: Vec<std::ops::Range<usize>>,
    /// Bytes of a polling copy's ingress timestamp, from the frame's start.
    polling_tstamp: std::ops::Range<usize>,
}

impl Report {
    fn of(program: &Program) -> Report {
        let header = program
            .headers
            .iter()
            .find(|h| h.name == "eviction")
            .expect("the program has an eviction header");
        let mut clock = Vec::new();
        let mut bit = 0usize;
        for f in &header.fields {
            let field = &program.fields[f.0 as usize];
            let width = field.width as usize;
            assert!(
                bit % 8 == 0 && width % 8 == 0,
                "eviction.{} is not byte-aligned",
                field.name
            );
            if matches!(
                field.name.as_str(),
                "epoch_id"
                    | "epoch_index"
                    | "unpaused_qdepth_sum"
                    | "first_offset_ns"
                    | "last_offset_ns"
            ) {
                clock.push(bit / 8..(bit + width) / 8);
            }
            bit += width;
        }
        assert_eq!(clock.len(), 5, "the eviction header's clock fields");
        let polling = program
            .headers
            .iter()
            .find(|h| h.name == "polling")
            .expect("the program has a polling header");
        let mut at = 0usize;
        let mut polling_tstamp = None;
        for f in &polling.fields {
            let field = &program.fields[f.0 as usize];
            let width = field.width as usize;
            if field.name == "context_tstamp" {
                let start = POLLING_PACKET_OFFSET + at / 8;
                polling_tstamp = Some(start..start + width / 8);
            }
            at += width;
        }
        Report {
            bytes: bit / 8,
            clock,
            polling_tstamp: polling_tstamp.expect("polling.context_tstamp"),
        }
    }

    /// A CPU packet is an eviction report when it is not itself an IPv4 frame (every other
    /// CPU copy is a polling packet) and an IPv4 frame follows the report.
    fn is_report(&self, bytes: &[u8]) -> bool {
        let ipv4 = |b: &[u8]| b.len() >= 15 && b[12..14] == [0x08, 0x00] && b[14] >> 4 == 4;
        !ipv4(bytes) && bytes.len() > self.bytes && ipv4(&bytes[self.bytes..])
    }
}

/// How one register is compared between the model and BMv2.
///
/// BMv2's clock is wall-clock µs since `simple_switch` started, not the trace's time, so
/// (1) words holding times or epoch ids (the clock's bits above the ring index) cannot match
/// and are left out, and (2) the epoch ring slot a packet lands in differs, so ring
/// registers are folded over the slots: counters summed, identities kept as the maximum,
/// per-slot bitmaps OR-ed. Where the epoch boundaries fall between the steps is handled by
/// [`phase_candidates`]. Queue-depth sums are the target's queues and are checked, not
/// compared ([`Rule::QueueDepth`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// Time-valued or an epoch id: not comparable across clocks.
    Skip,
    /// Compared cell by cell.
    Exact,
    /// A ring of `EPOCHS` slots × stride: counters summed over the slots.
    RingSum,
    /// A ring: identities (flow keys, ports), kept as the maximum over the slots.
    RingMax,
    /// A ring of pairs `lo = epoch id, hi = counter`: the counters summed over the slots.
    RingHiSum,
    /// One register per ring slot, pairs `lo = epoch id, hi = bitmap`: the bitmaps of
    /// every slot OR-ed into the view entry named here.
    SlotBitmap(String),
    /// Pairs whose hi word is time-valued: the lo word only.
    LoOnly,
    /// Pairs whose lo word is an epoch id: the hi word only.
    HiOnly,
    /// A ring of queue-depth sums (target unit) whose packets are counted in the named
    /// register: zero where that counter is zero, bounded elsewhere.
    QueueDepth(&'static str),
}

/// `name` with the `_w<digits>` word suffix split off.
fn word_suffix(name: &str) -> Option<(&str, &str)> {
    let at = name.rfind("_w")?;
    let digits = &name[at + 2..];
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| (&name[..at], digits))
}

/// The rule of every register of the v1model program; `None` for a register this harness
/// does not know, so a new register must be given a rule before BMv2 can be compared.
fn rule(name: &str) -> Option<Rule> {
    let r = match name {
        "port_enq_epoch" | "port_epoch" | "meter_epoch" | "flow_epoch" => Rule::Skip,
        "flow_first_offset" | "flow_last_offset" => Rule::Skip,
        "polling_dedupe" => Rule::LoOnly,
        // Every lab port is fabric-facing: no rate window is ever opened, nothing refused.
        "polling_rate" | "polling_refused" => Rule::Exact,
        "port_packets"
        | "port_paused_packets"
        | "meter_bytes"
        | "flow_packets"
        | "flow_paused_packets" => Rule::RingSum,
        "flow_key_src" | "flow_key_dst" | "flow_key_ports" | "flow_egress_port" => Rule::RingMax,
        "port_xon" => Rule::RingHiSum,
        "port_qdepth_sum" | "port_unpaused_qdepth_sum" => Rule::QueueDepth("port_packets"),
        "flow_unpaused_qdepth_sum" => Rule::QueueDepth("flow_packets"),
        "sketch_total" | "sketch_key" | "sketch_votes" | "sketch_light" => Rule::Exact,
        _ => {
            if let Some(q) = name.strip_prefix("pause_end_p") {
                return q.parse::<u8>().is_ok().then_some(Rule::Skip);
            }
            let (stem, w) = word_suffix(name)?;
            match stem {
                "pfc_paused" => Rule::LoOnly,
                "fanout_last" => Rule::HiOnly,
                "fanout_held" => Rule::Exact,
                _ => {
                    let (base, slot) = stem.rsplit_once("_e")?;
                    if !slot.bytes().all(|b| b.is_ascii_digit()) || slot.is_empty() {
                        return None;
                    }
                    match base {
                        "fanout" | "paused_seen" | "pfc_xoff" => {
                            Rule::SlotBitmap(format!("{base}_w{w} (all ring slots)"))
                        }
                        _ => return None,
                    }
                }
            }
        }
    };
    Some(r)
}

/// Normalised registers: compared entries, and queue-depth sums kept aside with the counter
/// register their packets are counted in.
fn normalise_registers(
    program: &Program,
    registers: &[(String, Vec<u64>)],
) -> (BTreeMap<String, Vec<u64>>, Depths) {
    let epochs = constant(program, "EPOCHS") as usize;
    let fold = |cells: &[u64], f: &dyn Fn(u64, u64) -> u64| {
        let stride = cells.len() / epochs;
        let mut folded = vec![0u64; stride];
        for (i, c) in cells.iter().enumerate() {
            folded[i % stride] = f(folded[i % stride], *c);
        }
        folded
    };
    let mut compared = BTreeMap::new();
    let mut depths = BTreeMap::new();
    for (name, cells) in registers {
        let rule = rule(name).unwrap_or_else(|| panic!("register {name} has no comparison rule"));
        let hi = |c: &u64| c >> 32;
        let lo = |c: &u64| c & 0xFFFF_FFFF;
        match rule {
            Rule::Skip => {}
            Rule::Exact => {
                compared.insert(name.clone(), cells.clone());
            }
            Rule::RingSum => {
                compared.insert(name.clone(), fold(cells, &|a, b| a.saturating_add(b)));
            }
            Rule::RingMax => {
                compared.insert(name.clone(), fold(cells, &|a, b| a.max(b)));
            }
            Rule::RingHiSum => {
                let his: Vec<u64> = cells.iter().map(hi).collect();
                compared.insert(name.clone(), fold(&his, &|a, b| a + b));
            }
            Rule::SlotBitmap(group) => {
                let entry = compared
                    .entry(group)
                    .or_insert_with(|| vec![0u64; cells.len()]);
                for (e, c) in entry.iter_mut().zip(cells) {
                    *e |= hi(c);
                }
            }
            Rule::LoOnly => {
                compared.insert(name.clone(), cells.iter().map(lo).collect());
            }
            Rule::HiOnly => {
                compared.insert(name.clone(), cells.iter().map(hi).collect());
            }
            Rule::QueueDepth(counter) => {
                depths.insert(
                    name.clone(),
                    (
                        counter.to_string(),
                        fold(cells, &|a, b| a.saturating_add(b)),
                    ),
                );
            }
        }
    }
    (compared, depths)
}

fn model_view(program: &Program, run: &TraceRun) -> View {
    let cpu = constant(program, "CPU_PORT") as u16;
    let report = Report::of(program);
    let mut view = View::default();
    for out in &run.outputs {
        for (port, bytes) in &out.ports {
            view.ports
                .entry(*port)
                .or_default()
                .push(normalise_packet(bytes.clone(), None));
        }
        for bytes in &out.cpu {
            view.ports
                .entry(cpu)
                .or_default()
                .push(normalise_packet(bytes.clone(), Some(&report)));
        }
    }
    (view.registers, view.depths) = normalise_registers(program, &run.registers);
    view
}

/// Epochs between the earliest and the latest epoch the ring registers of a run record
/// (epoch id × `EPOCHS` + ring slot, from the registers holding the epoch id of each
/// (slot, …) cell): how far the run's clock moved while the trace ran — at least (the ring
/// keeps a cell's last `EPOCHS` epochs only).
fn epoch_span(program: &Program, registers: &[(String, Vec<u64>)]) -> Option<u64> {
    let epochs = constant(program, "EPOCHS");
    let mut seen: Option<(u64, u64)> = None;
    for (name, cells) in registers {
        if !matches!(
            name.as_str(),
            "port_enq_epoch" | "port_epoch" | "meter_epoch" | "flow_epoch"
        ) {
            continue;
        }
        let stride = cells.len() as u64 / epochs;
        for (i, lap) in cells.iter().enumerate().filter(|(_, c)| **c != 0) {
            let at = lap * epochs + i as u64 / stride;
            seen = Some(seen.map_or((at, at), |(lo, hi)| (lo.min(at), hi.max(at))));
        }
    }
    seen.map(|(lo, hi)| hi - lo)
}

/// Most epoch boundaries the clock search puts between a trace's steps.
const MAX_LAG_EPOCHS: u32 = 5;

/// One clock the model is run under: per step, the epoch boundaries since the previous step
/// and the time it reaches the switch.
struct Clock {
    boundaries: Vec<u32>,
    times_ns: Vec<u64>,
}

/// The clocks under which the model may explain BMv2's run, fewest epoch boundaries first.
///
/// BMv2 is not in step with the trace: it runs this program at a few thousand packets per
/// second (≈ 0.3–0.4 ms per packet through both pipelines on the 2-core lab machine; BMv2
/// keeps fields and registers as arbitrary-precision numbers), so packets wait in its input
/// and egress queues and its clock, which the harness cannot set, lags behind the trace.
/// What the model computes depends on the clock through the epoch (2^EPOCH_LOG2_NS ns) each
/// step falls in — ring slots, a flow's record continuing or being evicted — and through
/// the time since an XOFF or a polling duplicate. Each clock here assigns the steps to
/// epochs: a step in the previous step's epoch keeps the trace's spacing, a step in a later
/// epoch arrives 1 µs after that epoch starts. Every assignment with at most
/// [`MAX_LAG_EPOCHS`] boundaries is listed (more than the ring's slots: a lagging run can
/// wrap the ring).
fn clocks(program: &Program, trace: &Trace) -> Vec<Clock> {
    let epoch_ns = 1u64 << constant(program, "EPOCH_LOG2_NS");
    let first_epoch = (BASE_US * 1000).div_ceil(epoch_ns);
    let n = trace.steps.len();
    let mut out = Vec::new();
    for total in 0..=MAX_LAG_EPOCHS {
        let mut boundaries = vec![0u32; n];
        compositions(&mut boundaries, 1, total, &mut |b| {
            let mut times = Vec::with_capacity(n);
            let mut epoch = first_epoch;
            for (i, step) in trace.steps.iter().enumerate() {
                let t = if i == 0 || b[i] > 0 {
                    epoch += u64::from(b[i]);
                    epoch * epoch_ns + 1000
                } else {
                    let gap = step.t_us - trace.steps[i - 1].t_us;
                    let t: u64 = times[i - 1] + gap * 1000;
                    if t >= (epoch + 1) * epoch_ns {
                        return; // the trace's spacing crosses a boundary this clock has not
                    }
                    t
                };
                times.push(t);
            }
            out.push(Clock {
                boundaries: b.to_vec(),
                times_ns: times,
            });
        });
    }
    out
}

/// Calls `f` with every way of writing `left` as a sum over `slots[at..]`.
fn compositions(slots: &mut [u32], at: usize, left: u32, f: &mut dyn FnMut(&[u32])) {
    if at >= slots.len() {
        if left == 0 {
            f(slots);
        }
        return;
    }
    for k in (0..=left).rev() {
        slots[at] = k;
        compositions(slots, at + 1, left - k, f);
    }
    slots[at] = 0;
}

/// Human-readable differences, at most `limit` lines.
fn differences(model: &View, bmv2: &View, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let ports: std::collections::BTreeSet<u16> = model
        .ports
        .keys()
        .chain(bmv2.ports.keys())
        .copied()
        .collect();
    let empty = Vec::new();
    for port in ports {
        let m = model.ports.get(&port).unwrap_or(&empty);
        let b = bmv2.ports.get(&port).unwrap_or(&empty);
        if m.len() != b.len() {
            out.push(format!(
                "port {port}: model emitted {} packets, BMv2 {}",
                m.len(),
                b.len()
            ));
        }
        for (i, (mp, bp)) in m.iter().zip(b).enumerate() {
            if mp != bp {
                let at = mp.iter().zip(bp).position(|(x, y)| x != y);
                out.push(match at {
                    Some(at) => format!(
                        "port {port} packet {i}: first difference at byte {at} (model {:#04x}, BMv2 {:#04x}); lengths {} / {}",
                        mp[at], bp[at], mp.len(), bp.len()
                    ),
                    None => format!(
                        "port {port} packet {i}: lengths differ (model {}, BMv2 {})",
                        mp.len(),
                        bp.len()
                    ),
                });
            }
        }
    }
    for (name, m) in &model.registers {
        let Some(b) = bmv2.registers.get(name) else {
            out.push(format!("register {name}: missing from the BMv2 dump"));
            continue;
        };
        if m.len() != b.len() {
            out.push(format!(
                "register {name}: model has {} cells, BMv2 {}",
                m.len(),
                b.len()
            ));
            continue;
        }
        for (i, (x, y)) in m.iter().zip(b).enumerate().filter(|(_, (x, y))| x != y) {
            out.push(format!("register {name}[{i}]: model {x}, BMv2 {y}"));
        }
    }
    // Queue depths: the model's `process` has zero queueing, so its sums are 0; BMv2's depend
    // on its threads' scheduling, so they are checked rather than compared: zero in every
    // cell whose packets counter is zero (the sum is kept at the right index), and at most
    // (packets emitted − 1) per counted packet (a queue holds only packets of the trace).
    let emitted: u64 = model.ports.values().map(|p| p.len() as u64).sum();
    for (name, (counter, m)) in &model.depths {
        if let Some(i) = m.iter().position(|c| *c != 0) {
            out.push(format!("register {name}[{i}]: the model queued ({})", m[i]));
        }
        let Some((_, b)) = bmv2.depths.get(name) else {
            out.push(format!("register {name}: missing from the BMv2 dump"));
            continue;
        };
        let counts = model
            .registers
            .get(counter)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if counts.len() != b.len() {
            out.push(format!(
                "register {name}: {} cells, its counter {counter} {}",
                b.len(),
                counts.len()
            ));
            continue;
        }
        for (i, (depth, packets)) in b.iter().zip(counts).enumerate() {
            let bound = packets * emitted.saturating_sub(1);
            if *depth > bound {
                out.push(format!(
                    "register {name}[{i}]: BMv2 {depth}, more than {bound} for {packets} packets counted in {counter}[{i}]"
                ));
            }
        }
    }
    if out.len() > limit {
        let more = out.len() - limit;
        out.truncate(limit);
        out.push(format!("… and {more} more"));
    }
    out
}

// ---------------------------------------------------------------------------------------
// pcap (libpcap classic format, LINKTYPE_ETHERNET, µs timestamps) — what `--use-files` reads
// and writes.

fn pcap_bytes(packets: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(0xa1b2_c3d4u32.to_le_bytes());
    v.extend(2u16.to_le_bytes());
    v.extend(4u16.to_le_bytes());
    v.extend(0i32.to_le_bytes());
    v.extend(0u32.to_le_bytes());
    v.extend(65_535u32.to_le_bytes());
    v.extend(1u32.to_le_bytes());
    for (t_us, bytes) in packets {
        v.extend(((t_us / 1_000_000) as u32).to_le_bytes());
        v.extend(((t_us % 1_000_000) as u32).to_le_bytes());
        v.extend((bytes.len() as u32).to_le_bytes());
        v.extend((bytes.len() as u32).to_le_bytes());
        v.extend(bytes);
    }
    v
}

/// Packets of a pcap file (either byte order), or why it cannot be read.
fn pcap_packets(data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if data.len() < 24 {
        return Err("shorter than a pcap header".into());
    }
    let big = match data[0..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        _ => return Err("not a pcap file".into()),
    };
    let word = |at: usize| {
        let b = [data[at], data[at + 1], data[at + 2], data[at + 3]];
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let mut at = 24;
    let mut out = Vec::new();
    while at < data.len() {
        if at + 16 > data.len() {
            return Err(format!("truncated record header at byte {at}"));
        }
        let len = word(at + 8) as usize;
        let start = at + 16;
        let bytes = data
            .get(start..start + len)
            .ok_or_else(|| format!("truncated record at byte {at}"))?;
        out.push(bytes.to_vec());
        at = start + len;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// simple_switch_CLI helpers.

/// The control each register of the v1model program is declared in: p4c-bm2-ss names
/// registers `<control>.<register>` in the BMv2 JSON.
fn register_controls(p4: &str) -> BTreeMap<String, String> {
    let mut control = String::new();
    let mut out = BTreeMap::new();
    for line in p4.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("control ") {
            control = rest.split('(').next().unwrap_or("").trim().to_string();
        } else if line.starts_with("register<") {
            let name = line
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches(';');
            out.insert(name.to_string(), control.clone());
        }
    }
    out
}

/// Cells of `name` in the output of `register_read <name>` (runtime_CLI prints
/// `<name>= v0, v1, …`).
fn parse_register_dump(output: &str, name: &str) -> Option<Vec<u64>> {
    let key = format!("{name}=");
    let line = output.lines().find(|l| l.contains(&key))?;
    let rest = &line[line.find(&key)? + key.len()..];
    rest.split(',')
        .map(|v| v.trim().parse::<u64>().ok())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Always run: the traces on the model.

#[test]
fn traces_run_on_the_model_deterministically_and_exercise_what_they_claim() {
    let program = lab_program();
    let traces = traces();
    assert!(traces.len() >= 3, "expected at least 3 traces");
    for (path, trace) in &traces {
        assert!(!trace.steps.is_empty(), "{path}: no steps");
        for r in &trace.routes {
            assert!(r.port < LAB_PORTS, "{path}: route to port {}", r.port);
        }
        for (i, s) in trace.steps.iter().enumerate() {
            assert!(s.port < LAB_PORTS, "{path} step {i}: port {}", s.port);
            // The v1model program never sets standard_metadata.priority, so BMv2's qid is
            // always 0 (simple_switch docs, "priority queues").
            assert_eq!(s.queue, 0, "{path} step {i}: BMv2 can only use queue 0");
            if i > 0 {
                let gap = s.t_us.saturating_sub(trace.steps[i - 1].t_us);
                assert!(gap >= MIN_GAP_US, "{path} step {i}: gap {gap} µs");
            }
        }
        let span = trace.steps.last().map_or(0, |s| s.t_us) - trace.steps[0].t_us;
        assert!(span <= MAX_SPAN_US, "{path}: spans {span} µs");

        let first = run_model(program.clone(), trace).unwrap_or_else(|e| panic!("{path}: {e}"));
        let second = run_model(program.clone(), trace).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(first, second, "{path}: model run is not deterministic");
        assert!(
            first
                .outputs
                .iter()
                .any(|o| !o.ports.is_empty() || !o.cpu.is_empty()),
            "{path}: the trace emits nothing"
        );
        assert!(!trace.exercises.is_empty(), "{path}: lists no registers");
        for name in &trace.exercises {
            let cells = first
                .registers
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{path}: no register {name}"));
            assert!(
                cells.1.iter().any(|c| *c != 0),
                "{path}: register {name} stays zero"
            );
        }
        // The view compared with BMv2 is non-trivial and equal to itself.
        let view = model_view(&program, &first);
        assert!(view.registers.values().flatten().any(|c| *c != 0), "{path}");
        assert!(differences(&view, &model_view(&program, &second), 10).is_empty());
    }
}

#[test]
fn normalisation_and_comparison_report_real_differences_only() {
    let program = lab_program();
    let (_, trace) = traces()
        .into_iter()
        .find(|(_, t)| t.name == "polling")
        .expect("polling trace");
    let run = run_model(program.clone(), &trace).expect("model");
    let model = model_view(&program, &run);
    let cpu = constant(&program, "CPU_PORT") as u16;
    assert!(model.ports.contains_key(&cpu), "polling leaves a CPU copy");
    assert_eq!(
        model.ports.get(&cpu).map(Vec::len),
        Some(2),
        "two accepted polling packets, two CPU copies (the duplicate is suppressed)"
    );

    // A BMv2-like view: checksums filled in, the ring rotated by one epoch, times shifted.
    let mut shifted = run.clone();
    let layout = Report::of(&program);
    for out in &mut shifted.outputs {
        for (_, bytes) in &mut out.ports {
            // BMv2 fills the checksum in; normalising again must be idempotent.
            *bytes = normalise_packet(bytes.clone(), None);
        }
        // Its clock stamps the polling copies with other times.
        for bytes in &mut out.cpu {
            if let Some(t) = bytes.get_mut(layout.polling_tstamp.clone()) {
                t[2] ^= 0x5a;
            }
        }
    }
    let epochs = constant(&program, "EPOCHS") as usize;
    let packets_at: Vec<u64> = run
        .registers
        .iter()
        .find(|(n, _)| n == "port_packets")
        .map(|(_, c)| c.clone())
        .expect("port_packets");
    for (name, cells) in &mut shifted.registers {
        let def = program.registers.iter().find(|r| &r.name == name).unwrap();
        if matches!(
            def.module.as_str(),
            "port telemetry" | "flow telemetry" | "causality meter"
        ) {
            let stride = cells.len() / epochs;
            cells.rotate_right(stride);
        }
        // Other clock: times and epoch ids differ.
        let time_hi = name == "polling_dedupe" || name.starts_with("pfc_paused_w");
        let epoch_lo = name == "port_xon"
            || name.starts_with("fanout_e")
            || name.starts_with("fanout_last_w")
            || name.starts_with("paused_seen_e")
            || name.starts_with("pfc_xoff_e");
        let skipped =
            name.starts_with("pause_end_") || name.ends_with("_epoch") || name.ends_with("_offset");
        for c in cells.iter_mut().filter(|c| **c != 0) {
            if time_hi {
                *c += 1 << 32;
            } else if epoch_lo {
                *c += 7;
            } else if skipped {
                *c += 12_345;
            }
        }
        // BMv2 queued: one packet waited behind another where packets were counted.
        if name == "port_qdepth_sum" {
            let stride = cells.len() / epochs;
            let at = (0..packets_at.len())
                .find(|i| packets_at[*i] != 0)
                .expect("a counted port");
            let len = cells.len();
            cells[(at + stride) % len] += 1;
        }
    }
    // The pair's data in another ring slot's register.
    let mut slot_moved = shifted.clone();
    let words = (constant(&program, "PORTS") as usize).div_ceil(32);
    for w in 0..words {
        let a = slot_moved
            .registers
            .iter()
            .position(|(n, _)| *n == format!("fanout_e0_w{w}"))
            .expect("fanout_e0");
        let b = slot_moved
            .registers
            .iter()
            .position(|(n, _)| *n == format!("fanout_e1_w{w}"))
            .expect("fanout_e1");
        let cells = slot_moved.registers[a].1.clone();
        slot_moved.registers[a].1 = slot_moved.registers[b].1.clone();
        slot_moved.registers[b].1 = cells;
    }
    assert_eq!(
        differences(&model, &model_view(&program, &slot_moved), 50),
        Vec::<String>::new()
    );
    let bmv2 = model_view(&program, &shifted);
    assert_eq!(differences(&model, &bmv2, 50), Vec::<String>::new());

    // Real differences are reported: a flipped payload byte, a missing packet, a counter.
    let mut bad = bmv2;
    let p2 = bad.ports.get_mut(&2).expect("port 2");
    p2[0][40] ^= 0xFF;
    bad.ports.get_mut(&cpu).unwrap().pop();
    bad.registers.get_mut("port_packets").unwrap()[2] += 1;
    // A queue-depth sum where no packet was counted (a wrong index), and an impossible one.
    let depths = &mut bad.depths.get_mut("port_qdepth_sum").unwrap().1;
    depths[9] = 1;
    depths[2] = 1_000;
    let d = differences(&model, &bad, 50);
    assert!(
        d.iter()
            .any(|l| l.starts_with("register port_qdepth_sum[9]: BMv2 1, more than 0")),
        "{d:?}"
    );
    assert!(
        d.iter()
            .any(|l| l.starts_with("register port_qdepth_sum[2]: BMv2 1000")),
        "{d:?}"
    );
    assert!(
        d.iter()
            .any(|l| l.starts_with("port 2 packet 0: first difference at byte 40")),
        "{d:?}"
    );
    assert!(
        d.iter()
            .any(|l| l.starts_with(&format!("port {cpu}: model emitted 2 packets, BMv2 1"))),
        "{d:?}"
    );
    assert!(
        d.iter().any(|l| l.starts_with("register port_packets[2]")),
        "{d:?}"
    );
}

#[test]
fn pcap_and_cli_helpers_round_trip() {
    let packets = vec![(0u64, vec![1u8, 2, 3]), (1_500_000, vec![0xAA; 70])];
    let file = pcap_bytes(&packets);
    let read = pcap_packets(&file).expect("pcap");
    assert_eq!(read, vec![vec![1, 2, 3], vec![0xAA; 70]]);
    assert!(pcap_packets(&file[..file.len() - 1]).is_err());
    assert!(pcap_packets(b"not a pcap file at all, clearly").is_err());
    assert_eq!(
        pcap_packets(&pcap_bytes(&[])).expect("empty"),
        Vec::<Vec<u8>>::new()
    );

    let out = "Obtaining JSON from switch...\nDone\nControl utility for runtime P4 table manipulation\nRuntimeCmd: MainEgress.port_packets= 0, 3, 18446744073709551615\nRuntimeCmd: ";
    assert_eq!(
        parse_register_dump(out, "MainEgress.port_packets"),
        Some(vec![0, 3, u64::MAX])
    );
    assert_eq!(parse_register_dump(out, "MainEgress.flow_packets"), None);

    // Every register of the program is declared in a control of the v1model file.
    let p4 = std::fs::read_to_string(root().join("p4/v1model/hawkmesh.p4")).expect("p4");
    let controls = register_controls(&p4);
    for r in &lab_program().registers {
        let c = controls
            .get(&r.name)
            .unwrap_or_else(|| panic!("{}", r.name));
        assert!(c == "MainIngress" || c == "MainEgress", "{}: {c}", r.name);
    }
}

// ---------------------------------------------------------------------------------------
// Selected with HAWKMESH_BMV2=1: the traces on BMv2.

const TOOLS: [&str; 3] = ["p4c-bm2-ss", "simple_switch", "simple_switch_CLI"];
/// Seconds `simple_switch --use-files` waits before replaying: time to configure it.
const REPLAY_WAIT_S: u64 = 5;

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

struct Bmv2 {
    child: Child,
    dir: PathBuf,
    thrift_port: u16,
}

impl Bmv2 {
    fn cli(&self, commands: &str) -> String {
        let mut child = Command::new("simple_switch_CLI")
            .args(["--thrift-port", &self.thrift_port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start simple_switch_CLI");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin
                .write_all(commands.as_bytes())
                .expect("write CLI commands");
        }
        let out = child.wait_with_output().expect("simple_switch_CLI");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("Error") && !text.contains("Invalid"),
            "simple_switch_CLI failed on\n{commands}\n{text}"
        );
        text
    }

    /// The handle in `… created with handle N` (runtime_CLI's reply to create commands).
    fn handle(reply: &str) -> u64 {
        reply
            .lines()
            .find_map(|l| l.split("handle").nth(1))
            .and_then(|r| r.trim().trim_end_matches('.').parse().ok())
            .unwrap_or_else(|| panic!("no handle in {reply}"))
    }
}

impl Drop for Bmv2 {
    fn drop(&mut self) {
        // SIGTERM rather than SIGKILL so simple_switch closes its pcap files.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn run_bmv2(program: &Program, json: &Path, p4: &str, trace: &Trace, tag: &str) -> View {
    let cpu = constant(program, "CPU_PORT") as u16;
    let group = constant(program, "MCAST_GROUP_ALL_PORTS");
    let session = constant(program, "CPU_MIRROR_SESSION");
    let dir = std::env::temp_dir().join(format!("hawkmesh-bmv2-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");

    // Input pcaps: one per interface, packets at their trace times (BMv2 replays the
    // intervals; the absolute time is its own clock).
    let packets = trace.packets(program).expect("packets");
    let iface = |port: u16| {
        if port == cpu {
            "cpu".to_string()
        } else {
            format!("p{port}")
        }
    };
    let all_ports: Vec<u16> = (0..LAB_PORTS).chain([cpu]).collect();
    for &port in &all_ports {
        let input: Vec<(u64, Vec<u8>)> = trace
            .steps
            .iter()
            .zip(&packets)
            .filter(|(s, _)| s.port == port)
            .map(|(s, b)| (s.t_us, b.clone()))
            .collect();
        std::fs::write(
            dir.join(format!("{}_in.pcap", iface(port))),
            pcap_bytes(&input),
        )
        .expect("write pcap");
    }

    let thrift_port = 9090;
    let mut cmd = Command::new("simple_switch");
    cmd.current_dir(&dir)
        .args(["--use-files", &REPLAY_WAIT_S.to_string()])
        .args(["--thrift-port", &thrift_port.to_string()]);
    for &port in &all_ports {
        cmd.args(["-i", &format!("{port}@{}", iface(port))]);
    }
    let log = std::fs::File::create(dir.join("simple_switch.log")).expect("log");
    let child = cmd
        .arg(json)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start simple_switch");
    let sw = Bmv2 {
        child,
        dir: dir.clone(),
        thrift_port,
    };

    // Wait for the Thrift server.
    let ready = (0..20).any(|_| {
        std::thread::sleep(Duration::from_millis(250));
        Command::new("simple_switch_CLI")
            .args(["--thrift-port", &thrift_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(
        ready,
        "simple_switch did not start; see {}",
        sw.dir.join("simple_switch.log").display()
    );

    // Switch configuration (simple_switch_CLI commands of BMv2's runtime_CLI): mirror
    // session → CPU port, multicast group → front-panel ports, routes as one `forward`
    // entry per (destination, ECMP bucket).
    sw.cli(&format!("mirroring_add {session} {cpu}\n"));
    sw.cli(&format!("mc_mgrp_create {group}\n"));
    let ports: Vec<String> = (0..LAB_PORTS).map(|p| p.to_string()).collect();
    let node = Bmv2::handle(&sw.cli(&format!("mc_node_create 0 {}\n", ports.join(" "))));
    sw.cli(&format!("mc_node_associate {group} {node}\n"));
    // The port masks (one-hot per port) the control plane installs at start-up.
    let mut masks = String::new();
    for (table, port, action, params) in hawkmesh_dataplane::hawkeye::port_mask_entries(program) {
        let control = if table.starts_with("egress_") {
            "MainEgress"
        } else {
            "MainIngress"
        };
        let params: Vec<String> = params.iter().map(u64::to_string).collect();
        masks += &format!(
            "table_add {control}.{table} {control}.{action} {port} => {}\n",
            params.join(" ")
        );
    }
    for port in 0..LAB_PORTS {
        let entry = hawkmesh_wire::control::polling_port_entry(
            port,
            hawkmesh_wire::control::PollingFrom::Fabric,
        );
        masks += &format!(
            "table_add MainIngress.polling_port MainIngress.{} {port} =>\n",
            entry.action
        );
    }
    sw.cli(&masks);
    let mut routes = String::new();
    for r in &trace.routes {
        for (key, action, params) in hawkmesh_dataplane::hawkeye::forward_entries(r.dst, &[r.port])
        {
            let key: Vec<String> = key.iter().map(u64::to_string).collect();
            let params: Vec<String> = params.iter().map(u64::to_string).collect();
            routes += &format!(
                "table_add MainIngress.forward MainIngress.{action} {} => {}\n",
                key.join(" "),
                params.join(" ")
            );
        }
    }
    if !routes.is_empty() {
        sw.cli(&routes);
    }
    let mut ecn = String::new();
    for entry in trace.ecn_entries().expect("ECN profiles") {
        let key: Vec<String> = entry.key.iter().map(u64::to_string).collect();
        let params: Vec<String> = entry.params.iter().map(u64::to_string).collect();
        ecn += &format!(
            "table_add MainEgress.ecn_profile MainEgress.{} {} => {}\n",
            entry.action,
            key.join(" "),
            params.join(" ")
        );
    }
    if !ecn.is_empty() {
        sw.cli(&ecn);
    }

    // Replay: the wait, the trace, and a margin for the last packet to leave.
    let span = trace.steps.last().map_or(0, |s| s.t_us);
    std::thread::sleep(Duration::from_micros(
        REPLAY_WAIT_S * 1_000_000 + span + 2_000_000,
    ));

    let controls = register_controls(p4);
    let mut view = View::default();
    let mut commands = String::new();
    for r in &program.registers {
        commands += &format!("register_read {}.{}\n", controls[&r.name], r.name);
    }
    let dump = sw.cli(&commands);
    // Kept beside the pcaps and the switch log for a failed comparison.
    std::fs::write(dir.join("registers.txt"), &dump).expect("write the register dump");
    let mut registers = Vec::new();
    for r in &program.registers {
        let full = format!("{}.{}", controls[&r.name], r.name);
        let cells = parse_register_dump(&dump, &full)
            .unwrap_or_else(|| panic!("no dump of {full} in simple_switch_CLI output"));
        registers.push((r.name.clone(), cells));
    }
    (view.registers, view.depths) = normalise_registers(program, &registers);
    view.epoch_span = epoch_span(program, &registers);
    drop(sw);
    for &port in &all_ports {
        let path = dir.join(format!("{}_out.pcap", iface(port)));
        let data = std::fs::read(&path).unwrap_or_default();
        if data.is_empty() {
            continue;
        }
        let pkts = pcap_packets(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let report = (port == cpu).then(|| Report::of(program));
        if !pkts.is_empty() {
            view.ports.insert(
                port,
                pkts.into_iter()
                    .map(|p| normalise_packet(p, report.as_ref()))
                    .collect(),
            );
        }
    }
    view
}

#[test]
fn bmv2_matches_the_model_when_selected() {
    if std::env::var("HAWKMESH_BMV2").as_deref() != Ok("1") {
        eprintln!("BMv2 comparison not selected (set HAWKMESH_BMV2=1; see hw-lab/bmv2.md)");
        return;
    }
    let missing: Vec<&str> = TOOLS.iter().copied().filter(|t| !on_path(t)).collect();
    assert!(
        missing.is_empty(),
        "HAWKMESH_BMV2=1 needs {} on PATH (missing: {}); see hw-lab/bmv2.md",
        TOOLS.join(", "),
        missing.join(", ")
    );
    let program = lab_program();
    let source = root().join("p4/v1model/hawkmesh.p4");
    let p4 = std::fs::read_to_string(&source).expect("p4/v1model/hawkmesh.p4");
    let build = std::env::temp_dir().join(format!("hawkmesh-bmv2-{}-build", std::process::id()));
    std::fs::create_dir_all(&build).expect("temp dir");
    let json = build.join("hawkmesh.json");
    let out = Command::new("p4c-bm2-ss")
        .args(["--p4v", "16", "-o"])
        .arg(&json)
        .arg(&source)
        .output()
        .expect("run p4c-bm2-ss");
    assert!(
        out.status.success(),
        "p4c-bm2-ss failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut failures = Vec::new();
    let mut passed = 0;
    // HAWKMESH_BMV2_TRACES=name,name runs only those traces (to look at one difference).
    let only: Option<Vec<String>> = std::env::var("HAWKMESH_BMV2_TRACES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let traces: Vec<(String, Trace)> = traces()
        .into_iter()
        .filter(|(_, t)| only.as_ref().is_none_or(|o| o.contains(&t.name)))
        .collect();
    assert!(!traces.is_empty(), "HAWKMESH_BMV2_TRACES selects no trace");
    for (i, (path, trace)) in traces.iter().enumerate() {
        let bmv2 = run_bmv2(&program, &json, &p4, trace, &i.to_string());
        // The model replayed with each way the epoch boundaries can fall between the steps;
        // BMv2's clock decided one of them.
        let clocks = clocks(&program, trace);
        let mut closest: Option<(usize, Vec<String>)> = None;
        for (c, clock) in clocks.iter().enumerate() {
            let run = run_model_times(program.clone(), trace, &clock.times_ns).expect("model");
            let d = differences(&model_view(&program, &run), &bmv2, 30);
            let done = d.is_empty();
            if closest
                .as_ref()
                .is_none_or(|(_, best)| d.len() < best.len())
            {
                closest = Some((c, d));
            }
            if done {
                break;
            }
        }
        let packets: usize = bmv2.ports.values().map(Vec::len).sum();
        let cells: usize = bmv2.registers.values().map(Vec::len).sum();
        let (c, d) = closest.expect("at least one clock");
        let at: Vec<String> = clocks[c]
            .boundaries
            .iter()
            .enumerate()
            .filter(|(_, b)| **b > 0)
            .map(|(i, b)| format!("{b} before step {i}"))
            .collect();
        let at = if at.is_empty() {
            "none".to_string()
        } else {
            at.join(", ")
        };
        if d.is_empty() {
            eprintln!(
                "{path}: BMv2 matches the model ({} steps, {packets} packets emitted, {cells} register cells compared; explained with epoch boundaries: {at}; clock {} of {})",
                trace.steps.len(),
                c + 1,
                clocks.len()
            );
            passed += 1;
        } else {
            let lag = match bmv2.epoch_span {
                Some(span) if span > u64::from(MAX_LAG_EPOCHS) => format!(
                    "; BMv2's run spanned {span} epochs (its epoch registers), more than the {MAX_LAG_EPOCHS} the clock search covers: it ran slower than usual (a loaded machine?), run the test alone"
                ),
                _ => String::new(),
            };
            failures.push(format!(
                "{path} ({}), closest of {} clocks (epoch boundaries: {at}){lag}:\n  {}",
                trace.name,
                clocks.len(),
                d.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "BMv2 differs from the model:\n{}",
        failures.join("\n")
    );
    eprintln!(
        "{passed} of {} traces: BMv2 matches the model",
        traces.len()
    );
}

#[test]
fn every_register_has_a_comparison_rule() {
    let program = lab_program();
    for r in &program.registers {
        let rule = rule(&r.name).unwrap_or_else(|| panic!("register {} has no rule", r.name));
        // A pair rule only on pair registers, a ring rule only on ring-sized registers.
        match &rule {
            Rule::RingHiSum | Rule::SlotBitmap(_) | Rule::LoOnly | Rule::HiOnly => {
                assert!(
                    r.is_pair(),
                    "{}: {rule:?} on a {}-bit register",
                    r.name,
                    r.width
                )
            }
            Rule::RingSum | Rule::RingMax | Rule::QueueDepth(_) => {
                let epochs = constant(&program, "EPOCHS") as u32;
                assert_eq!(r.size % epochs, 0, "{}: {rule:?}", r.name);
                assert!(!r.is_pair(), "{}: {rule:?} on a pair register", r.name);
            }
            Rule::Skip | Rule::Exact => {}
        }
        if let Rule::QueueDepth(counter) = rule {
            let c = program
                .registers
                .iter()
                .find(|c| c.name == counter)
                .unwrap_or_else(|| panic!("{}: no counter {counter}", r.name));
            assert_eq!(c.size, r.size, "{}: counted in {counter}", r.name);
        }
    }
    // Names the harness does not know get no rule: a new register needs one.
    assert_eq!(rule("flow_new_thing"), None);
    assert_eq!(rule("fanout_e0_wx"), None);
    assert_eq!(rule("pause_end_px"), None);
}

/// The trace named `name`.
fn trace(name: &str) -> Trace {
    traces()
        .into_iter()
        .find(|(_, t)| t.name == name)
        .unwrap_or_else(|| panic!("trace {name}"))
        .1
}

/// CRC-32 of a RoCEv2 5-tuple as the program hashes it (`{src, dst, sport, dport}`).
fn five_tuple_crc(src: [u8; 4], dst: [u8; 4], sport: u16) -> u32 {
    let mut bytes = Vec::new();
    bytes.extend(src);
    bytes.extend(dst);
    bytes.extend(sport.to_be_bytes());
    bytes.extend(4791u16.to_be_bytes());
    hawkmesh_dataplane::hash::crc32(&bytes)
}

fn register<'a>(run: &'a TraceRun, name: &str) -> &'a [u64] {
    &run.registers
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("register {name}"))
        .1
}

#[test]
fn the_ecn_trace_marks_what_it_describes_on_the_model() {
    let program = lab_program();
    let run = run_model(program, &trace("ecn")).expect("ecn trace");
    // The ECN bits of the one copy each step sends out, by port (IPv4's second byte).
    let out: Vec<(u16, u8)> = run
        .outputs
        .iter()
        .map(|o| {
            assert_eq!(o.ports.len(), 1, "{o:?}");
            (o.ports[0].0, o.ports[0].1[15] & 0b11)
        })
        .collect();
    assert_eq!(
        out,
        vec![(2, 0b11), (2, 0b11), (2, 0b00), (3, 0b10), (4, 0b10)]
    );
    // A profile the program cannot hold is refused with its place in the trace.
    let mut bad = trace("ecn");
    bad.ecn_profiles[1].pmax = 2.0;
    let e = bad.ecn_entries().unwrap_err().to_string();
    assert!(e.starts_with("ecn_profiles[1]: ecn_profile: pmax 2"), "{e}");
}

#[test]
fn the_eviction_and_branch_traces_do_what_they_describe() {
    let program = lab_program();

    // Flow slots: A and B share slot 1130; B evicts A, then A evicts B.
    let a = five_tuple_crc([10, 0, 0, 1], [10, 0, 1, 1], 49152);
    let b = five_tuple_crc([10, 0, 0, 2], [10, 0, 1, 1], 55511);
    assert_eq!((a & 0xFFF, b & 0xFFF), (1130, 1130));
    let run = run_model(program.clone(), &trace("flow-eviction")).expect("model");
    let reports: Vec<usize> = (0..run.outputs.len())
        .filter(|i| !run.outputs[*i].cpu.is_empty())
        .collect();
    assert_eq!(
        reports,
        vec![2, 4],
        "an eviction report when B and when A comes back"
    );
    // The report carries the evicted flow's key and its packets: A's two, then B's one.
    let carries = |bytes: &[u8], key: &[u8]| bytes.windows(key.len()).any(|w| w == key);
    let key_a = [10, 0, 0, 1, 10, 0, 1, 1, 0xC0, 0x00, 0x12, 0xB7, 0, 0, 0, 2];
    let key_b = [10, 0, 0, 2, 10, 0, 1, 1, 0xD8, 0xD7, 0x12, 0xB7, 0, 0, 0, 1];
    assert!(carries(&run.outputs[2].cpu[0], &key_a));
    assert!(carries(&run.outputs[4].cpu[0], &key_b));

    // Heavy bucket 2989: B's eighth losing vote evicts A; B holds it flagged.
    let a = five_tuple_crc([10, 0, 0, 1], [10, 0, 1, 1], 49152);
    let b = five_tuple_crc([10, 0, 0, 2], [10, 0, 1, 1], 49185);
    assert_eq!((a >> 20, b >> 20), (2989, 2989));
    let run = run_model(program.clone(), &trace("sketch-eviction")).expect("model");
    let bucket = 2989;
    assert_eq!(
        register(&run, "sketch_key")[bucket] & 0xFFFF_FFFF,
        u64::from(b)
    );
    let votes = register(&run, "sketch_votes")[bucket];
    assert_eq!(
        votes, 0x8000_0002,
        "flagged, B's eviction packet and its last"
    );
    assert_eq!(register(&run, "sketch_total")[bucket], 11);
    let light = register(&run, "sketch_light");
    let light_len = light.len() as u32;
    assert_eq!(
        light[(a % light_len) as usize],
        2,
        "A's evicted vote and its lost one"
    );
    assert_eq!(light[(b % light_len) as usize], 7, "B's seven lost votes");

    // The PFC branch: the polling packet from port 0 leaves by port 2 only; the one from
    // port 1 (no traffic from it) and the unroutable one reach only the CPU.
    let run = run_model(program, &trace("polling-pfc")).expect("model");
    let ports = |i: usize| -> Vec<u16> { run.outputs[i].ports.iter().map(|(p, _)| *p).collect() };
    assert_eq!(ports(3), vec![2]);
    assert!(ports(4).is_empty() && ports(5).is_empty());
    assert!((3..6).all(|i| run.outputs[i].cpu.len() == 1));
    assert_eq!(register(&run, "pfc_paused_w0")[0] & 0xFFFF_FFFF, 1 << 2);
}

#[test]
fn eviction_reports_are_compared_without_their_clock_fields() {
    let program = lab_program();
    let run = run_model(program.clone(), &trace("flow-eviction")).expect("model");
    let model = model_view(&program, &run);
    let cpu = constant(&program, "CPU_PORT") as u16;
    let report = Report::of(&program);
    assert_eq!(
        report.bytes as u64,
        constant(&program, "EVICTION_REPORT_BYTES")
    );
    let mut other_clock = run.clone();
    for out in &mut other_clock.outputs {
        for bytes in &mut out.cpu {
            assert!(report.is_report(bytes));
            bytes[0] ^= 0x17; // epoch id
            bytes[2] ^= 0x01; // ring slot
            bytes[report.bytes - 1] ^= 0x40; // last offset
        }
    }
    assert_eq!(
        differences(&model, &model_view(&program, &other_clock), 10),
        Vec::<String>::new()
    );
    // The evicted flow's identity and counts are compared.
    let mut wrong = other_clock;
    wrong.outputs[2].cpu[0][8] ^= 0x01; // last byte of the evicted source address
    wrong.outputs[4].cpu[0][20] ^= 0x01; // last byte of the packet count
    let d = differences(&model, &model_view(&program, &wrong), 10);
    assert_eq!(
        d,
        vec![
            format!("port {cpu} packet 0: first difference at byte 8 (model 0x01, BMv2 0x00); lengths 337 / 337"),
            format!("port {cpu} packet 1: first difference at byte 20 (model 0x01, BMv2 0x00); lengths 637 / 637"),
        ]
    );
    // A polling CPU copy is not a report.
    let polling = run_model(program.clone(), &trace("polling")).expect("model");
    assert!(polling
        .outputs
        .iter()
        .flat_map(|o| &o.cpu)
        .all(|b| !report.is_report(b)));
}

#[test]
fn the_clock_search_explains_a_lagging_run_and_only_with_its_boundaries() {
    let program = lab_program();
    let trace = trace("flow-eviction");
    let epoch_ns = 1u64 << constant(&program, "EPOCH_LOG2_NS");
    let clocks = clocks(&program, &trace);
    // The first clock keeps the whole trace in one epoch with the trace's spacing.
    assert!(clocks[0].boundaries.iter().all(|b| *b == 0));
    for (c, s) in clocks[0].times_ns.iter().zip(&trace.steps) {
        assert_eq!(c - clocks[0].times_ns[0], s.t_us * 1000);
    }
    // Every clock is in order and puts its steps in the epochs it says.
    for clock in &clocks {
        assert!(clock.times_ns.windows(2).all(|w| w[0] <= w[1]));
        for i in 1..clock.times_ns.len() {
            let crossed = clock.times_ns[i] / epoch_ns - clock.times_ns[i - 1] / epoch_ns;
            assert_eq!(crossed, u64::from(clock.boundaries[i]));
        }
        assert!(clock.boundaries.iter().sum::<u32>() <= MAX_LAG_EPOCHS);
    }
    // 5 steps: every way of placing up to 5 boundaries in 4 gaps, C(9, 4).
    assert_eq!(clocks.len(), 126);

    // A run that lagged by an epoch between A's packets and B's: B does not evict A; the
    // trace's own clock does not explain it, the search does and names the boundary.
    let lagged = clocks
        .iter()
        .find(|c| c.boundaries == [0, 0, 1, 0, 0])
        .expect("a boundary before step 2");
    let run = run_model_times(program.clone(), &trace, &lagged.times_ns).expect("model");
    let bmv2 = model_view(&program, &run);
    let nominal = model_view(
        &program,
        &run_model(program.clone(), &trace).expect("model"),
    );
    assert!(!differences(&nominal, &bmv2, 5).is_empty());
    let first = clocks
        .iter()
        .position(|c| {
            let run = run_model_times(program.clone(), &trace, &c.times_ns).expect("model");
            differences(&model_view(&program, &run), &bmv2, 1).is_empty()
        })
        .expect("a clock explains it");
    assert_eq!(clocks[first].boundaries, [0, 0, 1, 0, 0]);
}

#[test]
fn the_epoch_span_of_a_run_is_read_from_its_epoch_registers() {
    let program = lab_program();
    let trace = trace("sketch-eviction");
    let clocks = clocks(&program, &trace);
    // Exact while the run spans fewer epochs than the ring holds; a lower bound beyond
    // (a later lap overwrites a cell's oldest epoch).
    for boundaries in [[0u32; 11], [0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0]] {
        let clock = clocks
            .iter()
            .find(|c| c.boundaries == boundaries)
            .expect("clock");
        let run = run_model_times(program.clone(), &trace, &clock.times_ns).expect("model");
        let total: u32 = boundaries.iter().sum();
        assert_eq!(epoch_span(&program, &run.registers), Some(u64::from(total)));
    }
}
