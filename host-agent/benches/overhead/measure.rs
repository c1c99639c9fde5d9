//! The measurement: options, the agent's CPU and memory from `/proc`, its probe rates from
//! its metrics, the default window and the soak.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::lab::{self, Agent, Lab, NICS};
use crate::support::daemon_lab::{metric, try_scrape};

/// Issue 25's targets: at most 1 % of one core (R-Pingmesh §6: 3 % CPU for its agent).
const CPU_TARGET_PERCENT: f64 = 1.0;
/// At most 10 MB resident, decimal (10^7 bytes; R-Pingmesh §6: 18.5 MB).
const RSS_TARGET_BYTES: u64 = 10_000_000;
/// A NIC's measured probe rate may differ this much from the controller's plan before the
/// run is refused (the agent lays both loops into one cycle of whole slots,
/// `host-agent/src/daemon/plan.rs`, which rounds).
const RATE_TOLERANCE: f64 = 0.10;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Acquire)
}

const USAGE: &str = "\
usage: cargo bench -p hawkmesh-host-agent --features daemon --bench overhead -- [options]
  --secs N            measuring window after the warm-up, s (60)
  --warmup-secs N     warm-up after the measured agent registered, s (10)
  --soak-secs N       soak instead: sample the agent's memory for N s (at least 1 hour for issue 25)
  --sample-secs N     soak sampling interval, s (60)
  --settle-secs N     soak: growth is counted from the sample at this time, s (300)
  --max-growth-kib N  soak: the resident size may grow this much after --settle-secs, KiB (1024)
  --hosts N           hosts in the lab, each with 8 RNICs and an agent (4)
  --rate PPS          probes a second per RNIC the controller plans (150)
  --rotation-secs N   the controller replaces a fifth of the inter-ToR 5-tuples every N s
                      (default its hour, R-Pingmesh §5); short, it ages the agents' caches
                      of source-port sockets as days of hourly rotations do
  --agent PATH        the agent binary: hawkmesh-host-agent or the hawkmesh CLI (default:
                      the hawkmesh-host-agent built with this bench)";

/// The run's options.
#[derive(Debug)]
struct Options {
    secs: u64,
    warmup_secs: u64,
    soak_secs: Option<u64>,
    sample_secs: u64,
    settle_secs: u64,
    max_growth_kib: u64,
    hosts: usize,
    rate: f64,
    rotation_secs: Option<u64>,
    agent: Option<PathBuf>,
}

impl Options {
    fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            secs: 60,
            warmup_secs: 10,
            soak_secs: None,
            sample_secs: 60,
            settle_secs: 300,
            max_growth_kib: 1024,
            hosts: 4,
            rate: 150.0,
            rotation_secs: None,
            agent: None,
        };
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            // `cargo bench` passes --bench to every bench.
            if arg == "--bench" {
                continue;
            }
            if arg == "--help" || arg == "-h" {
                return Err(USAGE.into());
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{arg}: needs a value\n{USAGE}"))?;
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{arg} {value}: not a whole number"))
            };
            match arg.as_str() {
                "--secs" => o.secs = number()?,
                "--warmup-secs" => o.warmup_secs = number()?,
                "--soak-secs" => o.soak_secs = Some(number()?),
                "--sample-secs" => o.sample_secs = number()?,
                "--settle-secs" => o.settle_secs = number()?,
                "--max-growth-kib" => o.max_growth_kib = number()?,
                "--hosts" => o.hosts = number()? as usize,
                "--rate" => {
                    o.rate = value
                        .parse()
                        .map_err(|_| format!("--rate {value}: not a number"))?
                }
                "--rotation-secs" => o.rotation_secs = Some(number()?),
                "--agent" => o.agent = Some(PathBuf::from(&value)),
                _ => return Err(format!("unknown option {arg}\n{USAGE}")),
            }
        }
        if o.secs == 0 || o.sample_secs == 0 || o.rotation_secs == Some(0) {
            return Err("--secs, --sample-secs and --rotation-secs must be above 0".into());
        }
        if !(2..=250).contains(&o.hosts) {
            return Err(format!("--hosts {}: must be in 2..=250", o.hosts));
        }
        if o.soak_secs.is_some_and(|s| s <= o.settle_secs) {
            return Err(format!(
                "--soak-secs must be above --settle-secs ({})",
                o.settle_secs
            ));
        }
        Ok(o)
    }
}

