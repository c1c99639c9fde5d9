//! `hawkmesh-host-agent --config FILE`: the host agent daemon alone (what `hawkmesh
//! host-agent` runs, without the rest of the CLI's code to load on every RDMA host).
//! Runs until SIGTERM or SIGINT; exits non-zero when the configuration or the set-up is
//! refused, or when some results could not be delivered to the analyzer.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: hawkmesh-host-agent --config FILE

The hawkmesh host agent: registers the host's RNICs with the pingmesh controller, probes
their pinglists over kernel UDP, answers other agents' probes, uploads the results and
serves /metrics. FILE is TOML; hw-lab/host-agent.toml is an example with every key.";

fn config_path(args: &[String]) -> Result<PathBuf, String> {
    match args {
        [flag, path] if flag == "--config" => Ok(PathBuf::from(path)),
        [flag] if flag == "--config" => Err("--config needs a file".into()),
        [] => Err("--config FILE is required".into()),
        [other, ..] => Err(format!("unexpected argument `{other}`")),
    }
}

/// glibc's allocator, set before any thread starts: one arena for the agent's three
/// threads (each thread otherwise gets an arena of its own, ~1 MB resident apiece at the
/// benchmark's load) and fixed mmap/trim thresholds, so an upload batch's buffers go back
/// to the kernel when freed instead of raising the thresholds and staying on the heap
/// (glibc malloc(3), M_MMAP_THRESHOLD: a fixed value disables the dynamic adjustment).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_malloc() {
    use nix::libc;
    // SAFETY: mallopt only sets allocator parameters; called once, before any other thread
    // exists, with parameters and values glibc documents.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 * 1024);
    }
}

/// Every `every`, hands the heap's free pages back to the kernel (glibc malloc_trim(3)):
/// freed memory in the middle of the heap otherwise stays resident until reused. The
/// agent's allocations follow its 5-s upload cycle (a batch's results, its encoding, the
/// RPC's buffers), so a trim per cycle keeps its resident size near what is live.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_heap_every(every: std::time::Duration) {
    use nix::libc;
    let spawned = std::thread::Builder::new()
        .name("hawkmesh-trim".into())
        .stack_size(64 * 1024)
        .spawn(move || loop {
            std::thread::sleep(every);
            // SAFETY: malloc_trim only returns free heap memory to the kernel; glibc
            // locks each arena while it does.
            unsafe {
                libc::malloc_trim(0);
            }
        });
    if let Err(error) = spawned {
        eprintln!("hawkmesh-host-agent: no heap trimming ({error})");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap_every(_every: std::time::Duration) {}

fn main() -> ExitCode {
    tune_malloc();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let path = match config_path(&args) {
        Ok(path) => path,
        Err(error) => {
            eprintln!("hawkmesh-host-agent: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    trim_heap_every(std::time::Duration::from_secs(5));
    match hawkmesh_host_agent::daemon::serve(&path) {
        Ok(summary) => {
            println!("{summary}");
            if summary.undelivered() > 0 {
                eprintln!(
                    "hawkmesh-host-agent: {} results were not delivered to the analyzer",
                    summary.undelivered()
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("hawkmesh-host-agent: {error}");
            ExitCode::FAILURE
        }
    }
}
