//! The session's secrets: each real value, checked when it is loaded, and the random placeholder the
//! sandbox holds instead. Also the two ways values come in from outside the credential store
//! (`FENZI_SECRET_<NAME>` in the proxy's environment) and the one way placeholders go out
//! (`placeholders.env`, mode 0600).
//!
//! A placeholder is [`PREFIX`] followed by 43 characters of base64url (256 random bits from the
//! operating system), so it is made only of `[A-Za-z0-9_-]` and survives headers, URLs and JSON
//! unescaped. The prefix makes a placeholder recognisable to people and makes an accidental
//! collision with other text impossible in practice, but nothing is matched by prefix: the proxy
//! looks only for the exact tokens minted in this session. Text that merely looks like a
//! placeholder (the prefix and any other characters) passes untouched.
//!
//! Values are [`SecretValue`]s, the credential store's own type, checked by the same rules wherever
//! they come from, and held in memory that is zeroed when dropped. No type here prints a value or a
//! placeholder: `Debug` shows secret names only, and there is no `Display`.

use super::SecretsError;
pub use crate::credstore::SecretValue;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use fenzi_policy::secret_name::is_valid_secret_name;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::Path;
use zeroize::Zeroizing;

/// The fixed start of every placeholder.
pub const PREFIX: &str = "fenzi_ph_";
/// Random bytes per placeholder (256 bits).
const RANDOM_BYTES: usize = 32;
/// Characters after the prefix in a minted placeholder (base64url of 32 random bytes, no padding).
pub const RANDOM_CHARS: usize = 43;
/// The length of every minted placeholder.
pub const PLACEHOLDER_LEN: usize = PREFIX.len() + RANDOM_CHARS;
/// The shortest random part a placeholder given to [`SecretSet::insert_with_placeholder`] may have.
pub const MIN_RANDOM_CHARS: usize = 32;
/// The shortest value accepted (see [`crate::credstore::MIN_SECRET_BYTES`]).
pub const MIN_VALUE_LEN: usize = crate::credstore::MIN_SECRET_BYTES;
/// The environment prefix for headless use: `FENZI_SECRET_<NAME>`.
pub const ENV_PREFIX: &str = "FENZI_SECRET_";

/// True for the bytes a placeholder is made of: `[A-Za-z0-9_-]`.
pub fn is_placeholder_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A minted placeholder. Its text is reachable only through [`Placeholder::as_str`].
#[derive(Clone, PartialEq, Eq)]
pub struct Placeholder(String);

impl Placeholder {
    fn mint() -> Result<Placeholder, SecretsError> {
        let mut bytes = Zeroizing::new([0u8; RANDOM_BYTES]);
        getrandom::fill(bytes.as_mut()).map_err(|e| SecretsError::Random(e.to_string()))?;
        Ok(Placeholder(format!(
            "{PREFIX}{}",
            URL_SAFE_NO_PAD.encode(bytes.as_ref())
        )))
    }

