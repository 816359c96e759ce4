//! The messages the sandbox's init sends its parent over their `SOCK_SEQPACKET` pair: fixed-size
//! records, encoded without allocation so the child can send them.

/// Setup finished and the command was exec'd; the proxy listener is attached (`SCM_RIGHTS`).
pub(crate) const READY: u32 = 1;
/// A setup step failed: `(step code, errno)`.
pub(crate) const SETUP_FAILED: u32 = 2;
/// The command could not be started: `(action, errno)`.
pub(crate) const COMMAND_FAILED: u32 = 3;
/// The command ended: `(0, raw wait status)`.
pub(crate) const EXITED: u32 = 4;

/// A transparent listener, attached: `(index into the spec's ports, 0)`. Sent before `READY`.
pub(crate) const TRANSPARENT_LISTENER: u32 = 5;
/// The DNS stub's UDP socket, attached. Sent before `READY`.
pub(crate) const DNS_SOCKET: u32 = 6;
/// A `NETLINK_SOCK_DIAG` socket of the sandbox's network namespace, attached. Sent before `READY`.
pub(crate) const SOCK_DIAG: u32 = 7;

/// `COMMAND_FAILED` actions.
pub(crate) const ACTION_CHDIR: u32 = 1;
pub(crate) const ACTION_EXEC: u32 = 2;

pub(crate) const MESSAGE_LEN: usize = 12;

/// One record: a kind and two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub kind: u32,
    pub a: u32,
    pub b: i32,
}

impl Message {
    pub(crate) fn encode(self) -> [u8; MESSAGE_LEN] {
        let mut out = [0u8; MESSAGE_LEN];
        out[0..4].copy_from_slice(&self.kind.to_ne_bytes());
        out[4..8].copy_from_slice(&self.a.to_ne_bytes());
        out[8..12].copy_from_slice(&self.b.to_ne_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != MESSAGE_LEN {
            return None;
        }
        let word = |i: usize| [bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]];
        Some(Message {
            kind: u32::from_ne_bytes(word(0)),
            a: u32::from_ne_bytes(word(4)),
            b: i32::from_ne_bytes(word(8)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_wrong_lengths_are_rejected() {
        let m = Message {
            kind: EXITED,
            a: 0,
            b: -5,
        };
        assert_eq!(Message::decode(&m.encode()), Some(m));
        assert_eq!(Message::decode(&[0; 4]), None);
        assert_eq!(Message::decode(&[0; 13]), None);
    }
}
