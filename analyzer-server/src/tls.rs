//! Mutual TLS between agents and the analyzer, and a small PKI for a lab.
//!
//! Every agent ↔ analyzer channel is TLS 1.2/1.3 (rustls, through tonic) with client
//! certificates: the analyzer presents its certificate and accepts only clients whose
//! certificate chains to the fabric's CA. An agent is identified by its certificate's
//! common name, which is the node name of the fabric (`tor3`, `h12`; also its DNS
//! subject alternative name): a report is accepted only from the switch it names.
//! Plaintext is served only on a loopback address and only when asked for
//! (`TlsMode::PlaintextLoopback`).
//!
//! [`Pki`] makes a CA and issues certificates (ECDSA P-256, `rcgen`) for the analyzer and
//! for agents: enough for a lab; a production fabric uses its own CA, the analyzer reads
//! PEM files whoever issued them.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Why TLS could not be set up, or a peer not identified.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key is malformed, or could not be made.
    #[error("{what}: {reason}")]
    Pki {
        /// Which file or operation.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// Plaintext was asked for on an address other people can reach.
    #[error("plaintext gRPC is served only on a loopback address, not on {0}; give the analyzer a certificate (--tls-cert, --tls-key, --client-ca)")]
    PlaintextNotLoopback(SocketAddr),
    /// A client certificate names no node.
    #[error("the client certificate has no common name")]
    NoIdentity,
}

/// How the gRPC listener is secured.
#[derive(Clone, Debug)]
pub enum TlsMode {
    /// Mutual TLS: the analyzer's certificate and key, and the CA that issued the agents'.
    Mutual {
        /// The analyzer's certificate (PEM, with its chain).
        cert: PathBuf,
        /// Its private key (PEM).
        key: PathBuf,
        /// The CA that agents' certificates must chain to (PEM).
        client_ca: PathBuf,
    },
    /// Plaintext, loopback only (tests, the built-in demo, a lab on one machine); nobody is
    /// identified.
    PlaintextLoopback,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl TlsMode {
    /// The server's TLS configuration (`None` for plaintext), checked against the listen
    /// address.
    pub fn server_config(&self, addr: SocketAddr) -> Result<Option<ServerTlsConfig>, TlsError> {
        match self {
            TlsMode::PlaintextLoopback if addr.ip().is_loopback() => Ok(None),
            TlsMode::PlaintextLoopback => Err(TlsError::PlaintextNotLoopback(addr)),
            TlsMode::Mutual {
                cert,
                key,
                client_ca,
            } => {
                let identity = Identity::from_pem(read(cert)?, read(key)?);
                let ca = Certificate::from_pem(read(client_ca)?);
                Ok(Some(
                    ServerTlsConfig::new()
                        .identity(identity)
                        .client_ca_root(ca)
                        .client_auth_optional(false),
                ))
            }
        }
    }
}

/// An agent's TLS configuration: the CA the analyzer's certificate chains to, the agent's
/// own certificate and key, and the analyzer's name as its certificate gives it (the
/// agents' own function, `hawkmesh_proto::tls::client_config`).
pub fn client_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
    analyzer_name: &str,
) -> Result<ClientTlsConfig, TlsError> {
    hawkmesh_proto::tls::client_config(ca, cert, key, analyzer_name).map_err(|e| TlsError::Io {
        path: e.path,
        source: e.source,
    })
}

/// The node name a client certificate (DER) identifies: its subject's common name.
pub fn peer_identity(der: &[u8]) -> Result<String, TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| TlsError::Pki {
        what: "client certificate".into(),
        reason: e.to_string(),
    })?;
    let name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .ok_or(TlsError::NoIdentity)?;
    Ok(name.to_string())
}

/// A lab CA in a directory: `ca.pem` and `ca-key.pem`; certificates it issues are written
/// beside them as `<name>.pem` and `<name>-key.pem`.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
}

fn pki_error(what: &str) -> impl Fn(rcgen::Error) -> TlsError + '_ {
    move |e| TlsError::Pki {
        what: what.into(),
        reason: e.to_string(),
    }
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, text).map_err(io)?;
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok(())
}

