//! The transparent path: connections from programs that ignore the proxy variables. Inside the
//! sandbox, names resolve through a DNS stub ([`dns`]) to synthetic addresses ([`crate::session::synthetic`]), and
//! fenzi listens on every port the policy names at every address of the sandbox's loopback (the
//! synthetic range and the policy's IP literals among them). A connection accepted there is where
//! the program wanted to go: its local address gives back the name (or is itself the IP literal),
//! and it is admitted exactly as a CONNECT to that name and port would be, with the same one
//! decision and one audit record (method `CONNECT`). An admitted connection is then intercepted or
//! passed through, as a CONNECT tunnel is. A refused one is recorded and closed: there is no HTTP
//! exchange to answer in.
//!
//! May use: `request`, `session`, `attribution`, `audit`, `connection`, `error`, `options`.

pub mod dns;

use crate::attribution::Attributed;
use crate::audit::sink::Subject;
use crate::connection::capacity::Tracked;
use crate::connection::tunnel;
use crate::request::admit::{Destination, admit_tunnel};
use crate::request::intercept;
use crate::request::refusal::Refusal;
use crate::request::upstream::dial;
use crate::session::context::{ConnGuard, SessionContext};
use crate::session::synthetic::SyntheticNames;
use fenzi_policy::host::Host;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpStream;

/// Serves one connection accepted on a transparent listener.
pub(crate) async fn serve(
    session: Arc<SessionContext>,
    stream: Tracked<TcpStream>,
    guard: ConnGuard,
) {
    let _ = stream.set_nodelay(true);
    let local = match stream.local_addr() {
        Ok(local) => local,
        Err(e) => {
            tracing::debug!("transparent connection without a local address: {e}");
            return;
        }
    };
    let dest = match check_destination(&session, guard.peer(), guard.program(), local).await {
        Ok(dest) => Arc::new(dest),
        Err(refusal) => return refusal.record(&session),
    };
    if dest.inspect {
        return intercept::serve(session, dest, stream, guard).await;
    }
    let upstream = match dial(&session, &dest).await {
        Ok(upstream) => upstream,
        Err(error) => {
            let subject = dest.subject("CONNECT", None);
            return Refusal::failed(&subject, error).record(&session);
        }
    };
    let done = tunnel::splice(stream, upstream, session.options.idle_timeout).await;
    tracing::debug!(host = %dest.host, port = dest.port, ?done, "transparent tunnel closed");
    drop(guard);
}

/// The destination a connection to `local` (its address inside the sandbox) means, admitted and
/// its allowing decision recorded; or the refusal.
async fn check_destination(
    session: &SessionContext,
    client: SocketAddr,
    program: &Attributed,
    local: SocketAddr,
) -> Result<Destination, Refusal> {
    let port = local.port();
    let host = match local.ip() {
        IpAddr::V4(ip) if SyntheticNames::is_synthetic(ip) => match session.synthetic.name_of(ip) {
            Some(name) => Host::Name(name),
            None => {
                let subject =
                    Subject::new(client, "CONNECT", ip.to_string(), port, None).by(program);
                let why = format!(
                    "{ip} is in the range fenzi's DNS stub answers from, but was never handed out"
                );
                return Err(Refusal::bad_request(&subject, &why));
            }
        },
        ip => Host::Ip(ip),
    };
    let subject = Subject::new(client, "CONNECT", host.to_string(), port, None).by(program);
    admit_tunnel(session, &host, port, &subject).await
}
