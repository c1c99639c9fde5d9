//! `hawkmesh knobs-set --bfrt` writes the switch ECN knobs into the program's `ecn_profile`
//! over BF Runtime, here against the model-backed server (`bfrt-model`): a dry run prints
//! what it would write and writes nothing; a write fills every entry of the given ports; a
//! setting without all three ECN knobs is refused naming the missing one.

use std::process::Command;
use std::sync::{Arc, Mutex};

use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::model::{Model, Routing};
use hawkmesh_wire::dataplane::CPU_PORT;

fn knobs_set(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .arg("knobs-set")
        .args(args)
        .output()
        .expect("running hawkmesh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn knobs_set_writes_the_program_ecn_profile_over_bf_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let model = Model::new(program, Routing::FromTable, CPU_PORT).expect("model");
    let device = Arc::new(Mutex::new(Device::new(model)));
    let server = BfrtServer::new(
        device.clone(),
        "hawkmesh",
        hawkmesh_bfrt_model::program_description().to_vec(),
    )
    .expect("server");
    let address = format!(
        "127.0.0.1:{}",
        server.spawn_loopback(&runtime).expect("serve on loopback")
    );
    let entries = || {
        device
            .lock()
            .unwrap()
            .model
            .table_len("ecn_profile")
            .expect("table")
    };

    let setting = ["kmin_kb=400", "kmax_kb=1600", "pmax=0.2"];
    let mut dry = vec!["--bfrt", &address, "--ecn-ports", "2-3", "--dry-run"];
    dry.extend(setting);
    let (ok, stdout, stderr) = knobs_set(&dry);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    // 400 KB = 5,000 cells, 1,600 KB = 20,000 cells, R = 15,000 / 0.2 = 75,000 cells.
    assert_eq!(
        lines[0],
        "kmin_kb: would write 400000 B = 5000 cells of 80 B to ecn_profile[port 2, draws 0..256] as ecn_red(kmax = 20000, mark_above = 5146..=79853) in cells of 80 B"
    );
    assert!(lines[5].starts_with("pmax: would write 0.2 to ecn_profile[port 3,"));
    assert_eq!(entries(), 0, "a dry run writes nothing");

    let mut write = vec!["--bfrt", &address, "--ecn-ports", "2-3"];
    write.extend(setting);
    let (ok, stdout, stderr) = knobs_set(&write);
    assert!(ok, "{stderr}");
    assert!(stdout.lines().all(|l| l.contains(": wrote ")), "{stdout}");
    assert_eq!(entries(), 512);

    let (ok, _, stderr) = knobs_set(&["--bfrt", &address, "--ecn-ports", "2", "pmax=0.1"]);
    assert!(!ok);
    assert!(
        stderr.contains("kmin_kb: --bfrt writes whole ecn_profile entries"),
        "{stderr}"
    );
    let (ok, _, stderr) = knobs_set(&["--bfrt", &address, "--ecn-ports", "3-1", "pmax=0.1"]);
    assert!(!ok);
    assert!(
        stderr.contains("--ecn-ports: `3-1`: 3 is above 1"),
        "{stderr}"
    );
    let (ok, _, stderr) = knobs_set(&["--bfrt", &address, "pmax=0.1"]);
    assert!(!ok);
    assert!(stderr.contains("--bfrt needs --ecn-ports"), "{stderr}");
}
