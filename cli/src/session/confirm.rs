//! The control socket of a session whose policy holds calls for a person (`tools.confirm`):
//! bound by `fenzi proxy` and `fenzi run` before the proxy starts, answered by `fenzi approve
//! --watch` (see `fenzi_proxy::confirm`).

use anyhow::{Context, Result, anyhow};
use fenzi_policy::engine::Policy;
use fenzi_proxy::confirm::{ControlSocket, control_dir};

/// The session's control socket when any server of `policy` has a `confirm` list; `None` when
/// none has. A policy that holds calls with nowhere to answer them does not start: its held
/// calls could only time out.
pub fn control_socket(policy: &Policy, session: &str) -> Result<Option<ControlSocket>> {
    if policy.servers().iter().all(|s| s.confirm.is_empty()) {
        return Ok(None);
    }
    let dir = control_dir().ok_or_else(|| {
        anyhow!(
            "the policy holds calls for confirmation (`confirm`), but there is no directory for \
             the control socket: set XDG_RUNTIME_DIR (or XDG_STATE_HOME or HOME)"
        )
    })?;
    let socket = ControlSocket::bind(&dir, session).with_context(|| {
        format!(
            "the policy holds calls for confirmation (`confirm`), but the control socket cannot \
             be made in {}",
            dir.display()
        )
    })?;
    Ok(Some(socket))
}

/// The line both commands print about it.
pub fn control_note(socket: &ControlSocket) -> String {
    format!(
        "confirm: held calls wait for `fenzi approve --watch` in another terminal (control socket {})",
        socket.path().display()
    )
}
