//! A sandbox's transparent path as `fenzi run` sets it up (the agent's, and each local server's
//! under its own egress policy): which ports fenzi listens on inside
//! (443 and 80 always, and every port the policy names; on IPv6 too when the policy names an IPv6
//! literal), which addresses the sandbox's loopback carries (the synthetic range the DNS stub
//! answers from, and each IP literal the policy names),
//! and the `resolv.conf` that points programs at the stub.

use crate::session;
use anyhow::Result;
use fenzi_policy::engine::Policy;
use fenzi_proxy::host_files::HostDir;
use fenzi_proxy::sandbox::{DEFAULT_PROXY_PORT, TransparentSpec};
use fenzi_proxy::session::synthetic::{SYNTHETIC_GATEWAY, SYNTHETIC_PREFIX};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

/// Where the DNS stub listens inside the sandbox.
const DNS_STUB: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53);

/// The transparent path for `policy`; writes `resolv_name` (a `resolv.conf`) into `session_dir`.
pub fn spec(policy: &Policy, session_dir: &HostDir, resolv_name: &str) -> Result<TransparentSpec> {
    let mut ports = BTreeSet::from([80u16, 443]);
    let (mut literals, mut literals_v6, mut ipv6) = (BTreeSet::new(), BTreeSet::new(), false);
    for pattern in policy.destination_patterns() {
        ports.insert(pattern.port);
        match pattern.exact_ip() {
            Some(IpAddr::V4(ip)) if !ip.is_loopback() => {
                literals.insert(ip);
            }
            Some(IpAddr::V6(ip)) => {
                ipv6 = true;
                if !ip.is_loopback() {
                    literals_v6.insert(ip);
                }
            }
            _ => {}
        }
    }
    // The proxy's own listener has that port on the loopback already.
    ports.remove(&DEFAULT_PROXY_PORT);
    let mut addresses = vec![(SYNTHETIC_GATEWAY, SYNTHETIC_PREFIX)];
    addresses.extend(literals.into_iter().map(|ip| (ip, 32)));
    let resolv_conf = session::write_file(
        session_dir,
        resolv_name,
        format!(
            "# fenzi run: names resolve through the sandbox's DNS stub\nnameserver {}\n",
            DNS_STUB.ip()
        )
        .as_bytes(),
    )?;
    Ok(TransparentSpec {
        ports: ports.into_iter().collect(),
        addresses,
        addresses_v6: literals_v6.into_iter().collect(),
        ipv6,
        dns: DNS_STUB,
        resolv_conf,
    })
}
