//! go-plugin's AutoMTLS, server side.
//!
//! Terraform sends its client certificate in `PLUGIN_CLIENT_CERT` and expects
//! our server certificate in the handshake line. We require the client to
//! present exactly that certificate. Terraform's certificate is ECDSA P-521
//! with `CA:TRUE`, which the stock webpki verifier refuses as an end entity,
//! so a pinned-certificate verifier checks identity by DER equality and the
//! handshake signature with aws-lc-rs (which verifies P-521).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// `PLUGIN_CLIENT_CERT` holds no PEM certificate.
    #[error("PLUGIN_CLIENT_CERT does not contain a PEM certificate: {0}")]
    ClientCert(String),
    /// Generating our certificate failed.
    #[error("cannot generate the server certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Our per-process server certificate and key.
pub(crate) struct ServerIdentity {
    pub(crate) cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl std::fmt::Debug for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key never appears in Debug output.
        f.debug_struct("ServerIdentity").finish_non_exhaustive()
    }
}

/// A fresh self-signed certificate for `localhost`, usable as its own root:
/// go-plugin's client trusts exactly the certificate in the handshake line.
/// P-256 is the cheapest curve Go accepts.
pub(crate) fn generate_server_identity() -> Result<ServerIdentity, TlsSetupError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName as Name, DnType,
        ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    let mut name = Name::new();
    name.push(DnType::CommonName, "localhost");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.self_signed(&key)?;
    Ok(ServerIdentity {
        cert: cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    })
}

/// The first certificate of a PEM text (what Terraform puts in `PLUGIN_CLIENT_CERT`).
pub(crate) fn parse_client_cert(pem: &str) -> Result<CertificateDer<'static>, TlsSetupError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| TlsSetupError::ClientCert("no CERTIFICATE block".to_owned()))?
        .map_err(|e| TlsSetupError::ClientCert(e.to_string()))
}

/// The rustls server configuration: our identity, ALPN `h2` (newer gRPC-Go
/// clients refuse TLS without it), TLS 1.2 and 1.3, and the pinned client
/// certificate required.
pub(crate) fn server_config(
    identity: &ServerIdentity,
    client_cert: CertificateDer<'static>,
) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = PinnedClientCert::new(client_cert, &provider);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(
            vec![identity.cert.clone()],
            PrivateKeyDer::Pkcs8(identity.key.clone_key()),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts exactly one client certificate, byte for byte.
#[derive(Debug)]
pub(crate) struct PinnedClientCert {
    expected: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedClientCert {
    /// A verifier pinning `expected`, checking signatures with `provider`'s algorithms.
    pub(crate) fn new(expected: CertificateDer<'static>, provider: &CryptoProvider) -> Self {
        PinnedClientCert {
            expected,
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for PinnedClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // Empty hints: Go compares hints byte for byte with its certificate's
    // issuer and silently sends nothing on a mismatch.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    // No chain building, dates or CA checks: the certificate is trusted
    // because it is exactly the one our parent process gave us.
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.expected.as_ref() {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    // Must include ECDSA P-521/SHA-512, or Go's client sends no certificate.
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_advertises_p521_and_pins_by_der() {
        let identity = generate_server_identity().unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let verifier = PinnedClientCert::new(identity.cert.clone(), &provider);
        assert!(
            verifier
                .supported_verify_schemes()
                .contains(&SignatureScheme::ECDSA_NISTP521_SHA512)
        );
        assert!(verifier.client_auth_mandatory());
        assert!(verifier.root_hint_subjects().is_empty());
        let now = UnixTime::now();
        assert!(
            verifier
                .verify_client_cert(&identity.cert, &[], now)
                .is_ok()
        );
        let other = generate_server_identity().unwrap();
        assert!(verifier.verify_client_cert(&other.cert, &[], now).is_err());
    }

    #[test]
    fn client_cert_pem_parses_and_garbage_does_not() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let parsed = parse_client_cert(&cert.pem()).unwrap();
        assert_eq!(parsed.as_ref(), cert.der().as_ref());
        assert!(parse_client_cert("not a certificate").is_err());
    }

    #[test]
    fn server_config_negotiates_h2() {
        let identity = generate_server_identity().unwrap();
        let config = server_config(&identity, identity.cert.clone()).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }
}
