//! `gearbox cert`: a self-signed certificate for the edge.

use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `gearbox cert`.
#[derive(clap::Args)]
pub struct CertArgs {
    /// DNS names and IP addresses the certificate is for.
    #[arg(long = "name", value_delimiter = ',', default_values_t = ["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()])]
    pub names: Vec<String>,
    /// Where to write the certificate (PEM).
    #[arg(long, default_value = "cert.pem")]
    pub cert: PathBuf,
    /// Where to write the private key (PEM, PKCS#8).
    #[arg(long, default_value = "key.pem")]
    pub key: PathBuf,
}

/// Writes the pair and says where.
pub fn run(a: CertArgs) -> anyhow::Result<()> {
    gearbox_dataplane::tls::write_self_signed(&a.names, &a.cert, &a.key).context("gearbox cert")?;
    println!(
        "wrote {} and {} for {}",
        a.cert.display(),
        a.key.display(),
        a.names.join(", ")
    );
    Ok(())
}
