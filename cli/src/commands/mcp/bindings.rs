//! Every secret a policy binds, with the hosts it may be sent to: the agent's (top-level secrets
//! and `token: true` tokens, [`Policy::secrets`]) and each command server's own (its `secrets:` on
//! its `hosts:`, [`Policy::for_local_server`], DESIGN §18). `fenzi mcp token` stores a value for
//! these hosts and `fenzi mcp list` checks a stored value against them, so a command server's
//! secret is stored for its own hosts although the agent's policy never holds it.

use fenzi_policy::config::Config;
use fenzi_policy::engine::{Policy, SecretBinding};

/// One binding per secret name, in policy order. A variable two command servers read is one
/// binding with both servers' hosts: the value is stored once, for all of them.
pub fn all(config: &Config, policy: &Policy) -> Vec<SecretBinding> {
    let mut out: Vec<SecretBinding> = policy.secrets().to_vec();
    for server in policy.local_servers() {
        let Some(own) = Policy::for_local_server(config, &server.name, policy.limits()) else {
            continue;
        };
        for b in own.secrets() {
            match out.iter_mut().find(|o| o.name == b.name) {
                Some(o) => {
                    for h in &b.hosts {
                        if !o.hosts.contains(h) {
                            o.hosts.push(h.clone());
                        }
                    }
                    o.sources.extend(b.sources.iter().cloned());
                }
                None => out.push(b.clone()),
            }
        }
    }
    out
}
