//! A secret value in memory: checked once when it is made (never empty, no CR, LF or NUL, bounded),
//! wiped when dropped, and never printed: `Debug` shows `<redacted>` and there is no `Display`.

use super::StoreError;
use zeroize::Zeroizing;

/// The longest value accepted, in bytes. The kernel keyring holds at most 32 767 bytes in a `user`
/// key; tokens and API keys are far shorter.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

/// A checked secret value. Get the text with [`SecretValue::expose`], only where it is sent.
#[derive(Clone)]
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    /// Checks `value` for the secret `name`. Errors name the secret and the problem, never the
    /// value. A value with CR, LF or NUL would let whoever holds it split an HTTP header.
    pub fn new(name: &str, value: Zeroizing<String>) -> Result<SecretValue, StoreError> {
        let problem = if value.is_empty() {
            Some("is empty")
        } else if value.len() > MAX_SECRET_BYTES {
            Some("is longer than 16 KiB")
        } else if value.contains('\r') {
            Some("contains a carriage return (CR)")
        } else if value.contains('\n') {
            Some("contains a line break (LF)")
        } else if value.contains('\0') {
            Some("contains a NUL character")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(StoreError::InvalidValue {
                name: name.to_string(),
                problem,
            }),
            None => Ok(SecretValue(value)),
        }
    }

    /// The value, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Builds a value from bytes read out of a store; the bytes are wiped on every path.
    pub(crate) fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<SecretValue, StoreError> {
        match String::from_utf8(bytes) {
            Ok(text) => SecretValue::new(name, Zeroizing::new(text)),
            Err(e) => {
                // Wipe the rejected bytes before reporting.
                drop(Zeroizing::new(e.into_bytes()));
                Err(StoreError::InvalidValue {
                    name: name.to_string(),
                    problem: "is not UTF-8 text",
                })
            }
        }
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(v: &str) -> Result<SecretValue, StoreError> {
        SecretValue::new("MCP_X", Zeroizing::new(v.to_string()))
    }

    #[test]
    fn refuses_header_splitting_characters_and_names_only_the_secret() {
        for (value, problem) in [
            ("", "is empty"),
            ("abc\r", "carriage return"),
            ("a\nb", "line break"),
            ("a\0b", "NUL"),
        ] {
            let e = make(value).unwrap_err().to_string();
            assert!(e.contains("MCP_X"), "{e}");
            assert!(e.contains(problem), "{e}");
        }
        let long = "x".repeat(MAX_SECRET_BYTES + 1);
        assert!(make(&long).is_err());
        assert!(make(&"x".repeat(MAX_SECRET_BYTES)).is_ok());
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
        assert!(!format!("{v:?}").contains("s3cr3t"));
    }

    #[test]
    fn bytes_must_be_utf8() {
        assert!(SecretValue::from_bytes("A", vec![0xff, 0xfe]).is_err());
        assert_eq!(
            SecretValue::from_bytes("A", b"tok".to_vec())
                .unwrap()
                .expose(),
            "tok"
        );
    }
}