impl Pki {
    /// Makes a CA named `name` in `dir` (created if needed); an existing CA is never
    /// overwritten.
    pub fn create(dir: &Path, name: &str) -> Result<Pki, TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        if pki.cert_path("ca").exists() {
            return Err(TlsError::Pki {
                what: pki.cert_path("ca").display().to_string(),
                reason: "a CA already exists here; it is not overwritten".into(),
            });
        }
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error("CA"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(pki_error("CA key"))?;
        let cert = params.self_signed(&key).map_err(pki_error("CA"))?;
        write(&pki.key_path("ca"), &key.serialize_pem(), true)?;
        write(&pki.cert_path("ca"), &cert.pem(), false)?;
        Ok(pki)
    }

    /// An existing CA in `dir`.
    pub fn open(dir: &Path) -> Result<Pki, TlsError> {
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        read(&pki.cert_path("ca"))?;
        read(&pki.key_path("ca"))?;
        Ok(pki)
    }

    /// `<dir>/<name>.pem`.
    pub fn cert_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// `<dir>/<name>-key.pem`.
    pub fn key_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-key.pem"))
    }

    /// Issues a certificate for `name`: an agent (client) certificate with `name` as its
    /// common name and DNS name, and, when `server_names` are given (DNS names or IP
    /// addresses), also a server certificate for them (the analyzer). Writes
    /// `<name>.pem` and `<name>-key.pem`.
    pub fn issue(&self, name: &str, server_names: &[String]) -> Result<(), TlsError> {
        if name.is_empty() || name == "ca" || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(TlsError::Pki {
                what: format!("name {name:?}"),
                reason: "must be a node name (not empty, not \"ca\", no path separators)".into(),
            });
        }
        let ca_key_pem = String::from_utf8_lossy(&read(&self.key_path("ca"))?).into_owned();
        let ca_pem = String::from_utf8_lossy(&read(&self.cert_path("ca"))?).into_owned();
        let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(pki_error("ca-key.pem"))?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(pki_error("ca.pem"))?;
        let mut names = vec![name.to_string()];
        names.extend(server_names.iter().cloned());
        let mut params = CertificateParams::new(names).map_err(pki_error(name))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if !server_names.is_empty() {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        let key = KeyPair::generate().map_err(pki_error("key"))?;
        let cert = params.signed_by(&key, &issuer).map_err(pki_error(name))?;
        write(&self.key_path(name), &key.serialize_pem(), true)?;
        write(&self.cert_path(name), &cert.pem(), false)?;
        Ok(())
    }
}

/// With mutual TLS (`identified`), `name` — the device a request speaks for — must be the
/// name on the client's certificate: an agent may only speak for itself.
pub fn check_identity<T>(
    request: &tonic::Request<T>,
    identified: bool,
    name: &str,
) -> Result<(), tonic::Status> {
    if !identified {
        return Ok(());
    }
    let certs = request
        .peer_certs()
        .ok_or_else(|| tonic::Status::unauthenticated("no client certificate"))?;
    let first = certs
        .first()
        .ok_or_else(|| tonic::Status::unauthenticated("no client certificate"))?;
    let identity =
        peer_identity(first).map_err(|e| tonic::Status::unauthenticated(e.to_string()))?;
    if identity != name {
        return Err(tonic::Status::permission_denied(format!(
            "the client certificate is {identity}'s; it may not speak for {name}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_ca_issues_certificates_that_name_their_node() {
        let dir = std::env::temp_dir().join(format!("hawkmesh-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let pki = Pki::create(&dir, "hawkmesh lab CA").unwrap();
        assert!(
            Pki::create(&dir, "again").is_err(),
            "a CA is never overwritten"
        );
        pki.issue("tor3", &[]).unwrap();
        pki.issue("analyzer", &["localhost".into(), "127.0.0.1".into()])
            .unwrap();
        let pem = std::fs::read_to_string(pki.cert_path("tor3")).unwrap();
        let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents;
        assert_eq!(peer_identity(&der).unwrap(), "tor3");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(pki.key_path("tor3"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "private keys are private");
        assert!(pki.issue("../x", &[]).is_err());
        assert!(peer_identity(b"not a certificate").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plaintext_is_served_only_on_loopback() {
        let mode = TlsMode::PlaintextLoopback;
        assert!(mode
            .server_config("127.0.0.1:50051".parse().unwrap())
            .unwrap()
            .is_none());
        let error = mode
            .server_config("0.0.0.0:50051".parse().unwrap())
            .unwrap_err();
        assert!(matches!(error, TlsError::PlaintextNotLoopback(_)));
    }
}
