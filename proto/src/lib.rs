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

/// The devices' side of `hawkmesh.v1.TuningController` (`proto/tuning.proto`).
pub mod tuning {
    /// Now on the Unix clock, ns: every device numbers the monitor intervals it reports as
    /// this time over λ_MI, so one number means the same interval on every ToR and host (their
    /// clocks kept by PTP or NTP). A clock before 1970 reads 0.
    pub fn unix_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
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

    /// The scheme and host of `scheme://host:port/...` (an IPv6 host without its
    /// brackets).
    pub fn endpoint_host(endpoint: &str) -> Result<(&str, &str), String> {
        let (scheme, rest) = endpoint
            .split_once("://")
            .ok_or_else(|| format!("`{endpoint}` is not a URL (https://host:port)"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
        };
        if host.is_empty() {
            return Err(format!("`{endpoint}` has no host"));
        }
        Ok((scheme, host))
    }

    /// The agents' rule for the analyzer they dial (the `[analyzer]` section of their
    /// configuration): https with mutual TLS (`tls_complete`: `ca`, `cert` and `key` all
    /// given), plaintext only to an analyzer on loopback. The error names the key.
    pub fn check_analyzer_endpoint(endpoint: &str, tls_complete: bool) -> Result<(), String> {
        let (scheme, host) =
            endpoint_host(endpoint).map_err(|e| format!("analyzer.endpoint: {e}"))?;
        match scheme {
            "https" if !tls_complete => Err(
                "analyzer: an https endpoint needs `ca`, `cert` and `key` (mutual TLS)".into(),
            ),
            "http" if !is_loopback(host) => Err(format!(
                "analyzer.endpoint: plaintext is for a loopback analyzer only, not `{host}`; use https with `ca`, `cert` and `key`"
            )),
            "http" | "https" => Ok(()),
            other => Err(format!(
                "analyzer.endpoint: scheme `{other}`, expected https (or http on loopback)"
            )),
        }
    }

    fn is_loopback(host: &str) -> bool {
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    #[cfg(test)]
    mod tests {
        use super::{check_analyzer_endpoint, endpoint_host};

        #[test]
        fn analyzer_endpoints_take_mutual_tls_off_loopback() {
            assert_eq!(
                endpoint_host("https://[fd00::1]:50051/x"),
                Ok(("https", "fd00::1"))
            );
            assert_eq!(
                endpoint_host("http://analyzer:50051"),
                Ok(("http", "analyzer"))
            );
            assert!(check_analyzer_endpoint("http://127.0.0.1:50051", false).is_ok());
            assert!(check_analyzer_endpoint("http://[::1]:50051", false).is_ok());
            assert!(check_analyzer_endpoint("https://analyzer:50051", true).is_ok());
            for (bad, tls, says) in [
                ("analyzer:50051", true, "is not a URL"),
                ("https://:50051", true, "has no host"),
                (
                    "https://analyzer:50051",
                    false,
                    "needs `ca`, `cert` and `key`",
                ),
                (
                    "http://10.0.0.9:50051",
                    true,
                    "loopback analyzer only, not `10.0.0.9`",
                ),
                ("ftp://127.0.0.1:50051", true, "scheme `ftp`"),
            ] {
                let e = check_analyzer_endpoint(bad, tls).expect_err(bad);
                assert!(e.contains(says), "{bad}: {e}");
            }
        }
    }
}
