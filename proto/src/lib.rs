//! gRPC definitions shared by the switch agents (clients) and the analyzer service
//! (server): `proto/collector.proto`, compiled at build time without `protoc`.

#![allow(missing_docs, missing_debug_implementations, clippy::all)]

/// The `hawkmesh.v1` package.
pub mod v1 {
    tonic::include_proto!("hawkmesh.v1");
}
