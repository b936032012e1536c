//! Certificate trust: the simulator's self-signed CA is trusted only through `CaPem`, the
//! system roots and a foreign CA reject it (a permanent, recognisable error), and no
//! verification happens only when `Insecure` is asked for.

use crate::common;

use pve::{ApiToken, Client, ClientConfig, ErrorKind, RetryPolicy, TlsTrust, retry_idempotent};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

fn client_for(env: &common::Env, tls: TlsTrust) -> Client {
    Client::new(ClientConfig::new(
        env.sim.endpoint(),
        ApiToken::parse(env.sim.token()).unwrap(),
        tls,
    ))
    .unwrap()
}

fn foreign_ca_pem() -> String {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap())
        .unwrap()
        .pem()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_configured_ca_or_an_explicit_insecure_is_accepted() {
    let env = common::start().await;

    for tls in [TlsTrust::SystemRoots, TlsTrust::CaPem(foreign_ca_pem())] {
        let client = client_for(&env, tls.clone());
        let e = client.version().await.unwrap_err();
        assert!(e.is_certificate_error(), "{tls:?}: {e}");
        assert_eq!(e.kind(), ErrorKind::Permanent, "{e}");
        assert!(matches!(e.origin(), pve::Origin::Transport { .. }));
        // Not retried: a retry cannot fix trust.
        let e = retry_idempotent(&RetryPolicy::default(), || client.version())
            .await
            .unwrap_err();
        assert!(e.is_certificate_error());
    }
    let before = env.admin.journal_count("GET", "/version").await;
    assert_eq!(before, 0, "no request got past the TLS handshake");

    let insecure = client_for(&env, TlsTrust::Insecure);
    assert_eq!(insecure.version().await.unwrap().major(), Some(9));
    let trusted = client_for(&env, TlsTrust::CaPem(env.sim.ca_pem().to_owned()));
    assert_eq!(trusted.version().await.unwrap().major(), Some(9));
    assert_eq!(env.admin.journal_count("GET", "/version").await, 2);
    env.shutdown().await;
}
