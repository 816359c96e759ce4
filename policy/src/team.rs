//! The team policy's trust rules (README "Team policy"): which copy of a signed team
//! policy a session may use. Pure: the caller fetches the copy from the server and reads the copy
//! kept on disk, and this module says which one holds, why the other does not, and whether the
//! kept copy must be replaced.
//!
//! - A copy is a policy file's exact bytes and its minisign signature (`URL.minisig`). Its
//!   signature is checked over those bytes with the team key, then the same bytes are decoded
//!   and parsed ([`crate::config::parse_team`]), so what was signed is what is read. Only
//!   prehashed signatures are accepted (minisign's default since 0.8; the legacy kind is refused).
//! - The serial is inside the signed bytes, so the kept copy's serial cannot be changed without
//!   the key, and the kept copy is checked like a fetched one every time it is used.
//! - A fetched copy older than the kept one is refused (a rollback), and so is one with the same
//!   serial but other bytes (a release must raise the serial). Either way the kept copy stays.
//! - A server that cannot be reached, or whose copy is refused, leaves the kept copy in use.
//! - With no copy that holds, nothing is used: the caller does not start the session.

use crate::config::{self, Config};
use minisign_verify::{PublicKey, Signature};

/// The largest team policy read. Policy files are a few KiB; this bounds what a server can make
/// fenzi hold in memory and parse.
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;
/// The largest signature file read (a minisign signature is about 300 bytes).
pub const MAX_SIGNATURE_BYTES: usize = 4096;

/// The team's minisign public key.
#[derive(Debug)]
pub struct TeamKey(PublicKey);

impl TeamKey {
    /// Reads a key file in minisign's format: an `untrusted comment:` line, then the base64 key.
    pub fn parse(text: &str) -> Result<TeamKey, String> {
        let mut lines = text.lines();
        let comment = lines.next().unwrap_or("");
        if !comment.starts_with("untrusted comment:") {
            return Err(
                "is not a minisign public key: its first line is not `untrusted comment: \
                 ...` (make one with `minisign -G`; the `.pub` file is the key)"
                    .into(),
            );
        }
        let key = lines.next().unwrap_or("").trim();
        PublicKey::from_base64(key).map(TeamKey).map_err(|e| {
            format!("is not a minisign public key: its second line is not an Ed25519 key ({e})")
        })
    }
}

/// A copy of the team policy that holds: its signature checks and its policy parses.
#[derive(Debug, Clone)]
pub struct Verified {
    pub serial: u64,
    pub config: Config,
    /// The exact bytes signed and parsed.
    pub policy: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Checks one copy: sizes, the signature over `policy` with `key`, then the policy itself
/// (errors name `url`, line and column). `Err` says what is wrong with the copy.
pub fn verify(
    key: &TeamKey,
    url: &str,
    policy: &[u8],
    signature: &[u8],
) -> Result<Verified, String> {
    if policy.len() > MAX_POLICY_BYTES {
        return Err(format!(
            "the policy is larger than {} KiB",
            MAX_POLICY_BYTES >> 10
        ));
    }
    if signature.len() > MAX_SIGNATURE_BYTES {
        return Err(format!(
            "the signature is larger than {MAX_SIGNATURE_BYTES} bytes"
        ));
    }
    let sig_text = std::str::from_utf8(signature)
        .map_err(|_| "the signature is not a minisign signature (not text)".to_string())?;
    let sig = Signature::decode(sig_text)
        .map_err(|e| format!("the signature is not a minisign signature ({e})"))?;
    key.0.verify(policy, &sig, false).map_err(|e| match e {
        minisign_verify::Error::UnexpectedKeyId => {
            "the signature was made with another key than the team key".to_string()
        }
        minisign_verify::Error::UnexpectedAlgorithm => {
            "the signature is a legacy minisign signature; sign with minisign 0.8 or later \
             (prehashed, the default)"
                .to_string()
        }
        _ => "the signature does not match the policy's bytes".to_string(),
    })?;
    let text = config::decode(policy, url).map_err(|e| e.to_string())?;
    let (config, serial) = config::parse_team(text, url).map_err(|e| e.to_string())?;
    Ok(Verified {
        serial,
        config,
        policy: policy.to_vec(),
        signature: signature.to_vec(),
    })
}

/// What asking the server gave.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// A copy: the policy's bytes and its signature's.
    Copy { policy: Vec<u8>, signature: Vec<u8> },
    /// No copy: the server could not be reached, timed out, answered other than 2xx, or sent
    /// more than the bounds. Why, for the person.
    Unreachable(String),
}

