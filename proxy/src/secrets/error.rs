//! The one error type of the secrets machinery. Every message names the secret (its variable name)
//! and never carries a value or a placeholder, so an error can be logged, printed and audited as is.

use std::path::PathBuf;

/// What went wrong loading secrets, minting placeholders, writing `placeholders.env`, or placing a
/// value into a request.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error(
        "secret name {0:?} is not valid: use upper-case letters, digits and '_', not starting with a digit"
    )]
    BadName(String),
    #[error("secret {0} is given twice")]
    Duplicate(String),
    #[error(
        "secret {0} has a value but the policy binds it to no host; remove it or bind it in fenzi.yaml"
    )]
    Unbound(String),
    /// A value that cannot be a secret (see [`crate::credstore::SecretValue`]).
    #[error(transparent)]
    InvalidValue(#[from] crate::credstore::InvalidValue),
    #[error(
        "secret {name}: the given token is not a placeholder (it must be `fenzi_ph_` followed by at \
         least 32 characters from A-Z a-z 0-9 _ -)"
    )]
    BadPlaceholder { name: String },
    #[error("no randomness to mint placeholders: {0}")]
    Random(String),
    #[error("could not build the placeholder matcher: {0}")]
    Matcher(String),
    #[error("secret {name}: the value is not UTF-8, so it cannot be written into {place}")]
    Unplaceable { name: String, place: &'static str },
    /// The cause is in the message, not also a `source`, so a chain printer names it once.
    #[error("writing {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}
