//! Randomised input for every parser a user or a peer can feed: PFC frames, polling and
//! eviction headers, binary and JSON telemetry reports (and the diagnosis over them),
//! scenario TOML (and building the simulation from it), the HPCC simulator's topology and
//! flow files. Each starts from valid inputs and applies seeded, structure-aware mutations
//! (bit flips, truncation, splices, and for structured formats their own fields: chunk
//! headers and section counts with the checksum recomputed so the mutation reaches the
//! sections; JSON and TOML numbers set to extremes; lines dropped and duplicated). Every
//! outcome must be a value or an error: a panic fails the test, as does one input taking
//! longer than a second. Deterministic (fixed seeds) and bounded (a fixed number of cases
//! per parser, a few seconds in all).

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer::{diagnose_reports, loaded, DiagnoseOptions};
use hawkmesh_netsim::fabric::parse_hpcc_topology;
use hawkmesh_netsim::scenario::Limits;
use hawkmesh_netsim::workload::parse_hpcc_flows;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_wire::eviction::EvictionHeader;
use hawkmesh_wire::pfc::{PfcFrame, PfcRepr};
use hawkmesh_wire::polling::Polling;
use hawkmesh_wire::telemetry::{chunk_checksum, decode_reports, ReportFile, TelemetryReport};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The workspace's seeded generator (netsim's), with the two draws the mutators use.
struct Rng(hawkmesh_netsim::rng::Rng);

impl Rng {
    fn seeded(seed: u64) -> Self {
        Rng(hawkmesh_netsim::rng::Rng::new(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n.max(1) as u64) as usize
    }
}

/// Runs `parse` on `input`; a panic or a slow input fails the test with the case.
fn survive(name: &str, case: usize, input: &[u8], parse: &dyn Fn(&[u8])) {
    let started = Instant::now();
    if catch_unwind(AssertUnwindSafe(|| parse(input))).is_err() {
        panic!(
            "{name}: case {case} panicked on {} bytes: {:02x?}",
            input.len(),
            &input[..input.len().min(256)]
        );
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{name}: case {case} took {took:?} on {} bytes",
        input.len()
    );
}

/// Generic byte mutations: flips, sets to extremes, truncation, insertion, splicing.
fn mutate_bytes(rng: &mut Rng, seed: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !out.is_empty() => {
                let at = rng.below(out.len());
                out[at] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let at = rng.below(out.len());
                out[at] = [0x00, 0xff, 0x7f, 0x80][rng.below(4)];
            }
            2 => out.truncate(rng.below(out.len() + 1)),
            3 => {
                let at = rng.below(out.len() + 1);
                let extra: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                out.splice(at..at, extra);
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len() + 1);
                let at = rng.below(out.len() + 1);
                out.truncate(at);
                out.extend_from_slice(&other[from..]);
            }
            _ if out.len() >= 4 => {
                // A 32-bit field somewhere set to an extreme.
                let at = rng.below(out.len() - 3);
                let value: u32 = [0, 1, u32::MAX, u32::MAX / 2, 0x8000_0000][rng.below(5)];
                out[at..at + 4].copy_from_slice(&value.to_be_bytes());
            }
            _ => {}
        }
    }
    out
}

/// Walks a chunk stream and recomputes each chunk's checksum (as far as its headers say),
/// so that mutations of the sections are parsed rather than refused as damage.
fn reseal(stream: &mut [u8]) {
    let mut offset = 0;
    while offset + 32 <= stream.len() {
        let payload = u32::from_be_bytes(stream[offset + 28..offset + 32].try_into().unwrap());
        let body = 32usize.saturating_add(payload as usize);
        let Some(end) = offset.checked_add(body + 4) else {
            return;
        };
        if end > stream.len() {
            return;
        }
        let checksum = chunk_checksum(&stream[offset..offset + body]);
        stream[offset + body..end].copy_from_slice(&checksum.to_be_bytes());
        offset = end;
    }
}

