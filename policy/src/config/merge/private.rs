//! The machine/project rule for `private:` lists (README "Configuration"): only the machine file
//! may name private ranges. A project file is written by whoever controls the repository the agent
//! works in, so a range it could add would be a door into the user's internal network opened by
//! someone else. A project may repeat a name the machine file gives ranges to and list ranges
//! inside the machine's (narrowing them: the project's list then replaces the machine's for that
//! name); any other `private:` in a project file is an error that names what was tried. Under a
//! team policy the machine file stands to the team policy as a project to the machine file.
//!
//! Uses the model and the merge's [`Layers`].

use super::Layers;
use crate::cidr::Cidr;
use crate::config::ConfigError;
use crate::config::model::private::PrivateName;
use crate::config::model::{Located, Origin, place};

fn list(ranges: &[Located<Cidr>]) -> String {
    ranges
        .iter()
        .map(|r| r.value.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The merged list: the machine's entries, except that a name the project narrows has the
/// project's entries instead. `errors` gets every project range that is not a narrowing.
pub(super) fn merge(
    machine: &[PrivateName],
    project: &[PrivateName],
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Vec<PrivateName> {
    let Layers {
        upper_file,
        lower,
        lower_file,
        ..
    } = *layers;
    let before = errors.len();
    for p in project {
        let same: Vec<&PrivateName> = machine.iter().filter(|m| m.pattern == p.pattern).collect();
        let Some(first) = same.first() else {
            errors.push(ConfigError {
                at: Some(p.at.clone()),
                message: format!(
                    "the {lower} names private ranges ({}) for {}; only the {upper_file} may",
                    list(&p.ranges),
                    p.pattern
                ),
                hint: Some(if layers.lower_origin == Origin::Project {
                    "a project file comes with the repository, so it cannot open the internal \
                     network: add the entry to the machine file (~/.config/fenzi/mcp.yaml) if you \
                     mean it, and remove `private` here"
                        .into()
                } else {
                    format!(
                        "under a team policy a {lower_file} cannot open the internal network: ask \
                         for the entry in the team policy, and remove `private` here"
                    )
                }),
            });
            continue;
        };
        let machine_ranges: Vec<&Located<Cidr>> =
            same.iter().flat_map(|m| m.ranges.iter()).collect();
        for r in &p.ranges {
            if !machine_ranges.iter().any(|m| m.value.covers(&r.value)) {
                let theirs = machine_ranges
                    .iter()
                    .map(|m| m.value.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                errors.push(ConfigError {
                    at: Some(r.at.clone()),
                    message: format!(
                        "the {lower} widens the private ranges of {} to {}, outside the \
                         {upper_file}'s ({theirs} at {})",
                        p.pattern,
                        r.value,
                        place(&first.at)
                    ),
                    hint: Some(format!(
                        "a {lower_file} may only narrow the private ranges of an entry of the \
                         {upper_file} (each range inside one of its); change the {upper_file} if \
                         you mean it"
                    )),
                });
            }
        }
    }
    if errors.len() > before {
        return machine.to_vec();
    }
    let mut out: Vec<PrivateName> = machine
        .iter()
        .filter(|m| !project.iter().any(|p| p.pattern == m.pattern))
        .cloned()
        .collect();
    out.extend(project.iter().cloned());
    out
}
