//! The per-session CA (SECURITY.md, "What fenzi guarantees") and the leaf certificates it mints.
//!
//! The CA is ECDSA P-256, valid for a short time (backdated a few minutes for clock skew), path length
//! 0, key usage keyCertSign/cRLSign, and NAME CONSTRAINTS that permit only the names the policy
//! intercepts: a name as a dNSName subtree (which RFC 5280 also lets cover names below it), `*.suffix`
//! as `.suffix` (names strictly below). When the policy intercepts no name, only `invalid` (RFC 6761)
//! is permitted. Its key lives only in this struct, in memory; only the certificate is ever written.
//!
//! IP addresses are not constrained: Node's TLS stack (Claude Code, every npm agent) rejects a CA
//! with iPAddress name constraints outright ("unsupported name constraint type"), for DNS-named
//! servers too. The CA only ever signs leaves for the hosts fenzi intercepts, its key never leaves
//! memory, and it lives for one session; the dNSName constraints stay as defence in depth
//! (SECURITY.md, "The session CA").
//!
//! Leaves are minted on first use per host and cached: random serial, SAN = the host (DNS or IP), EKU
//! serverAuth, the CA's validity, and a server config offering ALPN h2 and http/1.1.

use dashmap::DashMap;
use fenzi_policy::host::{Host, HostMatcher, HostPattern};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
    PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use time::OffsetDateTime;

/// Leaves cached at most; past this the cache starts over (a wildcard pattern admits many names).
const MAX_CACHED_LEAVES: usize = 4096;
/// How far the CA's validity starts in the past, for clients whose clock is a little behind.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    // The cause is in each message, not also a `source`, so a chain printer names it once.
    #[error("certificate generation failed: {0}")]
    Rcgen(rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Rustls(rustls::Error),
    #[error("{0}")]
    Unsupported(String),
}

impl From<rcgen::Error> for CaError {
    fn from(error: rcgen::Error) -> CaError {
        CaError::Rcgen(error)
    }
}

impl From<rustls::Error> for CaError {
    fn from(error: rustls::Error) -> CaError {
        CaError::Rustls(error)
    }
}

pub struct SessionCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    configs: DashMap<Host, Arc<ServerConfig>>,
}

impl fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("SessionCa")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("cached_leaves", &self.configs.len())
            .finish_non_exhaustive()
    }
}

impl SessionCa {
    /// A fresh CA whose name constraints permit exactly `patterns` (the policy's inspected hosts).
    pub fn new(patterns: &[HostPattern], validity: Duration) -> Result<SessionCa, CaError> {
        let now = OffsetDateTime::now_utc();
        let not_before = now - BACKDATE;
        let not_after = now + validity;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "fenzi");
        dn.push(DnType::CommonName, "fenzi session CA");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(name_constraints(patterns)?);
        params.serial_number = Some(random_serial()?);
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.self_signed(&key)?;
        Ok(SessionCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            not_before,
            not_after,
            configs: DashMap::new(),
        })
    }

    /// The CA certificate in PEM, as written to `ca.pem`.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The server config presenting a leaf for `host`, minted on first use.
    pub fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, CaError> {
        if let Some(config) = self.configs.get(host) {
            return Ok(config.clone());
        }
        let config = Arc::new(self.mint(host)?);
        if self.configs.len() >= MAX_CACHED_LEAVES {
            self.configs.clear();
        }
        // Two first uses at once both mint; the first stored wins and both use it.
        Ok(self.configs.entry(host.clone()).or_insert(config).clone())
    }

    /// A leaf certificate for `host` (DER) with its PKCS#8 key, signed by this CA.
    pub fn mint_leaf(
        &self,
        host: &Host,
    ) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), CaError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.subject_alt_names = vec![match host {
            Host::Name(name) => SanType::DnsName(name.as_str().try_into()?),
            Host::Ip(ip) => SanType::IpAddress(*ip),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((cert.der().clone(), key_der))
    }

    fn mint(&self, host: &Host) -> Result<ServerConfig, CaError> {
        let (leaf, key) = self.mint_leaf(host)?;
        let mut config = ServerConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf, self.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Our suite order (see `tls::provider`), not the client's: most clients list AES-256 first.
        config.ignore_client_order = true;
        Ok(config)
    }
}

/// The CA's name constraints for the intercepted `patterns`: dNSName subtrees only (see the module
/// documentation for why IP literals are not constrained).
pub fn name_constraints(patterns: &[HostPattern]) -> Result<NameConstraints, CaError> {
    let mut permitted: Vec<GeneralSubtree> = Vec::new();
    for pattern in patterns {
        let subtree = match &pattern.matcher {
            HostMatcher::Exact(Host::Name(name)) => {
                GeneralSubtree::DnsName(dns_constraint(name, false)?)
            }
            HostMatcher::Suffix(suffix) => GeneralSubtree::DnsName(dns_constraint(suffix, true)?),
            HostMatcher::Exact(Host::Ip(_)) => continue,
        };
        if !permitted.contains(&subtree) {
            permitted.push(subtree);
        }
    }
    if permitted.is_empty() {
        // A permitted list without a dNSName entry would leave names unconstrained.
        permitted.push(GeneralSubtree::DnsName("invalid".to_string()));
    }
    Ok(NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: Vec::new(),
    })
}

/// `name` (or `.name` for names strictly below it), refusing anything a constraint cannot carry.
fn dns_constraint(name: &str, below: bool) -> Result<String, CaError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(CaError::Unsupported(format!(
            "the host {name:?} cannot be expressed as a name constraint"
        )));
    }
    Ok(if below {
        format!(".{name}")
    } else {
        name.to_string()
    })
}

/// A positive random 127-bit serial number.
fn random_serial() -> Result<SerialNumber, CaError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| CaError::Unsupported(format!("no randomness for a serial: {e}")))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}
