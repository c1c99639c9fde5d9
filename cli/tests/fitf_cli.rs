//! `hawkmesh fitf` as an operator runs it: the report of a netsim scenario, a replay of
//! recorded samples, and `--watch`, the sampling daemon, against a fake `ethtool` whose PFC
//! pause-duration counter rises at half the wall-clock rate, scraped over HTTP and stopped
//! with SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn hawkmesh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hawkmesh-fitf-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

#[test]
fn a_scenario_gives_the_studys_report_files_and_summary() {
    let out = temp("scenario");
    let run = hawkmesh()
        .arg("fitf")
        .arg("--scenario")
        .arg(repo().join("scenarios/k4-incast.toml"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for f in [
        "intervals.csv",
        "rounds.csv",
        "fitf.json",
        "report.html",
        "metrics.prom",
    ] {
        let p = out.join(f);
        assert!(
            p.metadata().is_ok_and(|m| m.len() > 0),
            "{} missing or empty; wrote: {stdout}",
            p.display()
        );
    }
    // The incast's hosts wait on PFC from their ToR: the host-up row shows waiting intervals.
    let host_up = stdout
        .lines()
        .find(|l| l.starts_with("Host") && l.contains(" up "))
        .unwrap_or_else(|| panic!("no Host up row: {stdout}"));
    let waited: f64 = host_up
        .split_whitespace()
        .find_map(|w| w.strip_suffix('%').and_then(|v| v.parse().ok()))
        .expect("waited %");
    assert!(waited > 0.0, "{host_up}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("html");
    assert!(html.contains("<svg"), "the study's plots are inline SVG");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_damaged_samples_file_is_refused_naming_the_file_and_line() {
    let d = temp("damaged");
    let file = d.join("samples.jsonl");
    std::fs::write(
        &file,
        "{\"port\":{\"node\":\"sw1\",\"port\":1,\"tier\":\"tor\",\"dir\":\"up\"},\"t_query_ns\":0,\"turnaround_ns\":10,\"xmit_wait\":5}\nnot json\n",
    )
    .expect("write");
    let run = hawkmesh()
        .arg("fitf")
        .arg("--samples")
        .arg(&file)
        .arg("--out")
        .arg(d.join("out"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        stderr.contains("samples.jsonl") && stderr.contains("line 2"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_watch_configurations_are_refused_naming_the_key() {
    let d = temp("badcfg");
    for (body, expect) in [
        ("spacing_ms = 0\n[[ethtool]]\nifname = \"eth0\"\nnode = \"h1\"\nport = 1\ntier = \"host\"\ndir = \"up\"\n", "spacing_ms"),
        ("spacing = 100\n", "spacing"),
        ("listen = \"nowhere\"\n", "listen"),
        ("", "no ports"),
    ] {
        let file = d.join("watch.toml");
        std::fs::write(&file, body).expect("write");
        let run = hawkmesh()
            .arg("fitf")
            .arg("--watch")
            .arg(&file)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{body}");
        assert!(
            stderr.contains("watch.toml") && stderr.contains(expect),
            "{body}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    body
}

/// The value of the first line of `name` whose labels contain every one of `labels`.
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_watch_daemon_serves_fitf_and_storms_from_live_counters_and_stops_on_sigterm() {
    let d = temp("watch");
    // A NIC paused half the time on priority 3, sending nothing: a PFC storm.
    std::fs::write(
        d.join("start"),
        format!(
            "{}\n",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos()
        ),
    )
    .expect("start");
    let ethtool = d.join("ethtool");
    std::fs::write(
        &ethtool,
        format!(
            r#"#!/bin/sh
D='{}'
case "$*" in
  "-S enp1s0")
    start=$(cat "$D/start"); now=$(date +%s%N); us=$(( (now - start) / 2000 ))
    echo "NIC statistics:"
    echo "     rx_prio3_pause: $((us / 100))"
    echo "     rx_prio3_pause_duration: $us"
    echo "     tx_prio3_packets: 7" ;;
  *) echo "ethtool: no such device: $*" >&2; exit 1 ;;
esac
"#,
            d.display()
        ),
    )
    .expect("ethtool");
    std::fs::set_permissions(&ethtool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for ifname in ["enp1s0", "gone0"] {
        let p = d.join("sys/class/net").join(ifname);
        std::fs::create_dir_all(&p).expect("sysfs");
        std::fs::write(p.join("operstate"), "up\n").expect("operstate");
    }
    let record = d.join("samples.jsonl");
    let config = d.join("watch.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
spacing_ms = 20
window = 20
priorities = [3]
record = "{record}"

[watchdog]
detection_ms = 100
restoration_ms = 100

[tools]
ethtool = ["{ethtool}"]
sysfs = "{sys}"

[[ethtool]]
ifname = "enp1s0"
node = "h1"
port = 1
tier = "host"
dir = "up"

[[ethtool]]
ifname = "gone0"
node = "h1"
port = 2
tier = "host"
dir = "up"
"#,
            record = record.display(),
            ethtool = ethtool.display(),
            sys = d.join("sys").display()
        ),
    )
    .expect("config");
    let mut child = hawkmesh()
        .arg("fitf")
        .arg("--watch")
        .arg(&config)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut addr = None;
    let mut seen = String::new();
    for _ in 0..20 {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
        if let Some(rest) = line.split("metrics at http://").nth(1) {
            addr = rest.trim().strip_suffix("/metrics").map(str::to_string);
            break;
        }
    }
    let Some(addr) = addr else {
        let _ = child.kill();
        panic!("no metrics address announced: {seen}");
    };
    // Drain the rest of stderr so the daemon never blocks on it.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    // Wait for a full window and the storm's detection time.
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let m = scrape(&addr);
        let reads = value(&m, "hawkmesh_fitf_reads_total", &["node=\"h1\",port=\"1\""]);
        if reads.is_some_and(|r| r >= 25.0) || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let port1 = "node=\"h1\",port=\"1\"";
    let fitf = value(
        &metrics,
        "hawkmesh_port_fitf_round_mean",
        &[port1, "metric=\"pfc_rx_p3\""],
    )
    .unwrap_or_else(|| panic!("no round mean for h1:1:\n{metrics}"));
    assert!(
        (0.35..=0.65).contains(&fitf),
        "paused half the time, measured {fitf}:\n{metrics}"
    );
    assert_eq!(
        value(&metrics, "hawkmesh_pfcwd_storm", &[port1, "priority=\"3\""]),
        Some(1.0),
        "paused without transmitting for the detection time:\n{metrics}"
    );
    assert_eq!(value(&metrics, "hawkmesh_port_up", &[port1]), Some(1.0));
    let errors = value(
        &metrics,
        "hawkmesh_fitf_read_errors_total",
        &["node=\"h1\",port=\"2\""],
    )
    .expect("errors of h1:2");
    assert!(
        errors >= 1.0,
        "the failing interface is counted:\n{metrics}"
    );

    // SIGTERM stops it cleanly.
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest = drain.join().expect("stderr");
    assert!(status.success(), "{status}: {seen}{rest}");
    assert!(rest.contains("stopped after"), "{rest}");
    assert!(rest.contains("gone0"), "the failing read is logged: {rest}");

    // The record replays into the study's report.
    let out = d.join("report");
    let replay = hawkmesh()
        .arg("fitf")
        .arg("--samples")
        .arg(&record)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("replay");
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(out.join("report.html").exists());
    let _ = std::fs::remove_dir_all(&d);
}