/// The agent binary: `--agent` (the daemon-only `hawkmesh-host-agent` or the `hawkmesh`
/// CLI), else the `hawkmesh-host-agent` cargo built with this bench.
fn agent_binary(option: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = option {
        return path
            .canonicalize()
            .map_err(|e| format!("--agent {}: {e}", path.display()));
    }
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_hawkmesh-host-agent"));
    if !binary.is_file() {
        return Err(format!(
            "no {}: cargo builds it with this bench (`--features daemon`), or pass --agent PATH",
            binary.display()
        ));
    }
    Ok(binary)
}

/// Clock ticks a second of `/proc/PID/stat`'s times (`getconf CLK_TCK`).
fn clock_ticks() -> Result<f64, String> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .map_err(|e| format!("getconf CLK_TCK: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| *t > 0.0)
        .ok_or_else(|| format!("getconf CLK_TCK printed {text:?}"))
}

/// A process's CPU time so far: (utime, stime) in clock ticks, fields 14 and 15 of
/// `/proc/PID/stat` (proc(5)), counted after the parenthesised command name.
fn cpu_ticks(pid: u32) -> Result<(u64, u64), String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let after = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("{path}: no `)` after the command name"))?;
    // After the name: field 3 (state) is the first; utime is field 14, stime 15.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{path}: field {n} missing or not a number"))
    };
    Ok((field(14)?, field(15)?))
}

/// A process's memory (KiB, `/proc/PID/status`), threads and descriptors.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    rss: u64,
    hwm: u64,
    anon: u64,
    file: u64,
    threads: u64,
    fds: u64,
}

fn memory(pid: u32) -> Result<Memory, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{path}: no {name}"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .count() as u64;
    Ok(Memory {
        rss: field("VmRSS:")?,
        hwm: field("VmHWM:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
        threads: field("Threads:")?,
        fds,
    })
}

/// The process's peak resident size so far (`VmHWM`, KiB), then resets it to the current
/// size (`/proc/PID/clear_refs` ← 5, proc(5)): the window's own peak is read at its end,
/// apart from the set-up's (TLS, the first pinglist).
fn reset_peak(pid: u32) -> Result<u64, String> {
    let peak = memory(pid)?.hwm;
    let path = format!("/proc/{pid}/clear_refs");
    std::fs::write(&path, "5").map_err(|e| format!("{path}: {e}"))?;
    Ok(peak)
}

/// Context switches of all of a process's threads so far (each `/proc/PID/task/TID/status`:
/// voluntary ones are its wake-ups).
fn context_switches(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let path = entry
            .map_err(|e| format!("{dir}: {e}"))?
            .path()
            .join("status");
        // A thread that exited in the meantime is skipped.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}

/// h0's per-NIC counters from its metrics endpoint.
#[derive(Clone, Debug, Default)]
struct Counters {
    sent: Vec<f64>,
    answered: Vec<f64>,
    timeouts: Vec<f64>,
    not_sent: Vec<f64>,
    acks: Vec<f64>,
    uploads_ok: f64,
    uploads_failed: f64,
    delivered: f64,
}

fn counters(lab: &Lab) -> Result<Counters, String> {
    let text = try_scrape(&lab.hosts[0])
        .ok_or("h0's metrics endpoint (127.0.0.1:9464 in its namespace) did not answer")?;
    let per_nic = |name: &str| -> Vec<f64> {
        (0..NICS)
            .map(|n| metric(&text, &format!("{name}{{host=\"h0\",nic=\"{n}\"}}")))
            .collect()
    };
    Ok(Counters {
        sent: per_nic("hawkmesh_host_probes_sent_total"),
        answered: per_nic("hawkmesh_host_probes_answered_total"),
        timeouts: per_nic("hawkmesh_host_probes_timeout_total"),
        not_sent: per_nic("hawkmesh_host_probes_not_sent_total"),
        acks: per_nic("hawkmesh_host_acks_sent_total"),
        uploads_ok: metric(&text, "hawkmesh_host_uploads_ok_total{host=\"h0\"}"),
        uploads_failed: metric(&text, "hawkmesh_host_uploads_failed_total{host=\"h0\"}"),
        delivered: metric(&text, "hawkmesh_host_results_delivered_total{host=\"h0\"}"),
    })
}

/// One reading of every agent: CPU ticks and memory, h0's counters, when.
struct Reading {
    at: Instant,
    cpu: Vec<(u64, u64)>,
    memory: Vec<Memory>,
    switches: u64,
    counters: Counters,
}

fn read(lab: &mut Lab) -> Result<Reading, String> {
    check_alive(&mut lab.agents)?;
    let at = Instant::now();
    let mut cpu = Vec::new();
    let mut mem = Vec::new();
    for agent in &lab.agents {
        cpu.push(cpu_ticks(agent.pid())?);
        mem.push(memory(agent.pid())?);
    }
    let switches = context_switches(lab.agents[0].pid())?;
    let counters = counters(lab)?;
    Ok(Reading {
        at,
        cpu,
        memory: mem,
        switches,
        counters,
    })
}

fn check_alive(agents: &mut [Agent]) -> Result<(), String> {
    for agent in agents.iter_mut() {
        if let Some(status) = agent.exited() {
            return Err(format!(
                "{}'s agent exited ({status}); its log ({}) ends:\n{}",
                agent.host,
                agent.log.display(),
                agent.log_tail(20)
            ));
        }
    }
    Ok(())
}

/// Sleeps `duration`, returning early with an error when interrupted or an agent exits.
fn wait(lab: &mut Lab, duration: Duration) -> Result<(), String> {
    let until = Instant::now() + duration;
    loop {
        if interrupted() {
            return Err("interrupted".into());
        }
        check_alive(&mut lab.agents)?;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(250)));
    }
}

fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

/// Share of one core between two readings of process `i`.
fn cpu_percent(a: &Reading, b: &Reading, i: usize, ticks: f64) -> f64 {
    let used = (b.cpu[i].0 + b.cpu[i].1).saturating_sub(a.cpu[i].0 + a.cpu[i].1) as f64 / ticks;
    100.0 * used / b.at.duration_since(a.at).as_secs_f64()
}

/// Prints the figures between two readings; returns whether the probe rates are those
/// planned (within [`RATE_TOLERANCE`]).
fn report(a: &Reading, b: &Reading, planned: &[f64], ticks: f64, setup_peak_kib: u64) -> bool {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let rate =
        |f: fn(&Counters) -> &Vec<f64>, n: usize| (f(&b.counters)[n] - f(&a.counters)[n]) / secs;
    println!(
        "{:<6} {:>8} {:>9} {:>11} {:>9} {:>9} {:>16}",
        "RNIC", "planned", "sent/s", "answered/s", "timeouts", "not sent", "ACKs sent/s"
    );
    let mut rates_ok = true;
    let mut total = [0.0; 4];
    for (n, plan) in planned.iter().enumerate() {
        let sent = rate(|c| &c.sent, n);
        let answered = rate(|c| &c.answered, n);
        let timeouts = b.counters.timeouts[n] - a.counters.timeouts[n];
        let not_sent = b.counters.not_sent[n] - a.counters.not_sent[n];
        let acks = rate(|c| &c.acks, n);
        rates_ok &= (sent - plan).abs() <= RATE_TOLERANCE * plan;
        for (t, v) in total.iter_mut().zip([*plan, sent, answered, acks]) {
            *t += v;
        }
        println!(
            "nic{n:<3} {plan:>8.1} {sent:>9.1} {answered:>11.1} {timeouts:>9} {not_sent:>9} {acks:>16.1}"
        );
    }
    println!(
        "{:<6} {:>8.1} {:>9.1} {:>11.1} {:>9} {:>9} {:>16.1}",
        "all", total[0], total[1], total[2], "", "", total[3]
    );
    let (ua, ub) = (a.cpu[0], b.cpu[0]);
    let cpu = cpu_percent(a, b, 0, ticks);
    println!(
        "CPU: {cpu:.2} % of one core (user {:.2} s + system {:.2} s in {secs:.1} s; {:.0} context switches/s) — target ≤ {CPU_TARGET_PERCENT} %: {}",
        (ub.0 - ua.0) as f64 / ticks,
        (ub.1 - ua.1) as f64 / ticks,
        (b.switches - a.switches) as f64 / secs,
        if cpu <= CPU_TARGET_PERCENT { "met" } else { "MISSED" }
    );
    let (ma, mb_) = (a.memory[0], b.memory[0]);
    let peak = mb_.hwm;
    println!(
        "RSS: start {:.2} MB, end {:.2} MB, peak {:.2} MB in the window (VmHWM, reset at its start), {:.2} MB since the agent started (MB = 10^6 bytes) — target ≤ 10 MB: {}",
        mb(ma.rss),
        mb(mb_.rss),
        mb(peak),
        mb(peak.max(setup_peak_kib)),
        if peak * 1024 <= RSS_TARGET_BYTES { "met" } else { "MISSED" }
    );
    println!(
        "     end: anonymous {:.2} MB, file-backed {:.2} MB; {} threads, {} descriptors",
        mb(mb_.anon),
        mb(mb_.file),
        mb_.threads,
        mb_.fds
    );
    println!(
        "uploads: {} acknowledged, {} failed, {:.0} results/s delivered",
        b.counters.uploads_ok - a.counters.uploads_ok,
        b.counters.uploads_failed - a.counters.uploads_failed,
        (b.counters.delivered - a.counters.delivered) / secs
    );
    if a.cpu.len() > 1 {
        let peers: Vec<(f64, u64)> = (1..a.cpu.len())
            .map(|i| (cpu_percent(a, b, i, ticks), b.memory[i].hwm))
            .collect();
        let fold = |f: fn(&(f64, u64)) -> f64| {
            peers
                .iter()
                .map(f)
                .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
        };
        let (cpu_lo, cpu_hi) = fold(|p| p.0);
        let (hwm_lo, hwm_hi) = fold(|p| mb(p.1));
        println!(
            "the other {} agents (same load, not the measured one): CPU {cpu_lo:.2}–{cpu_hi:.2} %, peak RSS {hwm_lo:.2}–{hwm_hi:.2} MB",
            peers.len()
        );
    }
    rates_ok
}

