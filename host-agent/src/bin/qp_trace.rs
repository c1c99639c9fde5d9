//! `hawkmesh-qp-trace`: the eBPF service tracer on its own, printing the RC connections the
//! kernel makes and destroys as `HM trace …` lines (the Soft-RoCE VM test runs it beside an
//! `ibv_rc_pingpong` connection).
//!
//! ```text
//! hawkmesh-qp-trace [--seconds S]
//! ```

use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hawkmesh_host_agent::ebpf::{gid_address, routed_local_address, QpEvent, QpTracer};

fn run(seconds: u64) -> Result<(), String> {
    let mut tracer = QpTracer::open().map_err(|e| e.to_string())?;
    println!("HM trace ready offsets={:?}", tracer.offsets());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut events = Vec::new();
    while Instant::now() < deadline {
        events.clear();
        tracer
            .poll(Duration::from_millis(200), &mut events)
            .map_err(|e| e.to_string())?;
        for event in &events {
            match event {
                QpEvent::Connect {
                    qpn,
                    dest_qpn,
                    dgid,
                    flow_label,
                    src_port,
                } => {
                    let remote = gid_address(*dgid);
                    let local = routed_local_address(remote)
                        .map_or_else(|e| format!("({e})"), |a| a.to_string());
                    println!(
                        "HM trace connect qpn={qpn:#x} dest_qpn={dest_qpn:#x} dgid={} \
                         flow_label={flow_label:#x} src_port={src_port} local={local} \
                         remote={remote}",
                        Ipv6Addr::from(*dgid)
                    )
                }
                QpEvent::Destroy { qpn } => println!("HM trace destroy qpn={qpn:#x}"),
            }
        }
    }
    println!("HM trace done malformed={}", tracer.malformed());
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let seconds = match (args.next().as_deref(), args.next()) {
        (None, _) => 60,
        (Some("--seconds"), Some(s)) => match s.parse() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hawkmesh-qp-trace: --seconds {s:?}: {e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: hawkmesh-qp-trace [--seconds S]");
            return ExitCode::from(2);
        }
    };
    match run(seconds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("HM trace-error {e}");
            eprintln!("hawkmesh-qp-trace: {e}");
            ExitCode::FAILURE
        }
    }
}
