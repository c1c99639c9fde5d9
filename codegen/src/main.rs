//! `hawkmesh-codegen`: writes or checks the generated files (P4 for TNA and v1model, the Rust
//! constants in `wire/`), and prints the resource report of a variant.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use hawkmesh_codegen::p4::{emit, Target};
use hawkmesh_codegen::{resources, rust_consts};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};

#[derive(Parser, Debug)]
#[command(about = "Generate the hawkmesh data plane (P4 TNA, P4 v1model, Rust constants)")]
struct Args {
    /// Fail (exit 1) when a generated file differs from what the description produces.
    #[arg(long)]
    check: bool,
    /// Rewrite the generated files.
    #[arg(long)]
    write: bool,
    /// Print the SRAM estimate per module (HAWKEYE Fig. 13b) for the default variant.
    #[arg(long)]
    resources: bool,
    /// Run N RoCEv2 data packets through ingress + egress of the model and print ns/packet.
    #[arg(long, value_name = "N")]
    bench: Option<u64>,
    /// Workspace root (default: the directory above this crate).
    #[arg(long)]
    root: Option<PathBuf>,
}

fn outputs() -> Result<Vec<(&'static str, String)>, String> {
    let p = program(&HawkeyeParams::default()).map_err(|e| e.to_string())?;
    Ok(vec![
        ("p4/tna/hawkmesh.p4", emit(&p, Target::Tna)),
        ("p4/tna/bfrt.json", hawkmesh_codegen::bfrt::emit(&p)),
        ("p4/v1model/hawkmesh.p4", emit(&p, Target::V1model)),
        ("wire/src/dataplane.rs", rust_consts::emit(&p)),
        ("dataplane/src/model/generated.rs", native_source()?),
    ])
}

/// The native back end for the variants netsim runs on every switch: the default
/// parameters on ToRs, and without the Elastic Sketch elsewhere.
fn native_source() -> Result<String, String> {
    let tor = program(&HawkeyeParams::default()).map_err(|e| e.to_string())?;
    let fabric = program(&HawkeyeParams {
        sketch: None,
        ..HawkeyeParams::default()
    })
    .map_err(|e| e.to_string())?;
    hawkmesh_dataplane::model::emit_native(&[("tor", &tor), ("fabric", &fabric)])
        .map_err(|e| e.to_string())
}

fn bench(n: u64) -> Result<String, String> {
    use hawkmesh_dataplane::model::{
        DataPlane, EgressInput, IngressInput, Model, PassOutput, Routing,
    };
    use hawkmesh_wire::telemetry::FiveTuple;
    let params = HawkeyeParams::default();
    let p = std::sync::Arc::new(program(&params).map_err(|e| e.to_string())?);
    let mut model =
        Model::new(p.clone(), Routing::FromInput, params.cpu_port).map_err(|e| e.to_string())?;
    let flows: Vec<Vec<u8>> = (0..256u16)
        .map(|i| {
            let t = FiveTuple::rocev2([10, 0, (i >> 4) as u8, i as u8], 49152 + i, [10, 1, 0, 1]);
            hawkmesh_dataplane::packets::rocev2_data(&p, &t, 0, 2, 64, 1, 1062)
        })
        .collect();
    let (mut ing, mut eg) = (PassOutput::default(), PassOutput::default());
    let cpu_start = cpu_ns();
    let start = std::time::Instant::now();
    for i in 0..n {
        let bytes = &flows[(i % 256) as usize];
        let t = i * 90;
        let input = IngressInput {
            ingress_port: (i % 16) as u16,
            tstamp_ns: t,
            routed_egress_port: Some(((i / 7) % 32) as u16),
        };
        model
            .ingress(bytes, &input, &mut ing)
            .map_err(|e| e.to_string())?;
        let e = EgressInput {
            ingress_port: input.ingress_port,
            egress_port: 20,
            queue: 3,
            enq_tstamp_ns: t,
            enq_qdepth: (i % 500) as u32,
            packet_length: 1062,
        };
        model
            .egress(&ing.bytes, &e, &ing.bridged, &mut eg)
            .map_err(|e| e.to_string())?;
    }
    let ns = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    // On-CPU time as well: wall time is noisy on a shared machine.
    let cpu = match (cpu_start, cpu_ns()) {
        (Some(a), Some(b)) => format!(", {:.0} ns on CPU", (b - a) as f64 / n.max(1) as f64),
        _ => String::new(),
    };
    Ok(format!(
        "{n} packets: {ns:.0} ns per packet{cpu} (ingress + egress, ToR variant with Elastic Sketch)"
    ))
}

/// Nanoseconds this thread has run on a CPU (Linux `schedstat`), if available.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let root = args
        .root
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let files = match outputs() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: the program does not build: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.resources {
        match program(&HawkeyeParams::default()) {
            Ok(p) => print!("{}", resources::report(&p)),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(n) = args.bench {
        match bench(n) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut stale = Vec::new();
    for (path, text) in &files {
        let full = root.join(path);
        let current = std::fs::read_to_string(&full).unwrap_or_default();
        if current != *text {
            if args.write {
                if let Some(dir) = full.parent() {
                    if let Err(e) = std::fs::create_dir_all(dir) {
                        eprintln!("error: {}: {e}", dir.display());
                        return ExitCode::FAILURE;
                    }
                }
                if let Err(e) = std::fs::write(&full, text) {
                    eprintln!("error: {}: {e}", full.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {path}");
            } else {
                stale.push(*path);
            }
        }
    }
    if args.check && !stale.is_empty() {
        for path in &stale {
            eprintln!("stale: {path}");
        }
        eprintln!("generated files are out of date; run `cargo run -p hawkmesh-codegen -- --write` and commit the result");
        return ExitCode::FAILURE;
    }
    if args.check {
        println!("generated files are up to date");
    }
    ExitCode::SUCCESS
}
