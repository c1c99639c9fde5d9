//! gRPC definitions shared by the switch agents (clients) and the analyzer service
//! (server): `proto/collector.proto`, compiled at build time without `protoc`.

#![allow(missing_docs, missing_debug_implementations, clippy::all)]

/// The `hawkmesh.v1` package.
pub mod v1 {
    tonic::include_proto!("hawkmesh.v1");
}

/// BF Runtime (`proto/bfruntime.proto`, package `bfrt_proto`): the subset of Intel's Tofino
/// control-plane API that the model-backed BF Runtime server serves.
pub mod bfrt_proto {
    tonic::include_proto!("bfrt_proto");
}

/// `google.rpc` (the `Status` BF Runtime's subscription reply carries).
pub mod google {
    /// `google.rpc`.
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}