/// Where the copy in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Fetched,
    Kept,
}

/// The copy a session uses.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub copy: Verified,
    pub source: Source,
    /// True when the kept copy must be replaced by this one.
    pub store: bool,
    /// What the person is told (each a line, naming the serial in use when something went
    /// wrong).
    pub notes: Vec<String>,
}

/// A copy read from disk: the policy's bytes and its signature's, or why the file cannot be used.
pub type KeptCopy = Result<(Vec<u8>, Vec<u8>), String>;

/// Picks the copy to use from what the server gave and what is kept (`(policy, signature)`, or
/// why the kept file cannot be read). `Err` is why there is no copy to use: the session must not
/// start.
pub fn choose(
    key: &TeamKey,
    url: &str,
    fetched: Fetched,
    kept: Option<KeptCopy>,
) -> Result<Chosen, String> {
    let kept = kept.map(|k| k.and_then(|(p, s)| verify(key, url, &p, &s)));
    let fetched = match fetched {
        Fetched::Copy { policy, signature } => {
            verify(key, url, &policy, &signature).map_err(|why| format!("is refused: {why}"))
        }
        Fetched::Unreachable(why) => Err(format!("cannot be fetched: {why}")),
    };
    let mut notes = Vec::new();
    let kept = match kept {
        Some(Ok(k)) => Some(k),
        Some(Err(why)) => {
            notes.push(format!(
                "the kept copy of the team policy is refused and will not be used: {why}"
            ));
            None
        }
        None => None,
    };
    match (fetched, kept) {
        (Ok(f), Some(k)) if f.serial < k.serial => {
            notes.push(format!(
                "the server's team policy (serial {}) is older than the kept copy (serial {}) and \
                 is refused: a copy never goes back to an older serial; using serial {}",
                f.serial, k.serial, k.serial
            ));
            Ok(kept_copy(k, notes))
        }
        (Ok(f), Some(k)) if f.serial == k.serial && f.policy != k.policy => {
            notes.push(format!(
                "the server's team policy has the kept copy's serial ({}) but other bytes, and is \
                 refused: a changed policy must raise its serial; using the kept copy, serial {}",
                f.serial, k.serial
            ));
            Ok(kept_copy(k, notes))
        }
        (Ok(f), Some(k)) if f.serial == k.serial => Ok(Chosen {
            // The same copy: nothing to write.
            copy: k,
            source: Source::Fetched,
            store: false,
            notes,
        }),
        (Ok(f), _) => Ok(Chosen {
            copy: f,
            source: Source::Fetched,
            store: true,
            notes,
        }),
        (Err(why), Some(k)) => {
            notes.push(format!(
                "the server's team policy {why}; using the kept copy, serial {}",
                k.serial
            ));
            Ok(kept_copy(k, notes))
        }
        (Err(why), None) => {
            let mut message =
                format!("no good copy of the team policy {url}: the server's copy {why}");
            match notes.pop() {
                Some(kept) => message.push_str(&format!("; {kept}")),
                None => message.push_str("; no copy is kept from an earlier session"),
            }
            Err(message)
        }
    }
}

