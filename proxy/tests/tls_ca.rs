//! The session CA (SECURITY.md, "What fenzi guarantees"): its certificate's constraints, and what a verifying client (webpki,
//! as rustls uses it) accepts from it: leaves for the intercepted hosts, and nothing else.

mod common;

use common::provider;
use fenzi_policy::host::{Host, HostPattern};
use fenzi_proxy::SessionCa;
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;
use std::time::Duration;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

fn ca(patterns: &[&str]) -> SessionCa {
    let patterns: Vec<HostPattern> = patterns
        .iter()
        .map(|p| HostPattern::parse(p).unwrap())
        .collect();
    SessionCa::new(&patterns, Duration::from_secs(24 * 3600)).unwrap()
}

/// Whether a client trusting only `ca` accepts a leaf the CA minted for `leaf_host`, presented for
/// the same name.
fn accepted(ca: &SessionCa, leaf_host: &str) -> Result<(), rustls::Error> {
    let host = Host::parse(leaf_host).unwrap();
    let (leaf, _key) = ca.mint_leaf(&host).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().clone()).unwrap();
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .unwrap();
    let name = match host {
        Host::Ip(ip) => ServerName::IpAddress(ip.into()),
        Host::Name(n) => ServerName::try_from(n).unwrap(),
    };
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
        .map(|_| ())
}

fn describe(name: &GeneralName<'_>) -> String {
    match name {
        GeneralName::DNSName(d) => format!("dns:{d}"),
        GeneralName::IPAddress(bytes) => format!("ip:{}", hex::encode(bytes)),
        other => format!("{other:?}"),
    }
}

/// The permitted subtrees of a CA's name constraints, as `describe` shows them.
fn permitted_subtrees(nc: &x509_parser::extensions::NameConstraints<'_>) -> Vec<String> {
    nc.permitted_subtrees
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| describe(&s.base))
        .collect()
}

#[test]
fn ca_certificate_is_a_short_lived_path_length_zero_name_constrained_ca() {
    let ca = ca(&[
        "mcp.example.com",
        "*.example.org",
        "10.0.0.5:8443",
        "[2001:db8::5]",
    ]);
    let der: &CertificateDer<'_> = ca.cert_der();
    let (_, cert) = X509Certificate::from_der(der).unwrap();

    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(bc.critical);
    assert!(bc.value.ca);
    assert_eq!(bc.value.path_len_constraint, Some(0));

    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign());
    assert!(!ku.digital_signature());

    let nc = cert.name_constraints().unwrap().unwrap();
    assert!(nc.critical);
    let permitted = permitted_subtrees(nc.value);
    // Names only: Node's TLS stack refuses a CA with iPAddress constraints, so IP literals are not
    // constrained (SECURITY.md, "The session CA").
    assert_eq!(permitted, ["dns:mcp.example.com", "dns:.example.org"]);
    assert!(nc.value.excluded_subtrees.is_none());
    // A policy that intercepts only IP literals still constrains names: to `invalid` alone.
    let only_ips = self::ca(&["10.0.0.5:8443"]);
    let (_, cert) = X509Certificate::from_der(only_ips.cert_der()).unwrap();
    let nc = cert.name_constraints().unwrap().unwrap();
    assert_eq!(permitted_subtrees(nc.value), ["dns:invalid"]);

    let validity = cert.validity();
    let lifetime = validity.not_after.timestamp() - validity.not_before.timestamp();
    assert!(lifetime <= 24 * 3600 + 600, "{lifetime}");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(
        validity.not_before.timestamp() < now - 60,
        "backdated for clock skew"
    );

    assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(!ca.cert_pem().contains("PRIVATE KEY"));
    assert!(!format!("{ca:?}").contains("PRIVATE"));
}

#[test]
fn leaves_are_server_certificates_for_one_host_with_random_serials() {
    let ca = ca(&["mcp.example.com", "10.0.0.5:8443"]);
    let (first, _) = ca
        .mint_leaf(&Host::parse("mcp.example.com").unwrap())
        .unwrap();
    let (second, _) = ca
        .mint_leaf(&Host::parse("mcp.example.com").unwrap())
        .unwrap();
    let (_, leaf) = X509Certificate::from_der(&first).unwrap();
    let (_, other) = X509Certificate::from_der(&second).unwrap();
    assert_ne!(leaf.raw_serial(), other.raw_serial());
    assert!(leaf.raw_serial().len() >= 16);
    assert!(!leaf.is_ca());
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth && !eku.any);
    let san: Vec<String> = leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(describe)
        .collect();
    assert_eq!(san, ["dns:mcp.example.com"]);
    let (_, ca_cert) = X509Certificate::from_der(ca.cert_der()).unwrap();
    assert!(leaf.validity().not_after <= ca_cert.validity().not_after);
    assert!(leaf.validity().not_before >= ca_cert.validity().not_before);

    let (ip_leaf, _) = ca.mint_leaf(&Host::parse("10.0.0.5").unwrap()).unwrap();
    let (_, ip_leaf) = X509Certificate::from_der(&ip_leaf).unwrap();
    let san: Vec<String> = ip_leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(describe)
        .collect();
    assert_eq!(san, ["ip:0a000005"]);
}

#[test]
fn clients_accept_leaves_only_for_the_intercepted_hosts() {
    let ca = ca(&[
        "mcp.example.com",
        "*.example.org",
        "10.0.0.5:8443",
        "[2001:db8::5]",
    ]);
    for host in [
        "mcp.example.com",
        "a.example.org",
        "deep.a.example.org",
        "10.0.0.5",
        "2001:db8::5",
    ] {
        assert!(
            accepted(&ca, host).is_ok(),
            "{host}: {:?}",
            accepted(&ca, host)
        );
    }
    for host in [
        "evil.com",
        "example.com",
        "mcp.example.com.evil.com",
        "example.org", // `*.example.org` is strictly below it
        "notexample.org",
    ] {
        assert!(
            accepted(&ca, host).is_err(),
            "{host} must be outside the CA's name constraints"
        );
    }
    // IP literals are not constrained (Node refuses iPAddress constraints; SECURITY.md, "The
    // session CA"): the CA is only ever asked for leaves of the hosts fenzi intercepts.
    for host in ["10.0.0.6", "127.0.0.1", "2001:db8::6"] {
        assert!(accepted(&ca, host).is_ok(), "{host}");
    }
}

#[test]
fn a_ca_for_addresses_only_covers_no_name_and_addresses_are_not_constrained() {
    let names_only = ca(&["mcp.example.com"]);
    assert!(accepted(&names_only, "mcp.example.com").is_ok());
    assert!(accepted(&names_only, "other.example.com").is_err());
    // Not constrained: see SECURITY.md, "The session CA".
    assert!(accepted(&names_only, "127.0.0.1").is_ok());

    let ips_only = ca(&["127.0.0.1:8443"]);
    assert!(accepted(&ips_only, "127.0.0.1").is_ok());
    assert!(accepted(&ips_only, "mcp.example.com").is_err());
    assert!(accepted(&ips_only, "localhost").is_err());

    let nothing = ca(&[]);
    assert!(accepted(&nothing, "mcp.example.com").is_err());
}