    /// A well-formed placeholder: the prefix and at least [`MIN_RANDOM_CHARS`] placeholder bytes.
    fn is_well_formed(text: &str) -> bool {
        text.strip_prefix(PREFIX).is_some_and(|rest| {
            rest.len() >= MIN_RANDOM_CHARS && rest.bytes().all(is_placeholder_byte)
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Placeholder(..)")
    }
}

#[derive(Clone)]
struct Entry {
    placeholder: Placeholder,
    value: SecretValue,
}

/// The session's secrets: name → (placeholder, value), ordered by name.
#[derive(Default)]
pub struct SecretSet {
    entries: BTreeMap<String, Entry>,
}

impl SecretSet {
    pub fn new() -> SecretSet {
        SecretSet::default()
    }

    /// Checks every value and mints a fresh placeholder for each.
    pub fn mint<I>(values: I) -> Result<SecretSet, SecretsError>
    where
        I: IntoIterator<Item = (String, Vec<u8>)>,
    {
        let mut set = SecretSet::new();
        for (name, value) in values {
            set.insert(&name, value)?;
        }
        Ok(set)
    }

    /// Adds secret `name` with a freshly minted placeholder; `value` is checked as a
    /// [`SecretValue`].
    pub fn insert(&mut self, name: &str, value: Vec<u8>) -> Result<(), SecretsError> {
        self.check_name(name)?;
        let value = SecretValue::from_bytes(name, value)?;
        self.insert_value(name, value)
    }

    /// Adds secret `name`, whose value is already checked (read from the credential store), with a
    /// freshly minted placeholder.
    pub fn insert_value(&mut self, name: &str, value: SecretValue) -> Result<(), SecretsError> {
        self.check_name(name)?;
        let placeholder = loop {
            let p = Placeholder::mint()?;
            // 2^-256; checked anyway so two secrets can never share a placeholder.
            if !self.entries.values().any(|e| e.placeholder == p) {
                break p;
            }
        };
        self.entries
            .insert(name.to_string(), Entry { placeholder, value });
        Ok(())
    }

    /// Adds secret `name` with a placeholder chosen by the caller, for tests and fuzzing that need
    /// a known token. A session must use [`SecretSet::insert`]: only minted placeholders are
    /// unguessable.
    #[doc(hidden)]
    pub fn insert_with_placeholder(
        &mut self,
        name: &str,
        placeholder: &str,
        value: Vec<u8>,
    ) -> Result<(), SecretsError> {
        self.check_name(name)?;
        let value = SecretValue::from_bytes(name, value)?;
        if !Placeholder::is_well_formed(placeholder)
            || self
                .entries
                .values()
                .any(|e| e.placeholder.as_str() == placeholder)
        {
            return Err(SecretsError::BadPlaceholder {
                name: name.to_string(),
            });
        }
        self.entries.insert(
            name.to_string(),
            Entry {
                placeholder: Placeholder(placeholder.to_string()),
                value,
            },
        );
        Ok(())
    }

    /// This set with `name`'s value replaced by `value`, its placeholder kept (a value fenzi keeps
    /// current, such as an OAuth access token). `None` when the set has no `name`.
    pub fn with_value(&self, name: &str, value: SecretValue) -> Option<SecretSet> {
        let mut entries = self.entries.clone();
        entries.get_mut(name)?.value = value;
        Some(SecretSet { entries })
    }

    fn check_name(&self, name: &str) -> Result<(), SecretsError> {
        if !is_valid_secret_name(name) {
            return Err(SecretsError::BadName(name.chars().take(200).collect()));
        }
        if self.entries.contains_key(name) {
            return Err(SecretsError::Duplicate(name.to_string()));
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The secret names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn placeholder(&self, name: &str) -> Option<&Placeholder> {
        self.entries.get(name).map(|e| &e.placeholder)
    }

    pub fn value(&self, name: &str) -> Option<&SecretValue> {
        self.entries.get(name).map(|e| &e.value)
    }

    /// Every secret as (name, placeholder, value), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Placeholder, &SecretValue)> {
        self.entries
            .iter()
            .map(|(n, e)| (n.as_str(), &e.placeholder, &e.value))
    }

    /// The text of `placeholders.env`: one `NAME=placeholder` line per secret, in name order.
    /// (Names are checked `[A-Z_][A-Z0-9_]*` and placeholders `[A-Za-z0-9_-]`: nothing to quote.)
    pub fn env_file_text(&self) -> String {
        let mut out = String::new();
        for (name, e) in &self.entries {
            out.push_str(name);
            out.push('=');
            out.push_str(e.placeholder.as_str());
            out.push('\n');
        }
        out
    }

    /// Writes `placeholders.env` at `path`, mode 0600. The file is written beside `path` under a
    /// temporary name and renamed over it, so a reader never sees half a file and a symlink at
    /// `path` is replaced rather than followed.
    pub fn write_env_file(&self, path: &Path) -> Result<(), SecretsError> {
        let fail = |error| SecretsError::Write {
            path: path.to_path_buf(),
            error,
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| fail(std::io::Error::other("the path has no file name")))?;
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| SecretsError::Random(e.to_string()))?;
        let mut tmp_name = OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(".{}.tmp", hex::encode(suffix)));
        let tmp = dir.join(tmp_name);

        let written = (|| -> std::io::Result<()> {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(&tmp)?;
            file.write_all(self.env_file_text().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        Ok(())
    }
}

impl fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSet")
            .field("names", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The values of `names` found as `FENZI_SECRET_<NAME>` in `env` (pass `std::env::vars_os()`), as
/// bytes, ready for [`SecretSet::mint`]. Names without a variable are left out; the caller decides
/// whether a missing secret is an error. Values are not checked here: [`SecretSet`] checks them.
pub fn values_from_env<'n, N, E>(names: N, env: E) -> BTreeMap<String, Vec<u8>>
where
    N: IntoIterator<Item = &'n str>,
    E: IntoIterator<Item = (OsString, OsString)>,
{
    let wanted: Vec<&str> = names.into_iter().collect();
    let mut out = BTreeMap::new();
    for (key, value) in env {
        let Some(name) = key.to_str().and_then(|k| k.strip_prefix(ENV_PREFIX)) else {
            continue;
        };
        if wanted.contains(&name) {
            out.insert(name.to_string(), os_bytes(value));
        }
    }
    out
}

#[cfg(unix)]
fn os_bytes(value: OsString) -> Vec<u8> {
    use std::os::unix::ffi::OsStringExt;
    value.into_vec()
}

#[cfg(not(unix))]
fn os_bytes(value: OsString) -> Vec<u8> {
    // Outside Unix an OsString is not bytes; a value that is not Unicode keeps its replacement
    // characters and then fails to authenticate upstream, which is visible and safe.
    value.to_string_lossy().into_owned().into_bytes()
}

/// Every `fenzi_ph_` followed by base64url characters, as `[placeholder]`: for showing text that
/// may hold any session's placeholders (a held call's arguments) to a person.
pub fn mask_placeholder_like(text: &str) -> String {
    const PREFIX: &str = "fenzi_ph_";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        let len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
            .count();
        out.push_str("[placeholder]");
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &[u8] = b"sk-live-0123456789";

    #[test]
    fn minted_placeholders_have_the_documented_shape_and_differ() {
        let mut set = SecretSet::new();
        set.insert("A_KEY", VALUE.to_vec()).unwrap();
        set.insert("B_KEY", VALUE.to_vec()).unwrap();
        let a = set.placeholder("A_KEY").unwrap().as_str().to_string();
        let b = set.placeholder("B_KEY").unwrap().as_str().to_string();
        for p in [&a, &b] {
            assert_eq!(p.len(), PLACEHOLDER_LEN);
            assert!(p.starts_with(PREFIX));
            assert!(p.bytes().all(is_placeholder_byte));
            assert!(Placeholder::is_well_formed(p));
        }
        assert_ne!(a, b);
        // A second session mints different placeholders for the same secret.
        let again = SecretSet::mint([("A_KEY".to_string(), VALUE.to_vec())]).unwrap();
        assert_ne!(again.placeholder("A_KEY").unwrap().as_str(), a);
    }

    #[test]
    fn values_with_cr_lf_nul_or_controls_are_refused_naming_the_secret_only() {
        for (bad, what) in [
            (&b"abc\rdefghij"[..], "CR"),
            (b"abcdefgh\nij", "LF"),
            (b"abcd\0efghij", "NUL"),
            (b"abcd\x1befghij", "control"),
            (b"abcd\x7fefghij", "control"),
        ] {
            let err = SecretSet::mint([("MY_TOKEN".to_string(), bad.to_vec())]).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("MY_TOKEN"), "{text}");
            assert!(text.contains(what), "{text}");
            assert!(!text.contains("abc"), "the message leaks the value: {text}");
            assert!(!format!("{err:?}").contains("abc"));
        }
        // TAB and non-ASCII text are fine; bytes that are not UTF-8 are not.
        SecretSet::mint([("T".to_string(), "ab\tcd\u{e9}efgh".as_bytes().to_vec())]).unwrap();
        let err = SecretSet::mint([("T".to_string(), b"ab\tcd\xffefgh".to_vec())]).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn short_values_bad_names_and_duplicates_are_refused() {
        let err = SecretSet::mint([("K".to_string(), b"1234567".to_vec())]).unwrap_err();
        assert!(
            matches!(err, SecretsError::InvalidValue(ref v) if v.problem.contains("shorter than 8")),
            "{err}"
        );
        assert!(!err.to_string().contains("1234567"));
        SecretSet::mint([("K".to_string(), b"12345678".to_vec())]).unwrap();
        let err = SecretSet::mint([("lower".to_string(), VALUE.to_vec())]).unwrap_err();
        assert!(matches!(err, SecretsError::BadName(_)));
        let err = SecretSet::mint([("A=B".to_string(), VALUE.to_vec())]).unwrap_err();
        assert!(matches!(err, SecretsError::BadName(_)));
        let mut set = SecretSet::new();
        set.insert("K", VALUE.to_vec()).unwrap();
        assert!(matches!(
            set.insert("K", VALUE.to_vec()),
            Err(SecretsError::Duplicate(_))
        ));
    }

    #[test]
    fn chosen_placeholders_must_be_well_formed_and_distinct() {
        let mut set = SecretSet::new();
        let good = format!("{PREFIX}{}", "a".repeat(32));
        set.insert_with_placeholder("A", &good, VALUE.to_vec())
            .unwrap();
        for bad in [
            format!("{PREFIX}{}", "a".repeat(31)),
            format!("x{}", "a".repeat(40)),
            format!("{PREFIX}{}!", "a".repeat(32)),
            good.clone(),
        ] {
            assert!(matches!(
                set.insert_with_placeholder("B", &bad, VALUE.to_vec()),
                Err(SecretsError::BadPlaceholder { .. })
            ));
        }
    }

    #[test]
    fn debug_shows_names_only() {
        let set = SecretSet::mint([("MY_TOKEN".to_string(), VALUE.to_vec())]).unwrap();
        let placeholder = set.placeholder("MY_TOKEN").unwrap().as_str().to_string();
        let value = set.value("MY_TOKEN").unwrap();
        for text in [
            format!("{set:?}"),
            format!("{set:#?}"),
            format!("{value:?}"),
            format!("{:?}", set.placeholder("MY_TOKEN").unwrap()),
        ] {
            assert!(!text.contains("sk-live"), "{text}");
            assert!(!text.contains(&placeholder), "{text}");
            assert!(!text.contains(&placeholder[PREFIX.len()..]), "{text}");
        }
        assert!(format!("{set:?}").contains("MY_TOKEN"));
    }

    #[test]
    fn env_values_are_picked_by_name_and_prefix() {
        let env = [
            ("FENZI_SECRET_A_KEY", "value-of-a-key"),
            ("FENZI_SECRET_UNLISTED", "ignored-value"),
            ("A_KEY", "not-prefixed"),
            ("fenzi_secret_B_KEY", "wrong-case-prefix"),
            ("FENZI_SECRET_B_KEY", "value-of-b-key"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got = values_from_env(["A_KEY", "B_KEY", "C_KEY"], env);
        assert_eq!(got.len(), 2);
        assert_eq!(got["A_KEY"], b"value-of-a-key");
        assert_eq!(got["B_KEY"], b"value-of-b-key");
        // The values then go through the same checks as any other.
        let env = [(
            OsString::from("FENZI_SECRET_X"),
            OsString::from("a\rbcdefghi"),
        )];
        let err = SecretSet::mint(values_from_env(["X"], env)).unwrap_err();
        assert!(matches!(err, SecretsError::InvalidValue(_)));
    }

    #[cfg(unix)]
    #[test]
    fn env_values_are_read_as_bytes_then_checked_as_text() {
        use std::os::unix::ffi::OsStringExt;
        let env = [(
            OsString::from("FENZI_SECRET_X"),
            OsString::from_vec(b"\xff\xfe-binary-value".to_vec()),
        )];
        let got = values_from_env(["X"], env);
        assert_eq!(got["X"], b"\xff\xfe-binary-value");
        let err = SecretSet::mint(got).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn env_file_is_name_equals_placeholder_mode_0600_and_replaces_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let set = SecretSet::mint([
            ("B_KEY".to_string(), b"value-bbbbbbbb".to_vec()),
            ("A_KEY".to_string(), b"value-aaaaaaaa".to_vec()),
        ])
        .unwrap();
        let path = dir.path().join("placeholders.env");
        // A symlink planted at the path must not be followed.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &path).unwrap();
        set.write_env_file(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = format!(
            "A_KEY={}\nB_KEY={}\n",
            set.placeholder("A_KEY").unwrap().as_str(),
            set.placeholder("B_KEY").unwrap().as_str()
        );
        assert_eq!(text, expected);
        assert!(!text.contains("value-"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(meta.file_type().is_file());
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
        // Nothing but the file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn env_file_errors_name_the_path() {
        let set = SecretSet::mint([("A".to_string(), VALUE.to_vec())]).unwrap();
        let err = set
            .write_env_file(Path::new("/nonexistent-dir-fenzi/placeholders.env"))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent-dir-fenzi/placeholders.env")
        );
    }
}
