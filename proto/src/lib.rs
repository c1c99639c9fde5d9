//! gRPC definitions shared by the agents (clients) and the analyzer service (server):
//! `proto/collector.proto` (switch agents' telemetry reports) and `proto/pingmesh.proto`
//! (host agents' registration, pinglists and probe results), compiled at build time
//! without `protoc`.

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

/// The agents' side of mutual TLS with the analyzer (the analyzer's side and the lab PKI
/// are in `hawkmesh-analyzer-server`'s `tls` module).
pub mod tls {
    use std::path::{Path, PathBuf};
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};

    /// A PEM file that could not be read.
    #[derive(Debug)]
    pub struct PemError {
        /// The file.
        pub path: PathBuf,
        /// The error.
        pub source: std::io::Error,
    }

    impl std::fmt::Display for PemError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.path.display(), self.source)
        }
    }

    impl std::error::Error for PemError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    fn read(path: &Path) -> Result<Vec<u8>, PemError> {
        std::fs::read(path).map_err(|source| PemError {
            path: path.to_path_buf(),
            source,
        })
    }

    /// An agent's TLS configuration: the CA the analyzer's certificate chains to, the
    /// agent's own certificate and key (PEM), and the analyzer's name as its certificate
    /// gives it.
    pub fn client_config(
        ca: &Path,
        cert: &Path,
        key: &Path,
        analyzer_name: &str,
    ) -> Result<ClientTlsConfig, PemError> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(ca)?))
            .identity(Identity::from_pem(read(cert)?, read(key)?))
            .domain_name(analyzer_name))
    }
}
