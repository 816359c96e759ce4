//! A top-level secret's `in:` (README, "Secrets") in a policy file: reading and checking the list
//! of positions and its relation to `body`. The machine/project merge, where a project may narrow a
//! machine secret's positions and never widen them, is `merge/positions.rs`; what a position means
//! is `crate::secret_position`.
//!
//! Decisions:
//! - `in` is a non-empty list of distinct positions (`header:` names compared case-insensitively).
//!   `in: []` is an error: a secret that may be swapped nowhere is a secret to remove.
//! - `in` listing `body` means body substitution; `body: true` next to an `in` without `body` is an
//!   error (the two would disagree), and `body: true` next to an `in` with it is accepted.
//! - Without `in`, a secret keeps the default: any header value and the query, the body when
//!   `body: true`. For the merge, that default holds every `header:` and `query:` position, and
//!   `body` exactly when the machine says `body: true`.
//! - Messages quote a position only once it parsed (its names are header and parameter names);
//!   a text that did not parse is described, never repeated.

use crate::config::ConfigError;
use crate::config::model::{Located, Location, place};
use crate::config::yaml::{Node, Value};
use crate::secret_position::{PositionError, SecretPosition};
use std::sync::Arc;

const IN_HINT: &str = "list where the placeholder may be swapped, e.g. \
     `in: [header:Authorization, query:token, body]`; leave `in` out for the default (any header \
     value and the query string)";

fn error(file: &Arc<str>, node: &Node, key: &str, message: String, hint: &str) -> ConfigError {
    ConfigError {
        at: Some(at(file, node, key)),
        message,
        hint: Some(hint.to_string()),
    }
}

fn at(file: &Arc<str>, node: &Node, key: &str) -> Location {
    Location {
        file: file.clone(),
        line: node.line,
        column: node.column,
        key: key.to_string(),
    }
}

/// Reads `in:` (`node`, at key path `path`). `None` when it has errors, all pushed to `errors`.
pub(super) fn read(
    file: &Arc<str>,
    node: &Node,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Vec<Located<SecretPosition>>> {
    let Value::Seq(items) = &node.value else {
        errors.push(error(
            file,
            node,
            path,
            format!("expected a list of positions, found {}", node.value.kind()),
            IN_HINT,
        ));
        return None;
    };
    if items.is_empty() {
        errors.push(error(
            file,
            node,
            path,
            "`in` lists no position, so the secret could be swapped nowhere".into(),
            IN_HINT,
        ));
        return None;
    }
    let before = errors.len();
    let mut out: Vec<Located<SecretPosition>> = vec![];
    for (i, item) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let Value::Str(text) = &item.value else {
            errors.push(error(
                file,
                item,
                &key,
                format!("expected a position, found {}", item.value.kind()),
                IN_HINT,
            ));
            continue;
        };
        let position = match SecretPosition::parse(text) {
            Ok(p) => p,
            Err(e) => {
                let (message, hint) = words(&e);
                errors.push(error(file, item, &key, message, &hint));
                continue;
            }
        };
        if let Some(first) = out.iter().find(|p| p.value.same_place(&position)) {
            errors.push(error(
                file,
                item,
                &key,
                format!(
                    "position `{position}` is listed twice (first at {})",
                    place(&first.at)
                ),
                "list each position once; header names are compared without regard to case",
            ));
            continue;
        }
        out.push(Located {
            value: position,
            at: at(file, item, &key),
        });
    }
    (errors.len() == before).then_some(out)
}

/// The message and hint for a position that did not parse.
fn words(e: &PositionError) -> (String, String) {
    let kinds = "a position is `header:NAME`, `query:NAME` or `body`".to_string();
    match e {
        PositionError::UnknownKind(Some(kind)) => {
            let hint = match ["header", "query", "body"]
                .iter()
                .find(|k| k.eq_ignore_ascii_case(kind))
            {
                Some(k) => format!("position kinds are lower case: did you mean `{k}`?"),
                None => kinds,
            };
            (format!("unknown position kind `{kind}`"), hint)
        }
        PositionError::UnknownKind(None) => ("not a position".into(), kinds),
        PositionError::EmptyName(kind) => (
            format!("`{kind}:` needs a name after the colon"),
            format!(
                "write e.g. `{kind}:{}`",
                if *kind == "header" {
                    "Authorization"
                } else {
                    "token"
                }
            ),
        ),
        PositionError::BadHeaderName => (
            "the header name is not an HTTP token".into(),
            "a header name is letters, digits and !#$%&'*+-.^_`|~, e.g. `header:X-Api-Key`".into(),
        ),
        PositionError::UnnameableHeader(name) => (
            format!(
                "`header:{name}` cannot be a position: the proxy removes or writes that header itself"
            ),
            "name the header the upstream reads the credential from, e.g. `header:Authorization`"
                .into(),
        ),
        PositionError::BadQueryName => (
            "the query parameter name holds characters a position does not allow".into(),
            "a query parameter name is letters, digits and -._~[], written as the server reads it \
             (decoded), e.g. `query:api_key`"
                .into(),
        ),
        PositionError::BodyWithName => (
            "`body` takes no name".into(),
            "write `body`: the whole body is one position".into(),
        ),
    }
}

/// `body: true` (written at `body_key`) next to an `in` that does not list `body`.
pub(super) fn check_body(
    file: &Arc<str>,
    body_key: &Node,
    path: &str,
    positions: &[Located<SecretPosition>],
    errors: &mut Vec<ConfigError>,
) {
    if !positions.iter().any(|p| p.value == SecretPosition::Body) {
        errors.push(error(
            file,
            body_key,
            path,
            "`body: true`, but `in` does not list `body`".into(),
            "with `in`, the list alone says where the placeholder is swapped: add `body` to `in`, \
             or remove `body: true`",
        ));
    }
}
