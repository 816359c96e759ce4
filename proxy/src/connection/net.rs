//! The two things the proxy asks of the network: resolve a name, and open a TCP connection to an
//! address. [`SystemNetwork`] does both through tokio; tests substitute a [`Network`] that maps names
//! and addresses onto loopback servers, while the policy checks still see the addresses they would in
//! production.

use crate::connection::body::BoxFuture;
use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpStream;

pub trait Network: Send + Sync + 'static {
    /// Every address `host` resolves to (the port only serves the resolver's interface).
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
    /// A TCP connection to `addr`, which the proxy has already checked against the policy.
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The operating system's resolver and sockets.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemNetwork;

impl Network for SystemNetwork {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let mut out: Vec<IpAddr> = Vec::new();
            for addr in tokio::net::lookup_host((host, port)).await? {
                if !out.contains(&addr.ip()) {
                    out.push(addr.ip());
                }
            }
            Ok(out)
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(addr))
    }
}