/// Text mutations for JSON and TOML: numbers to extremes, lines dropped or duplicated,
/// bytes flipped.
fn mutate_text(rng: &mut Rng, seed: &str) -> String {
    const EXTREMES: [&str; 10] = [
        "0",
        "-1",
        "4294967295",
        "18446744073709551615",
        "18446744073709551616",
        "1e308",
        "-1e308",
        "nan",
        "0.000000001",
        "\"x\"",
    ];
    let mut lines: Vec<String> = seed.lines().map(str::to_string).collect();
    for _ in 0..1 + rng.below(3) {
        if lines.is_empty() {
            break;
        }
        let at = rng.below(lines.len());
        match rng.below(4) {
            0 => {
                // Replace the first number on the line.
                let line = &lines[at];
                if let Some(start) = line.find(|c: char| c.is_ascii_digit()) {
                    let end = line[start..]
                        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e'))
                        .map_or(line.len(), |e| start + e);
                    let extreme = EXTREMES[rng.below(EXTREMES.len())];
                    lines[at] = format!("{}{extreme}{}", &line[..start], &line[end..]);
                }
            }
            1 => {
                lines.remove(at);
            }
            2 => {
                let copy = lines[at].clone();
                lines.insert(at, copy);
            }
            _ => {
                let mut bytes = lines[at].clone().into_bytes();
                if !bytes.is_empty() {
                    let i = rng.below(bytes.len());
                    bytes[i] = b"{}[]\",=:#\\ \n"[rng.below(12)];
                }
                lines[at] = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
    }
    lines.join("\n")
}

const CASES: usize = 20_000;

#[test]
fn wire_headers_survive_mutation() {
    let mut rng = Rng::seeded(0x9e37_79b9_7f4a_7c15);
    let pfc = PfcRepr {
        source: [2, 0, 0, 0, 0, 1],
        class_enable_vector: 0b1000,
        quanta: [0, 0, 0, 65535, 0, 0, 0, 0],
    };
    let mut frame = vec![0u8; 64];
    pfc.emit(&mut frame)
        .expect("a 64-byte frame holds a PFC frame");
    let corpus = vec![frame, vec![0u8; 80]];
    for case in 0..CASES {
        let input = mutate_bytes(&mut rng, &corpus[case % corpus.len()], &corpus);
        survive("pfc", case, &input, &|bytes| {
            if let Ok(frame) = PfcFrame::new_checked(bytes) {
                let _ = PfcRepr::parse(&frame);
            }
        });
        survive("polling", case, &input, &|bytes| {
            let _ = Polling::parse(bytes);
            let _ = Polling::parse_packet(bytes);
        });
        survive("eviction", case, &input, &|bytes| {
            let _ = EvictionHeader::new_checked(bytes);
        });
    }
}

fn storm_reports() -> (
    hawkmesh_wire::topology::FabricTopology,
    Vec<TelemetryReport>,
) {
    let (topology, _, reports) = sample_pfc_storm().expect("sample");
    (topology, reports)
}

#[test]
fn binary_reports_and_their_diagnosis_survive_mutation() {
    let (topology, reports) = storm_reports();
    let victim = reports[0].polling.victim;
    let corpus: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| r.to_stream(120).expect("encodes"))
        .collect();
    let mut rng = Rng::seeded(0x1234_5678_9abc_def1);
    for case in 0..CASES {
        let mut input = mutate_bytes(&mut rng, &corpus[case % corpus.len()], &corpus);
        // Half the cases with the checksums made right again: the parser must hold on
        // every section, not only behind the checksum.
        if case % 2 == 0 {
            reseal(&mut input);
        }
        survive("binary report", case, &input, &|bytes| {
            if let Ok(decoded) = decode_reports(bytes) {
                let _ = diagnose_reports(
                    loaded(decoded),
                    topology.clone(),
                    victim,
                    &DiagnoseOptions::default(),
                );
            }
        });
    }
}

#[test]
fn json_reports_and_their_diagnosis_survive_mutation() {
    let (topology, reports) = storm_reports();
    let victim = reports[0].polling.victim;
    let seed = serde_json::to_string_pretty(&reports).expect("json");
    let mut rng = Rng::seeded(0xdead_beef_cafe_f00d);
    for case in 0..CASES / 5 {
        let input = mutate_text(&mut rng, &seed);
        survive("json report", case, input.as_bytes(), &|bytes| {
            if let Ok(file) = serde_json::from_slice::<ReportFile>(bytes) {
                let _ = diagnose_reports(
                    loaded(file.into_reports()),
                    topology.clone(),
                    victim,
                    &DiagnoseOptions::default(),
                );
            }
        });
    }
}

#[test]
fn scenarios_survive_mutation_and_what_parses_builds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let seeds: Vec<String> = [
        "k4-incast.toml",
        "k4-routing-loop.toml",
        "k4-slow-receiver.toml",
        "leaf-spine-oversubscribed.toml",
        "rail-optimised.toml",
        "ring-deadlock.toml",
    ]
    .iter()
    .map(|name| std::fs::read_to_string(dir.join(name)).expect("scenario"))
    .collect();
    let mut rng = Rng::seeded(0x0bad_5eed_0000_0001);
    for case in 0..CASES / 25 {
        let input = mutate_text(&mut rng, &seeds[case % seeds.len()]);
        survive("scenario", case, input.as_bytes(), &|bytes| {
            let text = String::from_utf8_lossy(bytes);
            if let Ok(scenario) = Scenario::parse(&text, "fuzz.toml", dir.clone()) {
                let _ = Simulation::new(&scenario);
            }
        });
    }
}

#[test]
fn hpcc_files_survive_mutation() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hpcc");
    let topology = std::fs::read_to_string(dir.join("topology.txt")).expect("topology");
    let flows = std::fs::read_to_string(dir.join("flow.txt")).expect("flows");
    let mut rng = Rng::seeded(0x5eed_0000_0000_0002);
    for case in 0..CASES / 5 {
        let input = mutate_text(&mut rng, &topology);
        survive("hpcc topology", case, input.as_bytes(), &|bytes| {
            let text = String::from_utf8_lossy(bytes);
            let _ = parse_hpcc_topology(&text, "topology.txt", &Limits::default());
        });
        let input = mutate_text(&mut rng, &flows);
        survive("hpcc flows", case, input.as_bytes(), &|bytes| {
            let text = String::from_utf8_lossy(bytes);
            let _ = parse_hpcc_flows(&text, "flow.txt", 0, &|n| Some(n), 7);
        });
    }
}
