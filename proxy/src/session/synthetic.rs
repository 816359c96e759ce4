//! The synthetic addresses the sandbox's DNS stub hands out: each name its own address from
//! 198.18.0.0/15 (the range RFC 2544 sets aside for benchmarks, never routed on the internet), so
//! that a connection to one says which name the program meant. The table only grows within a
//! session and is bounded by the range: once it is full, new names are refused (the stub answers
//! `REFUSED`), and names already handed out keep their address.

use fenzi_policy::host::Host;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

/// The synthetic range: 198.18.0.0/15.
pub const SYNTHETIC_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
pub const SYNTHETIC_PREFIX: u8 = 15;
/// The address the sandbox's loopback carries for the range itself (never handed out).
pub const SYNTHETIC_GATEWAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Offsets 0 (the network) and 1 (the loopback's own address) are never handed out.
const FIRST_OFFSET: u32 = 2;
const RANGE_SIZE: u32 = 1 << (32 - SYNTHETIC_PREFIX as u32);

/// Name ↔ synthetic address, for one session.
#[derive(Debug)]
pub struct SyntheticNames {
    table: Mutex<Table>,
    capacity: u32,
}

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<String, u32>,
    names: Vec<String>,
}

impl Default for SyntheticNames {
    fn default() -> Self {
        SyntheticNames::with_capacity(RANGE_SIZE - FIRST_OFFSET - 1)
    }
}

impl SyntheticNames {
    /// A table that hands out at most `capacity` addresses (tests use a small one).
    pub fn with_capacity(capacity: u32) -> SyntheticNames {
        SyntheticNames {
            table: Mutex::default(),
            capacity: capacity.min(RANGE_SIZE - FIRST_OFFSET - 1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The address for `name` (canonical: lower case, no trailing dot), given out now if it had
    /// none; `None` when the table is full.
    pub fn address_for(&self, name: &Host) -> Option<Ipv4Addr> {
        let Host::Name(name) = name else {
            return None;
        };
        let mut table = self.lock();
        if let Some(&index) = table.by_name.get(name) {
            return Some(address(index));
        }
        let index = table.names.len() as u32;
        if index >= self.capacity {
            return None;
        }
        table.names.push(name.clone());
        table.by_name.insert(name.clone(), index);
        Some(address(index))
    }

    /// The name an address was handed out for. `None` for an address outside the range or not
    /// handed out.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<String> {
        let offset = u32::from(addr).checked_sub(u32::from(SYNTHETIC_BASE))?;
        let index = offset.checked_sub(FIRST_OFFSET)?;
        self.lock().names.get(index as usize).cloned()
    }

    /// Whether `addr` lies in the synthetic range (handed out or not).
    pub fn is_synthetic(addr: Ipv4Addr) -> bool {
        u32::from(addr) >> (32 - SYNTHETIC_PREFIX as u32)
            == u32::from(SYNTHETIC_BASE) >> (32 - SYNTHETIC_PREFIX as u32)
    }
}

fn address(index: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(SYNTHETIC_BASE) + FIRST_OFFSET + index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn each_name_gets_its_own_stable_address_and_it_maps_back() {
        let names = SyntheticNames::default();
        let a = names.address_for(&name("mcp.example.com")).unwrap();
        let b = names.address_for(&name("other.example.com")).unwrap();
        assert_ne!(a, b);
        assert_eq!(names.address_for(&name("MCP.example.com.")), Some(a));
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(names.name_of(a).as_deref(), Some("mcp.example.com"));
        assert_eq!(names.name_of(b).as_deref(), Some("other.example.com"));
        assert_eq!(names.name_of(SYNTHETIC_GATEWAY), None);
        assert_eq!(
            names.name_of(Ipv4Addr::new(198, 18, 0, 9)),
            None,
            "not handed out"
        );
        assert_eq!(names.name_of(Ipv4Addr::new(10, 0, 0, 2)), None);
        assert!(SyntheticNames::is_synthetic(Ipv4Addr::new(
            198, 19, 255, 254
        )));
        assert!(!SyntheticNames::is_synthetic(Ipv4Addr::new(198, 20, 0, 1)));
        assert_eq!(
            names.address_for(&name("10.0.0.1")),
            None,
            "literals are not names"
        );
    }

    #[test]
    fn a_full_table_refuses_new_names_and_keeps_the_old_ones() {
        let names = SyntheticNames::with_capacity(2);
        let a = names.address_for(&name("a.test")).unwrap();
        names.address_for(&name("b.test")).unwrap();
        assert_eq!(names.address_for(&name("c.test")), None);
        assert_eq!(names.address_for(&name("a.test")), Some(a));
    }
}
