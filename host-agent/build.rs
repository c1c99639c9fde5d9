//! Compiles the eBPF service tracer (bpf/qp_trace.c) with clang when the `ebpf` feature is
//! on (src/ebpf.rs embeds the object); nothing otherwise.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/qp_trace.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var_os("CARGO_FEATURE_EBPF").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let object = out.join("qp_trace.o");
    let result = Command::new(&clang)
        .args([
            "-target",
            "bpf",
            "-D__TARGET_ARCH_x86",
            "-O2",
            "-Wall",
            "-Werror",
            "-c",
            "bpf/qp_trace.c",
            "-o",
        ])
        .arg(&object)
        .output();
    match result {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "feature ebpf: {clang} could not compile bpf/qp_trace.c ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => panic!(
            "feature ebpf: cannot run {clang} ({e}); it compiles bpf/qp_trace.c \
             (Debian: apt-get install clang, or set CLANG)"
        ),
    }
}
