//! The loopback redirect of a sign-in (RFC 8252 §7.3): a listener on `127.0.0.1`, on a port the
//! system picks, that waits for the one request the browser brings back from the authorization
//! server and reads its code (`oauth_client::read_redirect`, which checks the `state`). Other
//! paths (a browser's `/favicon.ico`) get `404` and the wait goes on; a redirect with the wrong
//! `state` or an error ends the sign-in. Nothing but this request is read; nothing is stored.

use fenzi_policy::mcp::oauth_client::{RedirectError, read_redirect};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The path the redirect comes back to.
pub const PATH: &str = "/callback";
/// Largest request head read.
const MAX_HEAD: usize = 16 * 1024;

/// The bound listener and its redirect URI.
pub struct Redirect {
    listener: TcpListener,
    pub uri: String,
}

impl Redirect {
    /// Listens on `127.0.0.1:0`.
    pub async fn bind() -> Result<Redirect, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1 for the redirect: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("cannot listen on 127.0.0.1 for the redirect: {e}"))?
            .port();
        Ok(Redirect {
            listener,
            uri: format!("http://127.0.0.1:{port}{PATH}"),
        })
    }

    /// Waits up to `timeout` for the redirect carrying `state`, and returns its code.
    pub async fn wait(self, state: &str, timeout: Duration) -> Result<String, String> {
        match tokio::time::timeout(timeout, self.accept_loop(state)).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no sign-in came back to {} within {}s: the browser was not sent back here (an \
                 authorization server that redirects to another address or port is not \
                 followed), or the sign-in was not finished; nothing was stored",
                self.uri_hint(),
                timeout.as_secs()
            )),
        }
    }

    fn uri_hint(&self) -> String {
        self.listener
            .local_addr()
            .map(|a| format!("http://{a}{PATH}"))
            .unwrap_or_else(|_| "the loopback redirect".into())
    }

    async fn accept_loop(&self, state: &str) -> Result<String, String> {
        loop {
            let (mut stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|e| format!("the redirect listener failed: {e}"))?;
            let Some(target) = read_target(&mut stream).await else {
                let _ = respond(&mut stream, "400 Bad Request", "Not a request fenzi reads.").await;
                continue;
            };
            match read_redirect(&target, PATH, state) {
                Ok(code) => {
                    let _ = respond(
                        &mut stream,
                        "200 OK",
                        "Signed in. fenzi keeps the token; you can close this page.",
                    )
                    .await;
                    return Ok(code);
                }
                Err(RedirectError::WrongPath) => {
                    let _ = respond(&mut stream, "404 Not Found", "Not here.").await;
                }
                Err(e) => {
                    let _ = respond(
                        &mut stream,
                        "400 Bad Request",
                        "fenzi did not accept this sign-in; see the terminal.",
                    )
                    .await;
                    return Err(format!(
                        "the sign-in came back unusable: {e}; nothing was stored"
                    ));
                }
            }
        }
    }
}

/// The target of a `GET` request line, or `None` for anything else.
async fn read_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = std::str::from_utf8(&buf).ok()?;
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    (method == "GET" && version.starts_with("HTTP/1.") && parts.next().is_none())
        .then(|| target.to_string())
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    text: &str,
) -> std::io::Result<()> {
    let page = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nconnection: close\r\n\r\n{text}\n",
        text.len() + 1
    );
    stream.write_all(page.as_bytes()).await?;
    stream.shutdown().await
}