fn kept_copy(copy: Verified, notes: Vec<String>) -> Chosen {
    Chosen {
        copy,
        source: Source::Kept,
        store: false,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minisign::KeyPair;
    use std::io::Cursor;

    const URL: &str = "https://policy.example.com/fenzi.yaml";

    struct Signer {
        pair: KeyPair,
    }

    impl Signer {
        fn new() -> Signer {
            Signer {
                pair: KeyPair::generate_unencrypted_keypair().unwrap(),
            }
        }
        fn key(&self) -> TeamKey {
            let text = self.pair.pk.to_box().unwrap().to_string();
            TeamKey::parse(&text).unwrap()
        }
        fn sign(&self, bytes: &[u8]) -> Vec<u8> {
            minisign::sign(
                Some(&self.pair.pk),
                &self.pair.sk,
                Cursor::new(bytes),
                None,
                None,
            )
            .unwrap()
            .to_string()
            .into_bytes()
        }
        fn copy(&self, serial: u64, host: &str) -> (Vec<u8>, Vec<u8>) {
            let policy = format!("version: 1\nserial: {serial}\nhosts: [{host}]\n").into_bytes();
            let sig = self.sign(&policy);
            (policy, sig)
        }
    }

    fn fetched((policy, signature): (Vec<u8>, Vec<u8>)) -> Fetched {
        Fetched::Copy { policy, signature }
    }

    #[test]
    fn a_good_copy_verifies_and_carries_its_serial() {
        let s = Signer::new();
        let (p, sig) = s.copy(3, "github.com");
        let v = verify(&s.key(), URL, &p, &sig).unwrap();
        assert_eq!(v.serial, 3);
        assert_eq!(v.config.hosts.len(), 1);
        assert_eq!(v.config.hosts[0].at.file.as_ref(), URL);
    }

    #[test]
    fn a_signature_covers_the_exact_bytes() {
        let s = Signer::new();
        let (mut p, sig) = s.copy(3, "github.com");
        p.extend_from_slice(b"  - evil.example\n");
        let e = verify(&s.key(), URL, &p, &sig).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        // Even a change YAML would read the same way is refused.
        let (mut p, sig) = s.copy(3, "github.com");
        p.push(b'\n');
        assert!(verify(&s.key(), URL, &p, &sig).is_err());
    }

    #[test]
    fn another_key_a_garbled_or_missing_signature_is_refused() {
        let (s, other) = (Signer::new(), Signer::new());
        let (p, _) = s.copy(1, "github.com");
        let e = verify(&s.key(), URL, &p, &other.sign(&p)).unwrap_err();
        assert!(e.contains("another key"), "{e}");
        let e = verify(&s.key(), URL, &p, b"untrusted comment: x\nnot base64\n").unwrap_err();
        assert!(e.contains("not a minisign signature"), "{e}");
        assert!(verify(&s.key(), URL, &p, b"").is_err());
        assert!(verify(&s.key(), URL, &p, &vec![b'a'; MAX_SIGNATURE_BYTES + 1]).is_err());
    }

    #[test]
    fn a_policy_without_a_serial_or_invalid_is_refused_naming_the_url() {
        let s = Signer::new();
        for (text, want) in [
            ("version: 1\nhosts: [a.com]\n", "missing `serial`"),
            ("version: 1\nserial: 0\n", "`serial` must be positive"),
            ("version: 1\nserial: \"3\"\n", "expected a positive integer"),
            ("version: 1\nserial: 2\nhostz: []\n", "unknown key `hostz`"),
            (
                "version: 1\nserial: 2\nteam: {url: https://x/y, key: k}\n",
                "unknown key `team`",
            ),
        ] {
            let sig = s.sign(text.as_bytes());
            let e = verify(&s.key(), URL, text.as_bytes(), &sig).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.starts_with(&format!("{URL}:")), "{e}");
        }
    }

    #[test]
    fn key_files_are_minisign_public_keys() {
        let s = Signer::new();
        let text = s.pair.pk.to_box().unwrap().to_string();
        assert!(TeamKey::parse(&text).is_ok());
        let bare = text.lines().nth(1).unwrap();
        assert!(
            TeamKey::parse(bare)
                .unwrap_err()
                .contains("untrusted comment")
        );
        assert!(TeamKey::parse("untrusted comment: x\nAAAA\n").is_err());
    }

    #[test]
    fn a_newer_copy_replaces_the_kept_one() {
        let s = Signer::new();
        let c = choose(
            &s.key(),
            URL,
            fetched(s.copy(5, "b.com")),
            Some(Ok(s.copy(4, "a.com"))),
        )
        .unwrap();
        assert_eq!(
            (c.copy.serial, c.source, c.store),
            (5, Source::Fetched, true)
        );
        assert!(c.notes.is_empty());
        let c = choose(&s.key(), URL, fetched(s.copy(1, "b.com")), None).unwrap();
        assert_eq!((c.copy.serial, c.store), (1, true));
    }

    #[test]
    fn an_older_serial_is_a_rollback_and_keeps_the_kept_copy() {
        let s = Signer::new();
        let c = choose(
            &s.key(),
            URL,
            fetched(s.copy(3, "b.com")),
            Some(Ok(s.copy(4, "a.com"))),
        )
        .unwrap();
        assert_eq!((c.copy.serial, c.source, c.store), (4, Source::Kept, false));
        assert!(
            c.notes[0].contains("older") && c.notes[0].contains("using serial 4"),
            "{:?}",
            c.notes
        );
    }

    #[test]
    fn the_same_serial_with_other_bytes_is_refused() {
        let s = Signer::new();
        let c = choose(
            &s.key(),
            URL,
            fetched(s.copy(4, "b.com")),
            Some(Ok(s.copy(4, "a.com"))),
        )
        .unwrap();
        assert_eq!((c.source, c.store), (Source::Kept, false));
        assert_eq!(c.copy.config.hosts[0].value.to_string(), "a.com");
        assert!(
            c.notes[0].contains("must raise its serial"),
            "{:?}",
            c.notes
        );
        // The same bytes again: nothing to say, nothing to write.
        let same = s.copy(4, "a.com");
        let c = choose(&s.key(), URL, fetched(same.clone()), Some(Ok(same))).unwrap();
        assert_eq!((c.store, c.notes.len()), (false, 0));
    }

    #[test]
    fn a_bad_fetch_keeps_the_last_good_copy() {
        let s = Signer::new();
        let (p, _) = s.copy(9, "b.com");
        let forged = Fetched::Copy {
            policy: p,
            signature: Signer::new().sign(b"x"),
        };
        for f in [forged, Fetched::Unreachable("connection refused".into())] {
            let c = choose(&s.key(), URL, f, Some(Ok(s.copy(4, "a.com")))).unwrap();
            assert_eq!((c.copy.serial, c.source), (4, Source::Kept));
            assert!(
                c.notes[0].contains("using the kept copy, serial 4"),
                "{:?}",
                c.notes
            );
        }
    }

    #[test]
    fn no_good_copy_fails_closed() {
        let s = Signer::new();
        let e = choose(
            &s.key(),
            URL,
            Fetched::Unreachable("timed out".into()),
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("no good copy") && e.contains("timed out") && e.contains("no copy is kept"),
            "{e}"
        );
        // A tampered kept copy is no copy.
        let (mut p, sig) = s.copy(4, "a.com");
        p[0] = b'V';
        let e = choose(
            &s.key(),
            URL,
            Fetched::Unreachable("timed out".into()),
            Some(Ok((p.clone(), sig.clone()))),
        )
        .unwrap_err();
        assert!(e.contains("kept copy") && e.contains("refused"), "{e}");
        // A kept file that cannot be read is no copy either.
        let e = choose(
            &s.key(),
            URL,
            Fetched::Unreachable("timed out".into()),
            Some(Err("garbled".into())),
        )
        .unwrap_err();
        assert!(e.contains("garbled"), "{e}");
        // With a good fetch, the tampered copy is replaced.
        let c = choose(
            &s.key(),
            URL,
            fetched(s.copy(2, "b.com")),
            Some(Ok((p, sig))),
        )
        .unwrap();
        assert_eq!((c.copy.serial, c.store), (2, true));
        assert!(c.notes[0].contains("kept copy"), "{:?}", c.notes);
    }
}
