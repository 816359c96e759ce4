//! What fenzi accepts of how an upstream frames its answer, checked on the head before any of the
//! body is read or passed on (SECURITY.md, "the deputy"; README, "Secrets"):
//!
//! - The only transfer-coding is `chunked`, once. Any other (`gzip, chunked`, `identity`, a name
//!   fenzi does not know) hides the body's bytes from the scrubber and the MCP reader, or leaves
//!   its framing to the upstream's say (read until close), so it is refused. An answer framed both
//!   ways (`chunked` and a `Content-Length`) is read chunked, and loses the length it did not use
//!   (RFC 9112 §6.3), so that no one after fenzi frames it by the other.
//! - A request a secret value was written into gets no `206 Partial Content`: such a request goes
//!   without `Range`/`If-Range` ([`crate::secrets::substitute`]), and an answer in pieces could
//!   carry a value cut where no piece holds it whole, out of the scrubber's reach.
//!
//! A refusal names the rule in fenzi's own words; nothing the upstream wrote is quoted.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::response::Parts;
use http::{HeaderMap, StatusCode};

/// An upstream answer refused for its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unaccepted {
    #[error(
        "the answer's Transfer-Encoding is not chunked, the only transfer-coding fenzi accepts \
         from an upstream"
    )]
    TransferCoding,
    #[error(
        "the answer is 206 Partial Content to a request a secret value was written into; fenzi \
         passes on such answers only whole"
    )]
    PartialContent,
}

/// Checks the head of an upstream's answer to a request that had a secret value written into it
/// (`swapped`) or not, and drops a `Content-Length` that chunked framing overrode.
pub(crate) fn check(head: &mut Parts, swapped: bool) -> Result<(), Unaccepted> {
    check_transfer_coding(&head.headers)?;
    if head.headers.contains_key(TRANSFER_ENCODING) {
        head.headers.remove(CONTENT_LENGTH);
    }
    if swapped && head.status == StatusCode::PARTIAL_CONTENT {
        return Err(Unaccepted::PartialContent);
    }
    Ok(())
}

/// No `Transfer-Encoding`, or exactly one saying `chunked` (any letter case): what HTTP/1.1's
/// client framing reads as chunked and nothing else.
fn check_transfer_coding(headers: &HeaderMap) -> Result<(), Unaccepted> {
    let mut values = headers.get_all(TRANSFER_ENCODING).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(()),
        (Some(one), None) if one.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(()),
        _ => Err(Unaccepted::TransferCoding),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Response;

    fn head(status: u16, codings: &[&str]) -> Parts {
        let mut builder = Response::builder().status(status);
        for coding in codings {
            builder = builder.header("transfer-encoding", *coding);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_chunked_once_is_accepted() {
        for accepted in [&[][..], &["chunked"], &["Chunked"], &[" CHUNKED "]] {
            let mut head = head(200, accepted);
            head.headers.insert(CONTENT_LENGTH, "3".parse().unwrap());
            assert_eq!(check(&mut head, true), Ok(()), "{accepted:?}");
            // Read chunked, it keeps no length; without a transfer-coding, the length frames it.
            assert_eq!(
                head.headers.contains_key(CONTENT_LENGTH),
                accepted.is_empty()
            );
        }
        let refused: [&[&str]; 9] = [
            &["gzip, chunked"],
            &["chunked, gzip"],
            &["identity"],
            &["chunked, chunked"],
            &["chunked,"],
            &[", chunked"],
            &["gzip", "chunked"],
            &["chunked", "chunked"],
            &["sk-live-0123456789abcdef"],
        ];
        for codings in refused {
            let error = check(&mut head(200, codings), false).unwrap_err();
            assert_eq!(error, Unaccepted::TransferCoding, "{codings:?}");
            // fenzi's words only: nothing the upstream wrote is quoted.
            for word in ["gzip", "identity", "sk-live"] {
                assert!(!error.to_string().contains(word), "{error}");
            }
        }
    }

    #[test]
    fn partial_content_is_refused_only_after_a_swap() {
        assert_eq!(
            check(&mut head(206, &[]), true),
            Err(Unaccepted::PartialContent)
        );
        assert_eq!(check(&mut head(206, &[]), false), Ok(()));
        assert_eq!(check(&mut head(200, &[]), true), Ok(()));
    }
}
