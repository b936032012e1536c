//! A per-start CA and a server certificate for loopback, like PVE's pve-root-ca + pve-ssl.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

pub struct Identity {
    pub ca_pem: String,
    ca_der: CertificateDer<'static>,
    leaf_der: CertificateDer<'static>,
    leaf_key: Vec<u8>,
}

fn io_error(err: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(err.to_string())
}

impl Identity {
    pub fn generate() -> std::io::Result<Identity> {
        let ca_key = KeyPair::generate().map_err(io_error)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io_error)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Proxmox Virtual Environment (pve-sim)");
        ca_params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, "pve-sim CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(io_error)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf_key = KeyPair::generate().map_err(io_error)?;
        let mut leaf_params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .map_err(io_error)?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf_cert = leaf_params
            .signed_by(&leaf_key, &issuer)
            .map_err(io_error)?;
        Ok(Identity {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().clone(),
            leaf_der: leaf_cert.der().clone(),
            leaf_key: leaf_key.serialize_der(),
        })
    }

    /// TLS acceptor offering HTTP/1.1 only (pveproxy speaks no HTTP/2).
    pub fn acceptor(&self) -> std::io::Result<TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io_error)?
            .with_no_client_auth()
            .with_single_cert(vec![self.leaf_der.clone(), self.ca_der.clone()], key)
            .map_err(io_error)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
