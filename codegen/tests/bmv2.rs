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

use hawkmesh_codegen::trace::{run_model, Trace, TraceRun, LAB_PORTS};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;

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
}

/// The model leaves the IPv4 header checksum at 0; the v1model program recomputes it in
/// `MainComputeChecksum` (v1model.p4 `update_checksum`, csum16 = RFC 1071). Recompute it on
/// both sides so only a real header difference shows.
fn normalise_packet(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 34 && bytes[12..14] == [0x08, 0x00] && bytes[14] >> 4 == 4 {
        let ihl = (bytes[14] & 0x0F) as usize * 4;
        if ihl >= 20 && bytes.len() >= 14 + ihl {
            bytes[24] = 0;
            bytes[25] = 0;
            let mut sum: u32 = 0;
            for pair in bytes[14..14 + ihl].chunks(2) {
                sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
            }
            while sum > 0xFFFF {
                sum = (sum & 0xFFFF) + (sum >> 16);
            }
            let c = !(sum as u16);
            bytes[24..26].copy_from_slice(&c.to_be_bytes());
        }
    }
    bytes
}

/// How a register is compared. BMv2's clock is wall-clock µs since `simple_switch` started,
/// not the trace's time, so (1) registers holding times cannot match and are left out,
/// (2) the epoch ring slot a packet lands in differs, so ring registers are folded over the
/// epochs (counters summed, identities kept as the maximum), and (3) the polling dedupe
/// pair keeps only its event-id word. Queue-depth sums are compared as they are: BMv2's
/// `enq_qdepth` counts packets (Tofino counts 80-byte cells), the model's `process` has zero
/// queueing, and with [`MIN_GAP_US`] spacing BMv2's queues are empty too, so both are 0 and a
/// non-zero BMv2 value means the replay queued packets.
fn normalise_register(program: &Program, name: &str, cells: &[u64]) -> Option<Vec<u64>> {
    let def = program.registers.iter().find(|r| r.name == name)?;
    let time_valued = name.starts_with("pause_end_")
        || name.ends_with("_epoch")
        || name == "flow_first_offset"
        || name == "flow_last_offset";
    if time_valued {
        return None;
    }
    if name == "polling_dedupe" {
        return Some(cells.iter().map(|c| c & 0xFFFF_FFFF).collect());
    }
    let ring = matches!(
        def.module.as_str(),
        "port telemetry" | "causality meter" | "flow telemetry"
    );
    if !ring {
        return Some(cells.to_vec());
    }
    let epochs = constant(program, "EPOCHS") as usize;
    let stride = cells.len() / epochs;
    let identity = name.starts_with("flow_key_") || name == "flow_egress_port";
    let mut folded = vec![0u64; stride];
    for (i, c) in cells.iter().enumerate() {
        let f = &mut folded[i % stride];
        *f = if identity { (*f).max(*c) } else { *f + c };
    }
    Some(folded)
}

fn model_view(program: &Program, run: &TraceRun) -> View {
    let cpu = constant(program, "CPU_PORT") as u16;
    let mut view = View::default();
    for out in &run.outputs {
        for (port, bytes) in &out.ports {
            view.ports
                .entry(*port)
                .or_default()
                .push(normalise_packet(bytes.clone()));
        }
        for bytes in &out.cpu {
            view.ports
                .entry(cpu)
                .or_default()
                .push(normalise_packet(bytes.clone()));
        }
    }
    for (name, cells) in &run.registers {
        if let Some(n) = normalise_register(program, name, cells) {
            view.registers.insert(name.clone(), n);
        }
    }
    view
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
    for out in &mut shifted.outputs {
        for (_, bytes) in &mut out.ports {
            // BMv2 fills the checksum in; normalising again must be idempotent.
            *bytes = normalise_packet(bytes.clone());
        }
    }
    for (name, cells) in &mut shifted.registers {
        let def = program.registers.iter().find(|r| &r.name == name).unwrap();
        if matches!(def.module.as_str(), "port telemetry" | "flow telemetry") {
            let stride = cells.len() / constant(&program, "EPOCHS") as usize;
            cells.rotate_right(stride);
        }
        if name == "polling_dedupe" || name.starts_with("pause_end_") {
            cells
                .iter_mut()
                .filter(|c| **c != 0)
                .for_each(|c| *c += 1 << 32);
        }
    }
    let bmv2 = model_view(&program, &shifted);
    assert_eq!(differences(&model, &bmv2, 50), Vec::<String>::new());

    // Real differences are reported: a flipped payload byte, a missing packet, a counter.
    let mut bad = bmv2;
    let p2 = bad.ports.get_mut(&2).expect("port 2");
    p2[0][40] ^= 0xFF;
    bad.ports.get_mut(&cpu).unwrap().pop();
    bad.registers.get_mut("port_packets").unwrap()[2] += 1;
    let d = differences(&model, &bad, 50);
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
    // session → CPU port, multicast group → front-panel ports, routes as action-profile
    // members of the `forward` table's selector.
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
    sw.cli(&masks);
    for r in &trace.routes {
        let member = Bmv2::handle(&sw.cli(&format!(
            "act_prof_create_member MainIngress.forward_selector MainIngress.set_route {}\n",
            r.port
        )));
        sw.cli(&format!(
            "table_indirect_add MainIngress.forward {} => {member}\n",
            u32::from(r.dst)
        ));
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
    for r in &program.registers {
        let full = format!("{}.{}", controls[&r.name], r.name);
        let cells = parse_register_dump(&dump, &full)
            .unwrap_or_else(|| panic!("no dump of {full} in simple_switch_CLI output"));
        if let Some(n) = normalise_register(program, &r.name, &cells) {
            view.registers.insert(r.name.clone(), n);
        }
    }
    drop(sw);
    for &port in &all_ports {
        let path = dir.join(format!("{}_out.pcap", iface(port)));
        let data = std::fs::read(&path).unwrap_or_default();
        if data.is_empty() {
            continue;
        }
        let pkts = pcap_packets(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !pkts.is_empty() {
            view.ports
                .insert(port, pkts.into_iter().map(normalise_packet).collect());
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
    for (i, (path, trace)) in traces().iter().enumerate() {
        let run = run_model(program.clone(), trace).expect("model");
        let model = model_view(&program, &run);
        let bmv2 = run_bmv2(&program, &json, &p4, trace, &i.to_string());
        let d = differences(&model, &bmv2, 30);
        if d.is_empty() {
            eprintln!("{path}: BMv2 matches the model");
        } else {
            failures.push(format!("{path} ({}):\n  {}", trace.name, d.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "BMv2 differs from the model:\n{}",
        failures.join("\n")
    );
}
