//! The machine + project rule for `tools.confirm` and `tools.confirm_timeout` (README, "Confirm"):
//! the project's patterns are added to the machine's (neither file can take one away), and the
//! project may shorten the machine's timeout, never lengthen it. After the merge, a
//! `confirm_timeout` on a server with no `confirm` pattern changes nothing: it is an error. (A
//! pattern no allowed tool can match is refused when the file is read, `schema/confirm.rs`.)
//!
//! Uses the model, `units` and the merge's [`Layers`].

use super::Layers;
use crate::config::ConfigError;
use crate::config::model::confirm::Confirm;
use crate::config::model::{Config, ServerKind, place};
use crate::config::units::show_duration;

/// The confirm settings of a machine server a project entry narrows: both files' patterns (each
/// once), and the project's timeout when it is not longer than the machine's.
pub(super) fn narrow(
    server: &str,
    machine: &Confirm,
    project: &Confirm,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Confirm {
    let Layers {
        upper,
        upper_file,
        lower,
        ..
    } = *layers;
    let mut tools = machine.tools.clone();
    for p in &project.tools {
        if !tools.iter().any(|m| m.value == p.value) {
            tools.push(p.clone());
        }
    }
    let (timeout, timeout_at) = match &project.timeout_at {
        Some(at) if project.timeout > machine.timeout => {
            let theirs = match &machine.timeout_at {
                Some(m) => format!(
                    "`confirm_timeout: {}` ({})",
                    show_duration(machine.timeout),
                    place(m)
                ),
                None => format!("default of {}", show_duration(machine.timeout)),
            };
            errors.push(ConfigError {
                at: Some(at.clone()),
                message: format!(
                    "the {lower} sets `confirm_timeout: {}` on {upper} server `{server}`, longer \
                     than the {upper}'s {theirs}",
                    show_duration(project.timeout)
                ),
                hint: Some(format!(
                    "a {lower} can only shorten how long a held call waits; write a shorter \
                     value, remove it to keep the {upper}'s, or change the {upper_file}"
                )),
            });
            (machine.timeout, machine.timeout_at.clone())
        }
        Some(at) => (project.timeout, Some(at.clone())),
        None => (machine.timeout, machine.timeout_at.clone()),
    };
    Confirm {
        tools,
        timeout,
        timeout_at,
    }
}

/// A `confirm_timeout` on a merged server that holds no call is an error: it would never apply.
pub(super) fn check_unused(config: &Config, errors: &mut Vec<ConfigError>) {
    for s in &config.mcp {
        let (ServerKind::Remote { tools, .. } | ServerKind::Account { tools, .. }) = &s.kind else {
            continue;
        };
        if let (true, Some(at)) = (tools.confirm.is_empty(), &tools.confirm.timeout_at) {
            errors.push(ConfigError {
                at: Some(at.clone()),
                message: format!(
                    "`confirm_timeout` on server `{}`, which holds no call: it has no `confirm` \
                     list",
                    s.name
                ),
                hint: Some(
                    "list the tools whose calls a person must confirm, e.g. `confirm: \
                     [delete_issue]`, or remove `confirm_timeout`"
                        .into(),
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::confirm::DEFAULT_CONFIRM_TIMEOUT;
    use crate::config::model::confirm::fixture::confirm;
    use std::time::Duration;

    #[test]
    fn a_project_adds_patterns_and_may_only_shorten_the_wait() {
        let mut errors = Vec::new();
        let merged = narrow(
            "s",
            &confirm(&["a"], Some(60)),
            &confirm(&["a", "b"], Some(30)),
            &super::super::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert!(errors.is_empty());
        let names: Vec<_> = merged.tools.iter().map(|p| p.value.to_string()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(merged.timeout, Duration::from_secs(30));

        // Omitted: the machine's stays, even the default.
        let merged = narrow(
            "s",
            &confirm(&["a"], None),
            &confirm(&[], None),
            &super::super::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert!(errors.is_empty());
        assert_eq!(merged.timeout, DEFAULT_CONFIRM_TIMEOUT);
        assert_eq!(merged.tools.len(), 1);

        // Longer than the machine's (here its default): refused, the machine's kept.
        let merged = narrow(
            "s",
            &confirm(&["a"], None),
            &confirm(&[], Some(600)),
            &super::super::PROJECT_ON_MACHINE,
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .message
                .contains("longer than the machine's default of 2m")
        );
        assert_eq!(merged.timeout, DEFAULT_CONFIRM_TIMEOUT);
    }
}