/// One soak sample of h0: its memory, and its CPU share and mean probe rate per NIC since
/// the sample before.
struct Sample {
    t: u64,
    memory: Memory,
    cpu: f64,
    pps: f64,
}

/// The soak: a reading every `--sample-secs` for `duration` seconds; fails when h0's
/// resident size, after `--settle-secs`, exceeds the sample taken then by more than
/// `--max-growth-kib`, or when the probe rates are not those planned.
fn soak(
    lab: &mut Lab,
    options: &Options,
    duration: u64,
    planned: &[f64],
    ticks: f64,
) -> Result<bool, String> {
    println!(
        "soak: {duration} s, a sample every {} s; growth counted from t = {} s, bound {} KiB",
        options.sample_secs, options.settle_secs, options.max_growth_kib
    );
    println!(
        "{:>7} {:>10} {:>10} {:>10} {:>10} {:>7} {:>5} {:>12}",
        "t (s)", "VmRSS KiB", "VmHWM KiB", "anon KiB", "file KiB", "CPU %", "fds", "probes/s/NIC"
    );
    let print = |s: &Sample| {
        let m = &s.memory;
        println!(
            "{:>7} {:>10} {:>10} {:>10} {:>10} {:>7.2} {:>5} {:>12.1}",
            s.t, m.rss, m.hwm, m.anon, m.file, s.cpu, m.fds, s.pps
        );
    };
    let setup_peak = reset_peak(lab.agents[0].pid())?;
    let first = read(lab)?;
    let mut samples = vec![Sample {
        t: 0,
        memory: first.memory[0],
        cpu: 0.0,
        pps: 0.0,
    }];
    print(&samples[0]);
    let mut last: Option<Reading> = None;
    for k in 1.. {
        let offset = (k * options.sample_secs).min(duration);
        let due = first.at + Duration::from_secs(offset);
        wait(lab, due.saturating_duration_since(Instant::now()))?;
        let now = read(lab)?;
        let before = last.as_ref().unwrap_or(&first);
        let secs = now.at.duration_since(before.at).as_secs_f64();
        let sent: f64 = (0..NICS)
            .map(|n| now.counters.sent[n] - before.counters.sent[n])
            .sum();
        let sample = Sample {
            t: now.at.duration_since(first.at).as_secs_f64().round() as u64,
            memory: now.memory[0],
            cpu: cpu_percent(before, &now, 0, ticks),
            pps: sent / secs / NICS as f64,
        };
        print(&sample);
        samples.push(sample);
        last = Some(now);
        if offset >= duration {
            break;
        }
    }
    let end = last.as_ref().unwrap_or(&first);
    println!("\nover the whole soak:");
    let rates_ok = report(&first, end, planned, ticks, setup_peak);
    let series: Vec<String> = samples
        .iter()
        .map(|s| format!("{:.2}", mb(s.memory.rss)))
        .collect();
    println!(
        "VmRSS series (MB, every {} s): {}",
        options.sample_secs,
        series.join(" ")
    );
    let baseline = samples
        .iter()
        .find(|s| s.t >= options.settle_secs)
        .ok_or("soak: no sample after the settling time")?;
    let highest = samples
        .iter()
        .filter(|s| s.t >= baseline.t)
        .max_by_key(|s| s.memory.rss)
        .unwrap_or(baseline);
    let last_sample = samples.last().unwrap_or(baseline);
    let growth = highest.memory.rss.saturating_sub(baseline.memory.rss);
    println!(
        "VmRSS after the first {} s: {} KiB at t = {} s, highest {} KiB at t = {} s, last {} KiB at t = {} s: growth {growth} KiB (bound {} KiB); descriptors {} → {}",
        options.settle_secs,
        baseline.memory.rss,
        baseline.t,
        highest.memory.rss,
        highest.t,
        last_sample.memory.rss,
        last_sample.t,
        options.max_growth_kib,
        baseline.memory.fds,
        last_sample.memory.fds
    );
    if growth > options.max_growth_kib {
        return Err(format!(
            "soak: h0's resident size grew by {growth} KiB after t = {} s ({} KiB at t = {} s → {} KiB at t = {} s), more than the {} KiB allowed: memory is not constant",
            baseline.t,
            baseline.memory.rss,
            baseline.t,
            highest.memory.rss,
            highest.t,
            options.max_growth_kib
        ));
    }
    println!(
        "memory constant: within {} KiB after t = {} s",
        options.max_growth_kib, baseline.t
    );
    Ok(rates_ok)
}

