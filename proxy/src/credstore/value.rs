//! The one secret-value type of fenzi: what the credential store keeps, what `fenzi mcp token`
//! stores, what `FENZI_SECRET_<NAME>` loads and what the proxy sends. It is checked once, when it is
//! made, with the rules the proxy needs to carry it safely, so that a value accepted anywhere can
//! never later stop the proxy from starting: UTF-8 text, at least [`MIN_SECRET_BYTES`] and at most
//! [`MAX_SECRET_BYTES`] bytes, no control characters except TAB (CR, LF and NUL would split or cut
//! an HTTP header; the other control characters cannot be carried in one either). It is wiped when
//! dropped and never printed: `Debug` shows `<redacted>` and there is no `Display`.

use zeroize::Zeroizing;

/// The longest value accepted, in bytes. The kernel keyring holds at most 32 767 bytes in a `user`
/// key; tokens and API keys are far shorter.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

/// The shortest value accepted, in bytes. The proxy replaces every occurrence of a value in
/// responses by its placeholder; a value shorter than this would match ordinary text (and mangle
/// it), and would be guessable besides.
pub const MIN_SECRET_BYTES: usize = 8;

/// Why a value was refused. Names the secret and the problem, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the value for {name} {problem}")]
pub struct InvalidValue {
    pub name: String,
    pub problem: &'static str,
}

/// A checked secret value. Get the text with [`SecretValue::expose`], only where it is sent.
#[derive(Clone)]
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    /// Checks `value` for the secret `name`.
    pub fn new(name: &str, value: Zeroizing<String>) -> Result<SecretValue, InvalidValue> {
        match problem(value.as_bytes()) {
            Some(problem) => Err(InvalidValue {
                name: name.to_string(),
                problem,
            }),
            None => Ok(SecretValue(value)),
        }
    }

    /// Checks bytes (read from a store or the environment) as the value of `name`; the bytes are
    /// wiped on every path.
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<SecretValue, InvalidValue> {
        match String::from_utf8(bytes) {
            Ok(text) => SecretValue::new(name, Zeroizing::new(text)),
            Err(e) => {
                drop(Zeroizing::new(e.into_bytes()));
                Err(InvalidValue {
                    name: name.to_string(),
                    problem: "is not UTF-8 text",
                })
            }
        }
    }

    /// The value, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// What is wrong with `bytes` as a value, if anything. Header-splitting bytes are named before the
/// length, so the most useful problem is reported.
fn problem(bytes: &[u8]) -> Option<&'static str> {
    if bytes.is_empty() {
        return Some("is empty");
    }
    if bytes.len() > MAX_SECRET_BYTES {
        return Some("is longer than 16 KiB");
    }
    if let Some(&b) = bytes
        .iter()
        .find(|&&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Some(match b {
            b'\r' => "contains a carriage return (CR), which cannot be carried in an HTTP header",
            b'\n' => "contains a line break (LF), which cannot be carried in an HTTP header",
            0 => "contains a NUL character, which cannot be carried in an HTTP header",
            _ => "contains a control character (only TAB is allowed)",
        });
    }
    if bytes.len() < MIN_SECRET_BYTES {
        return Some(
            "is shorter than 8 bytes; a value that short would also match ordinary text, so \
             the proxy could not reliably keep it out of responses",
        );
    }
    None
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(v: &str) -> Result<SecretValue, InvalidValue> {
        SecretValue::new("MCP_X", Zeroizing::new(v.to_string()))
    }

    #[test]
    fn refuses_header_splitting_and_control_characters_naming_only_the_secret() {
        for (value, problem) in [
            ("", "is empty"),
            ("abcdefgh\r", "carriage return"),
            ("abcd\nefgh", "line break"),
            ("abcd\0efgh", "NUL"),
            ("abcd\x1befgh", "control character"),
            ("abcd\x7fefgh", "control character"),
            ("abc\r", "carriage return"),
            ("1234567", "shorter than 8 bytes"),
        ] {
            let e = make(value).unwrap_err().to_string();
            assert!(e.contains("MCP_X"), "{e}");
            assert!(e.contains(problem), "{value:?}: {e}");
        }
        let long = "x".repeat(MAX_SECRET_BYTES + 1);
        assert!(make(&long).unwrap_err().problem.contains("16 KiB"));
        assert!(make(&"x".repeat(MAX_SECRET_BYTES)).is_ok());
        assert!(make("12345678").is_ok());
        // TAB and non-ASCII text are fine.
        assert!(make("ab\tcd-é-efgh").is_ok());
    }

    #[test]
    fn error_never_holds_the_value() {
        let e = make("s3cr3t-value\n").unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"));
        assert!(!format!("{e:?}").contains("s3cr3t"));
    }

    #[test]
    fn debug_is_redacted() {
        let v = make("s3cr3t-value").unwrap();
        assert_eq!(v.expose(), "s3cr3t-value");
        assert_eq!(v.as_bytes(), b"s3cr3t-value");
        assert!(!format!("{v:?}").contains("s3cr3t"));
    }

    #[test]
    fn bytes_must_be_utf8_and_pass_the_same_checks() {
        let e = SecretValue::from_bytes("A", b"\xff\xfe-binary-value".to_vec()).unwrap_err();
        assert_eq!(e.problem, "is not UTF-8 text");
        assert!(SecretValue::from_bytes("A", b"tok".to_vec()).is_err());
        assert_eq!(
            SecretValue::from_bytes("A", b"token-value".to_vec())
                .unwrap()
                .expose(),
            "token-value"
        );
    }
}
