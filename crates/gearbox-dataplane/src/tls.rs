//! TLS 1.3 configuration for both ends, and self-signed certificates (`gearbox cert`).
//!
//! One rustls provider (ring) for TCP and QUIC alike. Only TLS 1.3 is offered:
//! QUIC requires it (RFC 9001 §4.2) and using it on TCP too keeps the handshake
//! round trips of the two transports comparable (1-RTT each, WiseTrans §II-A).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// ALPN ids offered on TCP, best first.
pub const ALPN_TCP: [&[u8]; 2] = [b"h2", b"http/1.1"];
/// ALPN id offered on QUIC.
pub const ALPN_H3: &[u8] = b"h3";

/// Errors loading or making certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {kind} file {path}: {source}")]
    Read {
        /// "certificate" or "key".
        kind: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file held no usable PEM item of the expected kind.
    #[error("{path}: no {kind} found in PEM (expected a '-----BEGIN {expected}' block)")]
    Empty {
        /// "certificate" or "private key".
        kind: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM label we look for.
        expected: &'static str,
    },
    /// rustls refused the pair (e.g. key does not match the certificate).
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
    /// Certificate generation failed (e.g. an invalid DNS name).
    #[error("cannot make certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Writing the generated files failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads every certificate in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let data = std::fs::read(path).map_err(|source| TlsError::Read {
        kind: "certificate",
        path: path.into(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&data).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Empty {
            kind: "certificate",
            path: path.into(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// Loads the first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let data = std::fs::read(path).map_err(|source| TlsError::Read {
        kind: "key",
        path: path.into(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|_| TlsError::Empty {
        kind: "private key",
        path: path.into(),
        expected: "PRIVATE KEY",
    })
}

/// A self-signed certificate and its key, both PEM.
pub struct SelfSigned {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key (PKCS#8), PEM.
    pub key_pem: String,
}

/// Makes a self-signed certificate for `names` (DNS names or IP addresses).
pub fn self_signed(names: &[String]) -> Result<SelfSigned, TlsError> {
    let ck = rcgen::generate_simple_self_signed(names.to_vec())?;
    Ok(SelfSigned {
        cert_pem: ck.cert.pem(),
        key_pem: ck.signing_key.serialize_pem(),
    })
}

/// Makes a self-signed pair and writes it to `cert` and `key`.
pub fn write_self_signed(names: &[String], cert: &Path, key: &Path) -> Result<(), TlsError> {
    let pair = self_signed(names)?;
    for (path, text) in [(cert, &pair.cert_pem), (key, &pair.key_pem)] {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
                path: path.into(),
                source,
            })?;
        }
        std::fs::write(path, text).map_err(|source| TlsError::Write {
            path: path.into(),
            source,
        })?;
    }
    Ok(())
}

/// Server TLS config (TLS 1.3 only) with the given ALPN ids.
pub fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    cfg.max_early_data_size = 0;
    Ok(cfg)
}

/// Which server certificates the client trusts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// Certificates (or CAs) from PEM files; a self-signed edge certificate works as its own root.
    Roots(Vec<PathBuf>),
    /// Accept any certificate. For lab runs against throwaway certificates only.
    #[default]
    InsecureAny,
}

/// Client TLS config (TLS 1.3 only) with the given ALPN ids.
pub fn client_config(trust: &Trust, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
    let builder =
        rustls::ClientConfig::builder_with_provider(provider()).with_protocol_versions(&[&rustls::version::TLS13])?;
    let mut cfg = match trust {
        Trust::Roots(files) => {
            let mut roots = rustls::RootCertStore::empty();
            for f in files {
                for c in load_certs(f)? {
                    roots.add(c)?;
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::InsecureAny => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
            .with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Ok(cfg)
}

/// Verifier that accepts any server certificate but still checks the handshake
/// signatures, so the TLS work done is the same as with real verification.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