/// Runs the benchmark; the process's exit code (0: done, the targets are only reported).
pub fn main() -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("overhead bench: {e}");
            1
        }
    }
}

/// Watches SIGINT and SIGTERM on a thread of its own: they set [`INTERRUPTED`], which the
/// waits check, so that the lab is taken down.
fn watch_signals() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the signal watcher's runtime: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) else {
                    eprintln!("overhead bench: cannot watch SIGINT/SIGTERM");
                    return;
                };
                let name = tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                };
                eprintln!("overhead bench: {name}: taking the lab down");
                INTERRUPTED.store(true, Ordering::Release);
            })
        })
        .map_err(|e| format!("the signal watcher's thread: {e}"))?;
    Ok(())
}

fn run() -> Result<(), String> {
    let options = Options::parse(std::env::args().skip(1))?;
    let binary = agent_binary(options.agent.as_deref())?;
    let ticks = clock_ticks()?;
    watch_signals()?;
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let age = built.elapsed().unwrap_or_default().as_secs();
    let topology = lab::fabric(options.hosts);
    let (pinglists, planned) = lab::pinglist_settings(&topology, options.rate)?;
    println!(
        "hawkmesh host-agent overhead (issue 25): {} (modified {age} s ago)",
        binary.display()
    );
    println!(
        "lab: {} hosts × {NICS} RNICs (veth on one bridge), an agent process per host; controller: ToR-mesh {} probes/s, inter-ToR link target {:.2} probes/s over the rail ToRs and 2 spines → {:.1} probes/s planned per RNIC of h0",
        options.hosts,
        pinglists.tor_mesh_pps,
        pinglists.link_target_pps,
        planned.iter().sum::<f64>() / planned.len() as f64
    );
    if let Some(secs) = options.rotation_secs {
        println!("pinglist rotation every {secs} s (a fifth of each ToR's inter-ToR 5-tuples)");
    }
    let mut lab = Lab::start(
        &binary,
        options.hosts,
        topology,
        pinglists,
        options.rotation_secs.map(Duration::from_secs),
        &interrupted,
    )?;
    println!(
        "h0's agent: pid {}; {}",
        lab.agents[0].pid(),
        lab.describe()
    );
    wait(&mut lab, Duration::from_secs(options.warmup_secs))?;
    let rates_ok = match options.soak_secs {
        None => {
            let setup_peak = reset_peak(lab.agents[0].pid())?;
            let a = read(&mut lab)?;
            wait(&mut lab, Duration::from_secs(options.secs))?;
            let b = read(&mut lab)?;
            println!(
                "window: {:.1} s after a {} s warm-up",
                b.at.duration_since(a.at).as_secs_f64(),
                options.warmup_secs
            );
            report(&a, &b, &planned, ticks, setup_peak)
        }
        Some(duration) => soak(&mut lab, &options, duration, &planned, ticks)?,
    };
    // The agent's own account of its run (the CLI prints it on stop).
    let h0 = &mut lab.agents[0];
    let status = h0.stop()?;
    let log = std::fs::read_to_string(&h0.log).unwrap_or_default();
    let summary = log
        .lines()
        .rev()
        .find(|l| l.contains("stopped:"))
        .unwrap_or("(no summary line in its log)");
    println!("h0's agent exited ({status}): {summary}");
    if !status.success() {
        return Err(format!(
            "h0's agent exited with {status}; its log ends:\n{}",
            h0.log_tail(20)
        ));
    }
    if !rates_ok {
        return Err(format!(
            "h0's measured probe rates differ from the controller's plan by more than {} %: the figures are not for the planned load",
            RATE_TOLERANCE * 100.0
        ));
    }
    Ok(())
}
