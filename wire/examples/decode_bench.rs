//! Decoding speed of binary telemetry reports against their size (issue 21: decoding was
//! super-linear in epochs — 4 MB 0.45 s, 8 MB 5.2 s, 16 MB 41 s). Builds reports of 1, 4, 8
//! and 16 MB (many epochs of 8 ports, 2 meter rows and 8 flows each), cuts them into
//! 1,400-byte chunks and times `decode_reports` (best of 3).
//!
//! `cargo run --release -p hawkmesh-wire --example decode_bench`

use hawkmesh_wire::telemetry::{
    decode_reports, EpochTelemetry, FiveTuple, FlowRecord, MeterRecord, PollingContext, PortRecord,
    TelemetryReport, TraceFlags, TELEMETRY_FORMAT_VERSION,
};
use std::time::Instant;

fn report(epochs: u64) -> TelemetryReport {
    let epoch_ns = 1 << 18;
    TelemetryReport {
        version: TELEMETRY_FORMAT_VERSION,
        switch: 3,
        event_id: 42,
        epoch_ns,
        polling: PollingContext {
            ingress_port: 1,
            flags: TraceFlags::BOTH,
            victim: FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 0, 2]),
            egress: Vec::new(),
        },
        more_polling: Vec::new(),
        paused_ports: Vec::new(),
        epochs: (0..epochs)
            .map(|i| EpochTelemetry {
                epoch_id: i,
                start_ns: i * epoch_ns,
                lost_evictions: 0,
                ports: (0..8u16)
                    .map(|port| PortRecord {
                        port,
                        packet_count: 100,
                        paused_packet_count: 10,
                        queue_depth_sum_bytes: 100_000,
                        unpaused_queue_depth_sum_bytes: 90_000,
                        xon_count: 0,
                    })
                    .collect(),
                meters: (0..2u16)
                    .map(|port| MeterRecord {
                        ingress_port: port,
                        egress_port: port + 1,
                        bytes: 100_000,
                    })
                    .collect(),
                flows: (0..8u16)
                    .map(|f| FlowRecord {
                        flow: FiveTuple::rocev2([10, 0, 0, 1], 49152 + f, [10, 0, 0, 2]),
                        egress_port: f % 8,
                        packet_count: 10,
                        paused_packet_count: 1,
                        queue_depth_sum_bytes: 10_000,
                        first_enqueue_offset_ns: 0,
                        last_enqueue_offset_ns: 1000,
                        evicted: false,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn main() {
    println!("| report | epochs | chunks | decode (best of 3) | MB/s |");
    println!("|---|---|---|---|---|");
    for mb in [1u64, 4, 8, 16] {
        // An epoch is ~ 16 + 8·28 + 2·12 + 8·40 bytes of records plus section headers.
        let epochs = mb * 1_000_000 / 640;
        let stream = report(epochs).to_stream(1400).expect("encodes");
        let chunks = stream.len().div_ceil(1400);
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let started = Instant::now();
            let decoded = decode_reports(&stream).expect("decodes");
            best = best.min(started.elapsed().as_secs_f64());
            assert_eq!(decoded[0].epochs.len() as u64, epochs);
        }
        println!(
            "| {:.1} MB | {epochs} | {chunks} | {:.1} ms | {:.0} |",
            stream.len() as f64 / 1e6,
            best * 1e3,
            stream.len() as f64 / 1e6 / best
        );
    }
}
